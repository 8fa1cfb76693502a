"""Shared decoding pieces: transfer schedules, Gumbel sampling, remasking rules, trajectory records.

Samplers in family plugins are assembled from these functions, so a schedule or remasking rule is
written (and tested) once.
"""

from dare.sampling.schedule import block_quota, num_transfer_tokens
from dare.sampling.noise import add_gumbel_noise, filter_top_k_top_p, sample_categorical
from dare.sampling.remasking import confidence_scores, topk_transfer
from dare.sampling.trajectory import Trajectory, completion_mask

__all__ = [
    "num_transfer_tokens",
    "block_quota",
    "add_gumbel_noise",
    "filter_top_k_top_p",
    "sample_categorical",
    "confidence_scores",
    "topk_transfer",
    "Trajectory",
    "completion_mask",
]
