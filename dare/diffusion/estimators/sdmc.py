"""Semi-deterministic Monte-Carlo (SDMC) sequence ELBO: a fixed quadrature over the mask ratio ``t``,
Monte Carlo only over which tokens are masked (GDPO, Rojas et al., arXiv 2510.08554 §3.2, Eq. 7-8;
the release's ``research/gdpo/gdpo/elbo.py`` in NVIDIA-NeMo/RL pull request 3550; docs/algorithms.md §3.13).

The masked-diffusion ELBO of a response ``y`` of ``L`` tokens is an integral over the mask ratio::

    l(y) = int_0^1 E_{y_t} [ (1 / t) sum_{i masked in y_t} log pi(y_i | y_t, q) ] dt

Drawing ``t`` at random dominates the estimator's variance (arXiv 2510.08554 §3.1), so SDMC evaluates the
``t`` integral with a quadrature rule ``(t_n, w_n)`` on ``[0, 1]`` (``sum_n w_n = 1``) and averages
``mc_samples`` random masks at each node::

    l(y) ~= sum_n (w_n / t_n) (1 / mc_samples) sum_j sum_{i in M_nj} lp_i(y with M_nj masked)

``M_nj`` masks exactly ``k_n = min(max(floor(t_n L), 1), L)`` of the row's response tokens, uniformly at random
(a fixed count per row, not a Bernoulli(t) draw per token, as the release does). Rules: ``gauss-1`` ..
``gauss-5`` (Gauss-Legendre nodes from :func:`numpy.polynomial.legendre.leggauss`, mapped by ``t = (x + 1) / 2``,
``w = w_x / 2``) and ``simpson`` (nodes 0.1, 0.5, 1.0, weights 1/6, 4/6, 1/6: the left end moved off the ``1 / t``
singularity, as the release does). The prompt is never masked.

Each (node, draw) is one pass whose token weight is ``P w_n / (t_n mc_samples)`` (``P`` = the number of passes),
so the *mean* over the passes of their sequence scores (what the sequence-level objectives use,
``score_reduction = "pass_mean"``) is the sum above. Values are raw nats (not divided by the length).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from pydantic import Field

from dare.components import Params
from dare.diffusion.estimators.base import Estimator, Pass, ScoringBatch, uniform

__all__ = ["SDMCParams", "SDMCEstimator", "quadrature", "Rule"]

Rule = Literal["gauss-1", "gauss-2", "gauss-3", "gauss-4", "gauss-5", "simpson"]


def quadrature(rule: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """``(t_n, w_n)`` of ``rule`` on ``[0, 1]`` (module docstring); the weights sum to 1.

    :raises ValueError: unknown rule (names the accepted ones).
    """
    if rule == "simpson":
        return (0.1, 0.5, 1.0), (1 / 6, 4 / 6, 1 / 6)
    if rule.startswith("gauss-") and rule[6:].isdigit() and 1 <= int(rule[6:]) <= 5:
        x, w = np.polynomial.legendre.leggauss(int(rule[6:]))
        return tuple(float(0.5 * v + 0.5) for v in x), tuple(float(0.5 * v) for v in w)
    raise ValueError(f"unknown quadrature rule {rule!r}; use gauss-1 ... gauss-5 or simpson")


class SDMCParams(Params):
    """Parameters of :class:`SDMCEstimator`."""

    quadrature: Rule = Field("gauss-3", description="Quadrature rule over the mask ratio t (GDPO: gauss-3).")
    mc_samples: int = Field(1, ge=1, description="Random masks per quadrature node (one forward pass each).")


class SDMCEstimator(Estimator):
    """GDPO's semi-deterministic Monte-Carlo ELBO: quadrature over the mask ratio, exact-count random masks per node."""

    name = "sdmc-elbo"
    level = "sequence"

    Params = SDMCParams

    def draw(self, batch: ScoringBatch, generator: torch.Generator | None = None) -> list[Pass]:
        times, weights = quadrature(self.params.quadrature)
        draws = self.params.mc_samples
        resp = batch.completion_mask
        L = resp.sum(dim=1)
        no_prompt = torch.zeros(resp.shape[0], batch.prompt_length, dtype=torch.bool, device=resp.device)
        P = len(times) * draws
        passes = []
        for t, w in zip(times, weights):
            k = torch.minimum(torch.floor(L.double() * t).long().clamp(min=1), L)
            for _ in range(draws):
                keys = uniform(resp.shape, generator, resp.device)
                keys = torch.where(resp, keys, torch.full_like(keys, 2.0))  # non-response positions sort last
                masked = resp & (keys.argsort(dim=1).argsort(dim=1) < k[:, None])
                weight = masked.float() * (P * w / (t * draws))
                passes.append(Pass(mask=torch.cat([no_prompt, masked], 1)[None], weight=weight[None]))
        return passes
