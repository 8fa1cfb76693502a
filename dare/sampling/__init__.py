"""Shared decoding pieces: transfer schedules, Gumbel sampling, token proposals, remasking rules, block
canvases, parallel-decoding rules, the block-wise KV cache, trajectory records.

Samplers in family plugins are assembled from these functions, so a schedule or remasking rule is
written (and tested) once.
"""

from dare.sampling.schedule import block_quota, num_transfer_tokens
from dare.sampling.noise import add_gumbel_noise, filter_top_k_top_p, sample_categorical
from dare.sampling.tokens import (
    BLOCK_RULE,
    DREAM_RULE,
    NonFiniteLogitsError,
    ProposalRule,
    require_finite_logits,
    row_index,
    sample_tokens,
)
from dare.sampling.canvas import BlockCanvas, block_canvas, left_padding_problem
from dare.sampling.remasking import (
    FASTDLLM_CONFIDENCE_DTYPE,
    confidence_scores,
    fastdllm_confidence,
    fastdllm_probs,
    proposal_probability,
    topk_transfer,
)
from dare.sampling.parallel import factor_transfer, threshold_transfer
from dare.sampling.kv_cache import CACHE_MODES, BlockKVCache, kv_logits_of
from dare.sampling.trajectory import Trajectory, completion_mask
from dare.sampling.bundle import DecodingBundle

__all__ = [
    "num_transfer_tokens",
    "block_quota",
    "add_gumbel_noise",
    "filter_top_k_top_p",
    "sample_categorical",
    "sample_tokens",
    "row_index",
    "ProposalRule",
    "BLOCK_RULE",
    "DREAM_RULE",
    "NonFiniteLogitsError",
    "require_finite_logits",
    "BlockCanvas",
    "block_canvas",
    "left_padding_problem",
    "confidence_scores",
    "FASTDLLM_CONFIDENCE_DTYPE",
    "fastdllm_confidence",
    "fastdllm_probs",
    "proposal_probability",
    "topk_transfer",
    "threshold_transfer",
    "factor_transfer",
    "CACHE_MODES",
    "BlockKVCache",
    "kv_logits_of",
    "Trajectory",
    "completion_mask",
    "DecodingBundle",
]
