"""Checkpoints in the official format: loading, creating fresh models, tokenizers; gradient checkpointing."""

from dare.modeling.block_family import BlockDiffusionFamily, block_decoder_problem, config_value
from dare.modeling.checkpoint import create_model, load_model, LoadedModel
from dare.modeling.gradient_checkpointing import enable_gradient_checkpointing
from dare.modeling.tokenizer import build_byte_tokenizer

__all__ = [
    "create_model",
    "load_model",
    "LoadedModel",
    "build_byte_tokenizer",
    "enable_gradient_checkpointing",
    "BlockDiffusionFamily",
    "block_decoder_problem",
    "config_value",
]
