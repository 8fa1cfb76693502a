"""The stratified ELBO-MC estimator (VRPO/BGPO mask counts ``k/L``) as estimator passes.

The corruptions themselves come from :func:`dare.diffusion.elbo.sample_corruptions` (stratified mask
counts ``k_j`` over ``[1, L]``, ``p_mask = k_j / L``; docs/algorithms.md §3.3, §3.7); this module only
presents them in the :class:`~dare.diffusion.estimators.base.Pass` form: one pass per Monte-Carlo
sample ``j``, masking ``k_j`` response tokens, weight ``1 / p_mask_j`` on each, so a pass's sequence
score is the ELBO term ``sum_{i masked} lp_i / p_mask_j`` (raw nats, not length-normalised).
"""

from __future__ import annotations

import torch

from dare.diffusion.elbo import Scheme, sample_corruptions
from dare.diffusion.estimators.base import Estimator, Pass, ScoringBatch

__all__ = ["StratifiedELBOEstimator"]


class StratifiedELBOEstimator(Estimator):
    """``mc_num`` ELBO terms with stratified (or uniform/Bernoulli) mask counts, one pass each."""

    level = "sequence"

    def __init__(self, mc_num: int = 16, scheme: Scheme = "stratified"):
        if mc_num < 1:
            raise ValueError(f"mc_num must be >= 1, got {mc_num}")
        self.mc_num, self.scheme = mc_num, scheme

    def draw(self, batch: ScoringBatch, generator: torch.Generator | None = None) -> list[Pass]:
        corr = sample_corruptions(batch.completion_mask, self.mc_num, self.scheme, generator)
        no_prompt = torch.zeros(batch.num_rows, batch.prompt_length, dtype=torch.bool, device=corr.mask.device)
        passes = []
        for j in range(self.mc_num):
            masked = corr.mask[:, j]
            weight = masked.float() / corr.p_mask[:, j : j + 1]
            passes.append(Pass(mask=torch.cat([no_prompt, masked], 1)[None], weight=weight[None]))
        return passes
