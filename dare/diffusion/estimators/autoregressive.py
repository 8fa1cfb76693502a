"""Exact autoregressive likelihood of a dLLM decoded left to right at block length 1 (JustGRPO;
DARE ``llada_dp_actor_justgrpo``; docs/algorithms.md §3.10).

With block length 1 and one token per step, the sampler reveals completion token ``t`` from the
state ``[c ; y_<t ; M ... M]``, and Gumbel-max at temperature ``T`` samples it exactly from
``softmax(logits_t / T)``. So ``log pi(y) = sum_t log softmax(logits(c ; y_<t ; M...)_t / T)[y_t]``
is the exact rollout likelihood (score it with ``temperature = T`` in :func:`score_pass`).

One copy per response position; ``chunk_size`` positions form one pass (DARE's
``justgrpo_position_chunk_size``), so memory holds ``chunk_size`` forwards. For block families the
block-diffusion forward reproduces the same state (earlier blocks clean, the current block clean up
to ``t``). Deterministic: ``draw`` uses no randomness.
"""

from __future__ import annotations

import torch
from pydantic import Field

from dare.components import Params
from dare.diffusion.estimators.base import Estimator, Pass, ScoringBatch

__all__ = ["AutoregressiveParams", "AutoregressiveEstimator", "autoregressive_passes"]


def autoregressive_passes(batch: ScoringBatch, chunk_size: int = 1) -> list[Pass]:
    """Passes over completion positions ``0..G-1`` in chunks of ``chunk_size`` (module docstring).

    Copy for position ``t``: every response token at position ``>= t`` masked, weight 1 at ``t`` (for
    rows where ``t`` is a response token). Positions that no row scores are skipped. Each pass's ``key`` is
    its first position, so the passes of processes whose longest responses differ are matched by position
    (:func:`dare.rl.batch_totals.whole_batch_normalisers`; responses are prefixes, so the chunks align).

    :raises ValueError: ``chunk_size < 1``.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    resp = batch.completion_mask
    N, G = resp.shape
    pos = torch.arange(G, device=resp.device)
    no_prompt = torch.zeros(N, batch.prompt_length, dtype=torch.bool, device=resp.device)
    positions = [t for t in range(G) if bool(resp[:, t].any())]
    passes = []
    for i in range(0, len(positions), chunk_size):
        masks, weights = [], []
        for t in positions[i : i + chunk_size]:
            masks.append(torch.cat([no_prompt, resp & (pos >= t)], 1))
            weights.append((resp & (pos == t)).float())
        passes.append(Pass(mask=torch.stack(masks), weight=torch.stack(weights), key=int(positions[i])))
    return passes


class AutoregressiveParams(Params):
    """Parameters of :class:`AutoregressiveEstimator`."""

    chunk_size: int = Field(1, ge=1, description="Completion positions scored per pass.")


class AutoregressiveEstimator(Estimator):
    """Left-to-right exact likelihood (block length 1), ``chunk_size`` positions per pass."""

    name = "autoregressive"
    level = "token"

    Params = AutoregressiveParams

    def draw(self, batch: ScoringBatch, generator: torch.Generator | None = None) -> list[Pass]:
        return autoregressive_passes(batch, self.params.chunk_size)
