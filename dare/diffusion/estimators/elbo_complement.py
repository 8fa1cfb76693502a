"""Complementary-mask sequence ELBO with the ``(L + 1)`` denominator (ESPO, arXiv 2512.03759 §3;
DARE ``_forward_process_espo`` and ``compute_espo_sequence_elbo``; docs/algorithms.md §3.11).

For a response of ``L = |y|`` tokens, draw a mask count ``k in {0, ..., L}`` and mask ``k`` random
response tokens; ``p = k / (L + 1)`` (the ``L + 1`` denominator keeps both weights finite
for every ``k``, including 0 and ``L``). The sequence ELBO estimate is::

    l_mask = sum_{i masked} lp_i(x~) / p
    l_comp = sum_{i unmasked} lp_i(x~^c) / (L / (L + 1) - p)     x~^c masks the complement
    l      = (l_mask + l_comp) / 2       (variance reduction, ``reduce_var``; else l = l_mask)

Mask counts are *stratified* over the rows of the batch when all rows have the same ``L`` (always for
EOS-padded families): ``k_b = round(k + b (L + 1) / B) mod (L + 1)`` with one ``k ~ U{0..L}``;
otherwise each row draws its own ``k``. One pass = one Monte-Carlo sample (two forwards with
``reduce_var``); the ESPO objective averages ``mc_num`` passes and normalises by ``L`` itself.
The prompt is never masked. Values are raw sums (not divided by the length).
"""

from __future__ import annotations

import torch
from pydantic import Field

from dare.components import Params
from dare.diffusion.estimators.base import Estimator, Pass, ScoringBatch, uniform
from dare.randomness import RowGenerators

__all__ = ["ComplementaryELBOParams", "ComplementaryELBOEstimator", "stratified_counts", "complement_pass"]


def stratified_counts(lengths: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Mask counts ``k_b in {0, ..., L_b}`` (module docstring).

    With per-row generators (:class:`dare.randomness.RowGenerators`, what the RL trainer passes so that a
    row's draws do not depend on the batch or the process count) every row draws its own uniform count:
    still unbiased, without the stratification across the rows of one batch.

    :param lengths: ``[N]`` int64 response lengths ``L_b``.
    :returns: ``[N]`` int64.
    """
    N = lengths.numel()
    if N > 0 and bool((lengths == lengths[0]).all()) and not isinstance(generator, RowGenerators):
        L = int(lengths[0])
        k = min(int(float(uniform((), generator, "cpu")) * (L + 1)), L)
        offsets = torch.arange(N, dtype=torch.float64) * (L + 1) / N
        return (torch.floor(k + offsets + 0.5).long() % (L + 1)).to(lengths.device)
    u = uniform((N,), generator, "cpu").double()
    return torch.minimum(torch.floor(u * (lengths.double().cpu() + 1)).long(), lengths.cpu()).to(lengths.device)


def _random_subset(valid: torch.Tensor, counts: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """``[N, G]`` bool: ``counts[b]`` uniformly random positions among ``valid[b]`` per row."""
    keys = uniform(valid.shape, generator, valid.device)
    keys = torch.where(valid, keys, torch.full_like(keys, 2.0))  # invalid positions sort last
    ranks = keys.argsort(dim=1).argsort(dim=1)
    return valid & (ranks < counts[:, None])


def complement_pass(batch: ScoringBatch, reduce_var: bool = True, generator: torch.Generator | None = None) -> Pass:
    """One ESPO Monte-Carlo sample (module docstring).

    :returns: ``Pass`` with ``K = 2`` (masked copy, complement copy) or ``K = 1`` without ``reduce_var``.
    """
    resp = batch.completion_mask
    L = resp.sum(dim=1)
    k = stratified_counts(L, generator)
    masked = _random_subset(resp, k, generator)
    Lf = L.float()[:, None]
    p = k.float()[:, None] / (Lf + 1.0)
    half = 0.5 if reduce_var else 1.0
    no_prompt = torch.zeros(resp.shape[0], batch.prompt_length, dtype=torch.bool, device=resp.device)
    w_mask = torch.where(masked, half / p.clamp(min=1e-12), torch.zeros_like(p))
    masks, weights = [torch.cat([no_prompt, masked], 1)], [w_mask]
    if reduce_var:
        comp = resp & ~masked
        q = Lf / (Lf + 1.0) - p
        masks.append(torch.cat([no_prompt, comp], 1))
        weights.append(torch.where(comp, half / q.clamp(min=1e-12), torch.zeros_like(q)))
    return Pass(mask=torch.stack(masks), weight=torch.stack(weights).float())


class ComplementaryELBOParams(Params):
    """Parameters of :class:`ComplementaryELBOEstimator`."""

    mc_num: int = Field(2, ge=1, description="Monte-Carlo passes (each a mask and its complement).")
    reduce_var: bool = Field(True, description="Add the complementary copy of each mask (variance reduction).")


class ComplementaryELBOEstimator(Estimator):
    """ESPO's sequence ELBO: stratified ``k/(L+1)`` masks plus the complementary copy, ``mc_num`` passes."""

    name = "complementary-elbo"
    level = "sequence"

    Params = ComplementaryELBOParams

    def draw(self, batch: ScoringBatch, generator: torch.Generator | None = None) -> list[Pass]:
        return [complement_pass(batch, self.params.reduce_var, generator) for _ in range(self.params.mc_num)]
