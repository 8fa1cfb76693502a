"""Checkpoints in the official format: loading, creating fresh models, tokenizers."""

from dare.modeling.block_family import BlockDiffusionFamily, block_decoder_problem, config_value
from dare.modeling.checkpoint import create_model, load_model, LoadedModel
from dare.modeling.tokenizer import build_byte_tokenizer

__all__ = [
    "create_model",
    "load_model",
    "LoadedModel",
    "build_byte_tokenizer",
    "BlockDiffusionFamily",
    "block_decoder_problem",
    "config_value",
]
