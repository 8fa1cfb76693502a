"""Coupled complementary-mask estimator (DiffuCoder coupled-GRPO, arXiv 2506.20639 §4.2; DARE
``_forward_process_coupled_grpo`` and ``llada_dp_actor_coupled_grpo``; docs/algorithms.md §3.2).

Per completion: draw ``t ~ U(t_min, t_max)`` and ``u_k ~ U(0, 1)`` per response token; copy A masks
``{k: u_k < t}``, copy B the complement ``{k: u_k >= t}``, so every response token is masked in
exactly one of them (antithetic pair). The prompt is never masked. Per-token score::

    coupled_k = 1[u_k < t] lp_k(A) / t + 1[u_k >= t] lp_k(B) / (1 - t)
    l_k       = (lp_k(full) + coupled_k) / 2       with the full-mask term (the released trainer, DARE)
    l_k       = coupled_k                           without it (the paper's equation, §4.2)

The released DiffuCoder trainer averages in the fully-masked copy (apple/ml-diffucoder
``src/open_r1/coupled_grpo.py::selective_log_softmax``, ``(p0 + weighted_sum(p1, p2)) / 2``), as DARE does;
``full_mask_term: false`` is the paper's equation only (docs/algorithms.md §3.2).
**[QUIRK] decided:** DARE calls ``accelerate.set_seed(42)`` inside the corruption, so ``t`` and
``u`` are identical for every sample and step, and the global RNGs are reseeded each step. Here
``t`` is drawn per completion and ``u`` per token from the caller's generator (fresh per sample
and step; the global RNG is never touched).
"""

from __future__ import annotations

import torch
from pydantic import Field, model_validator

from dare.components import Params
from dare.diffusion.estimators.base import Estimator, Pass, ScoringBatch, uniform

__all__ = ["CoupledParams", "CoupledEstimator", "coupled_pass"]


def coupled_pass(
    batch: ScoringBatch,
    t_min: float = 0.2,
    t_max: float = 0.8,
    full_mask_term: bool = True,
    generator: torch.Generator | None = None,
) -> Pass:
    """One coupled pass (module docstring).

    :returns: ``Pass`` with ``K = 3`` (full, A, B) or ``K = 2`` (A, B): masks ``[K, N, S]``, weights
        ``[K, N, G]``.
    :raises ValueError: not ``0 < t_min <= t_max < 1``.
    """
    if not 0.0 < t_min <= t_max < 1.0:
        raise ValueError(f"need 0 < t_min <= t_max < 1, got t_min={t_min}, t_max={t_max}")
    resp = batch.completion_mask
    N, G = resp.shape
    t = t_min + (t_max - t_min) * uniform((N, 1), generator, resp.device)
    u = uniform((N, G), generator, resp.device)
    in_a = resp & (u < t)
    in_b = resp & (u >= t)
    half = 0.5 if full_mask_term else 1.0
    no_prompt = torch.zeros(N, batch.prompt_length, dtype=torch.bool, device=resp.device)
    masks = [torch.cat([no_prompt, in_a], 1), torch.cat([no_prompt, in_b], 1)]
    weights = [half * in_a.float() / t, half * in_b.float() / (1.0 - t)]
    if full_mask_term:
        masks.insert(0, torch.cat([no_prompt, resp], 1))
        weights.insert(0, 0.5 * resp.float())
    return Pass(mask=torch.stack(masks), weight=torch.stack(weights))


class CoupledParams(Params):
    """Parameters of :class:`CoupledEstimator`."""

    t_min: float = Field(0.2, gt=0.0, lt=1.0, description="Smallest mask ratio t of the first copy.")
    t_max: float = Field(0.8, gt=0.0, lt=1.0, description="Largest mask ratio t of the first copy.")
    full_mask_term: bool = Field(True, description="Average in a third copy with the whole completion masked (the "
                                 "released DiffuCoder trainer, DARE).")

    @model_validator(mode="after")
    def _order(self):
        if self.t_min > self.t_max:
            raise ValueError(f"t_min ({self.t_min}) must not exceed t_max ({self.t_max})")
        return self


class CoupledEstimator(Estimator):
    """DiffuCoder's coupled (complementary) mask pair, with the released trainer's full-mask term (optional)."""

    name = "coupled"
    level = "token"

    Params = CoupledParams

    def draw(self, batch: ScoringBatch, generator: torch.Generator | None = None) -> list[Pass]:
        p = self.params
        return [coupled_pass(batch, p.t_min, p.t_max, p.full_mask_term, generator)]
