"""The stratified ELBO-MC estimator (VRPO/BGPO mask counts ``k/L``) as estimator passes.

The corruptions themselves come from :func:`dare.diffusion.elbo.sample_corruptions` (stratified mask
counts ``k_j`` over ``[1, L]``, ``p_mask = k_j / L``; docs/algorithms.md §3.3, §3.7); this module only
presents them in the :class:`~dare.diffusion.estimators.base.Pass` form: one pass per Monte-Carlo
sample ``j``, masking ``k_j`` response tokens, weight ``1 / p_mask_j`` on each, so a pass's sequence
score is the ELBO term ``sum_{i masked} lp_i / p_mask_j`` (raw nats, not length-normalised).
"""

from __future__ import annotations

import torch
from pydantic import Field

from dare.diffusion.elbo import Scheme, sample_corruptions
from dare.components import Params
from dare.diffusion.estimators.base import Estimator, Pass, ScoringBatch

__all__ = ["StratifiedELBOParams", "StratifiedELBOEstimator"]


class StratifiedELBOParams(Params):
    """Parameters of :class:`StratifiedELBOEstimator`."""

    mc_num: int = Field(16, ge=1, description="Monte-Carlo ELBO terms (one forward pass each).")
    scheme: Scheme = Field("stratified", description="stratified mask counts over [1, L] (VRPO), uniform i.i.d. "
                           "counts, or bernoulli i.i.d. ratios t (the SFT forward process).")
    mask_eps: float = Field(1e-3, ge=0.0, lt=1.0, description="Smallest ratio t of the bernoulli scheme.")


class StratifiedELBOEstimator(Estimator):
    """``mc_num`` ELBO terms with stratified (or uniform/Bernoulli) mask counts, one pass each."""

    name = "mc-elbo"
    level = "sequence"

    Params = StratifiedELBOParams

    def draw(self, batch: ScoringBatch, generator: torch.Generator | None = None) -> list[Pass]:
        p = self.params
        corr = sample_corruptions(batch.completion_mask, p.mc_num, p.scheme, generator, eps=p.mask_eps)
        no_prompt = torch.zeros(batch.num_rows, batch.prompt_length, dtype=torch.bool, device=corr.mask.device)
        passes = []
        for j in range(p.mc_num):
            masked = corr.mask[:, j]
            weight = masked.float() / corr.p_mask[:, j : j + 1]
            passes.append(Pass(mask=torch.cat([no_prompt, masked], 1)[None], weight=weight[None]))
        return passes
