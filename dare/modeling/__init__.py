"""Checkpoints in the official format: loading, creating fresh models, tokenizers; gradient checkpointing.

The names below are imported from their submodules on first access (PEP 562), so importing a
torch-free submodule (:mod:`dare.modeling.locate`, used by spec validation) does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dare.lazy import lazy_exports

if TYPE_CHECKING:  # pragma: no cover
    from dare.modeling.block_family import BlockDiffusionFamily, block_decoder_problem, config_value
    from dare.modeling.checkpoint import LoadedModel, create_model, load_model
    from dare.modeling.gradient_checkpointing import enable_gradient_checkpointing
    from dare.modeling.tokenizer import build_byte_tokenizer

#: Public name -> the submodule that defines it.
_HOME = {
    "create_model": "checkpoint",
    "load_model": "checkpoint",
    "LoadedModel": "checkpoint",
    "build_byte_tokenizer": "tokenizer",
    "enable_gradient_checkpointing": "gradient_checkpointing",
    "BlockDiffusionFamily": "block_family",
    "block_decoder_problem": "block_family",
    "config_value": "block_family",
}

__all__ = list(_HOME)


__getattr__, __dir__ = lazy_exports(__name__, {name: f"{__name__}.{sub}" for name, sub in _HOME.items()})
