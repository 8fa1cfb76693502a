"""Trajectory replay: the likelihood of a completion along the sampler's own decoding trajectory
(CJ-GRPO, arXiv 2509.23924; TraceRL, arXiv 2509.06949 §3; DARE ``llada_dp_actor_cj_grpo``;
docs/algorithms.md §3.5, §3.12).

The sampler records ``unmask_step[n, g]``, the denoising step that committed completion token ``g``
(``SamplerOutput.unmask_step``). The state *before* step ``s`` has every token committed at an
earlier step clean and the rest masked; the tokens committed at step ``s`` are scored under that
state, ``l_{s,k} = log p(y_k | x^(s))`` for ``k in U_s``. Every response token is scored exactly
once, by the step that decoded it, so ``sum_s sum_{k in U_s} l_{s,k}`` is the log-likelihood of the
token *values* along the trajectory (the choice of *which* positions to commit, made by the
confidence rule, is not modelled, as in both papers).

Step merging / trajectory shrinkage (TraceRL §3, "aggregate every s neighbouring steps"; CJ-GRPO's
``step_merge`` merges the steps of one block): with ``shrink = s``, steps ``[s (j - 1), s j)`` form
one transition scored under the state before its first step. ``shrink = 1`` is exact replay. With the
sampler's block stride ``b`` (:meth:`dare.components.Sampler.steps_per_block`: block ``nb``'s steps are
numbered ``nb b .. nb b + b - 1``) a transition never spans two blocks: step ``nb b + i`` belongs to transition
``nb ceil(b / s) + i // s``, which is ``step // s`` when ``s`` divides ``b``. Otherwise the last transition of
a block would score the next block's first tokens under a state the decoder never saw (that block fully
masked, its predecessor not yet complete).

Block rounds (``block_rounds = b``, block families only; the TraceRL SDAR release's training rows, Gen-Verse/dLLM-RL
``train/rl_sdar.py::one_round_vectorized``): within each block of ``b`` completion positions the distinct steps are
ranked, ``shrink`` consecutive ranks merged (the release's ``collapse_k_unique`` per block), and pass ``r`` bundles
round ``r`` of *every* block: each block's tokens of round ``r`` are scored under the state before them. The
block-diffusion forward makes a noisy block see only itself and the clean earlier blocks, so each token's
log-prob is the one its own transition would give; only the pass count changes (the largest number of rounds
of a block instead of the number of transitions), and with it a per-pass normaliser. Blocks start where the
family's forward starts them (``ScoringBatch.block_anchor``, else each row's first real token).

One pass per transition that commits at least one token in the batch (passes are ordered by step).
Positions never committed (``-1``) stay masked in every state and are never scored. For block
families the block-diffusion forward lets each block attend its clean predecessors, which is exactly
the state the block decoder saw. Replay is deterministic: ``draw`` uses no randomness.

Exact only for pure unmasking decoders: a sampler that rewrites committed tokens (LLaDA2.1 token
editing; DARE rejects it for CJ-GRPO) makes the replayed states approximate (the RL trainer logs
``rollout_edits``). Positions after EOS of truncating families are dropped from the replay.
"""

from __future__ import annotations

import torch
from pydantic import Field

from dare.components import Params
from dare.diffusion.estimators.base import Estimator, Pass, ScoringBatch

__all__ = ["TrajectoryParams", "TrajectoryEstimator", "trajectory_passes", "transition_ids", "block_round_ids"]


def transition_ids(unmask_step: torch.Tensor, valid: torch.Tensor, shrink: int = 1,
                   block_stride: int | None = None, per_row: bool = False) -> torch.Tensor:
    """``[N, G]`` int64 transition index of each valid committed token, -1 elsewhere: ``unmask_step // shrink``,
    or with ``block_stride`` ``b`` the split at block boundaries ``(step // b) ceil(b / shrink) + (step % b) // shrink``
    (module docstring).

    :param unmask_step: ``[N, G]`` int64 (-1: never committed); :param valid: ``[N, G]`` bool.
    :param per_row: group ``shrink`` consecutive *distinct* steps of each row instead (the released TraceRL
        trainer's ``collapse_k_unique``, Gen-Verse/dLLM-RL ``train/rl_llada.py``): the id is the rank of the
        token's step among the row's committed steps, divided by ``shrink``; blocks are not considered.
    :raises ValueError: ``shrink < 1`` or ``block_stride < 1``.
    """
    if shrink < 1:
        raise ValueError(f"shrink must be >= 1, got {shrink}")
    if block_stride is not None and block_stride < 1:
        raise ValueError(f"block_stride must be >= 1, got {block_stride}")
    committed = valid & (unmask_step >= 0)
    step = unmask_step.clamp(min=0)
    if per_row:
        ids = torch.full_like(unmask_step, -1)
        for n in range(unmask_step.shape[0]):
            steps = unmask_step[n][committed[n]]
            rank = torch.searchsorted(torch.unique(steps), steps)
            ids[n][committed[n]] = torch.div(rank, shrink, rounding_mode="floor")
        return ids
    if block_stride is None or block_stride % shrink == 0:
        ids = torch.div(step, shrink, rounding_mode="floor")
    else:
        per_block = -(-block_stride // shrink)
        ids = (torch.div(step, block_stride, rounding_mode="floor") * per_block
               + torch.div(step % block_stride, shrink, rounding_mode="floor"))
    return torch.where(committed, ids, torch.full_like(unmask_step, -1))


def block_round_ids(unmask_step: torch.Tensor, valid: torch.Tensor, block_size: int, offset: torch.Tensor,
                    shrink: int = 1) -> torch.Tensor:
    """``[N, G]`` int64 round of each valid committed token inside its block, -1 elsewhere (module docstring).

    Completion position ``g`` of row ``n`` is in block ``(g + offset[n]) // block_size``; the round is the rank of
    its step among the distinct committed steps of that block, divided by ``shrink`` (the release's
    ``collapse_k_unique`` per block, Gen-Verse/dLLM-RL ``train/rl_sdar.py:219-231,516-522``).

    :param unmask_step: ``[N, G]`` int64 (-1: never committed); :param valid: ``[N, G]`` bool.
    :param offset: ``[N]`` int64, completion positions before the row's first block boundary counted back to it
        (``(P - anchor) mod block_size``). :raises ValueError: ``block_size < 1`` or ``shrink < 1``.
    """
    if block_size < 1 or shrink < 1:
        raise ValueError(f"block_size and shrink must be >= 1, got {block_size} and {shrink}")
    N, G = unmask_step.shape
    committed = valid & (unmask_step >= 0)
    out = torch.full_like(unmask_step, -1)
    if not bool(committed.any()):
        return out
    g = torch.arange(G, device=unmask_step.device)[None]
    block = torch.div(g + offset.to(unmask_step.device)[:, None], block_size, rounding_mode="floor")
    group = torch.arange(N, device=unmask_step.device)[:, None] * (int(block.max()) + 1) + block  # (row, block) id
    span = int(unmask_step.max()) + 1
    key = group[committed] * span + unmask_step[committed]
    _, dense = torch.unique(key, return_inverse=True)  # dense rank of (row, block, step), ordered
    first = torch.full((int(group.max()) + 1,), int(dense.max()) + 1, dtype=dense.dtype, device=dense.device)
    first = first.scatter_reduce(0, group[committed], dense, reduce="amin")
    out[committed] = torch.div(dense - first[group[committed]], shrink, rounding_mode="floor")
    return out


def trajectory_passes(batch: ScoringBatch, shrink: int = 1, block_stride: int | None = None,
                      per_row: bool = False, block_rounds: int | None = None) -> list[Pass]:
    """One pass per transition, or per block round with ``block_rounds`` (module docstring); each pass has
    ``K = 1`` and ``key`` = its transition (round) index.

    :param block_stride: the sampler's block stride in ``unmask_step`` numbers (None: unknown, no split).
    :param block_rounds: the block size ``b`` of a block family: pass ``r`` bundles round ``r`` of every block
        (``block_stride`` and ``per_row`` are then not used).
    :raises ValueError: the batch has no ``unmask_step`` or no token was ever committed.
    """
    if batch.unmask_step is None:
        raise ValueError("trajectory replay needs the sampler's unmask_step (SamplerOutput.unmask_step)")
    resp = batch.completion_mask
    if block_rounds is not None:
        P = batch.prompt_length
        if batch.block_anchor is not None:
            anchor = torch.full((batch.num_rows,), int(batch.block_anchor), dtype=torch.int64, device=resp.device)
        else:
            anchor = (batch.attention_mask[:, :P].to(torch.int64).cumsum(dim=1) == 0).sum(dim=1)
        trans = block_round_ids(batch.unmask_step, resp, block_rounds, (P - anchor) % block_rounds, shrink)
    else:
        trans = transition_ids(batch.unmask_step, resp, shrink, block_stride, per_row)
    steps = torch.unique(trans[trans >= 0]).tolist()
    if not steps:
        raise ValueError("trajectory replay: no completion token was committed by the sampler (unmask_step all -1)")
    never = resp & (trans < 0)
    no_prompt = torch.zeros(resp.shape[0], batch.prompt_length, dtype=torch.bool, device=resp.device)
    passes = []
    for s in steps:
        masked = (trans >= s) | never
        passes.append(Pass(mask=torch.cat([no_prompt, masked], 1)[None], weight=(trans == s).float()[None], key=int(s)))
    return passes


class TrajectoryParams(Params):
    """Parameters of :class:`TrajectoryEstimator`."""

    shrink: int = Field(1, ge=1, description="Consecutive denoising steps merged into one pass (1 = exact replay).")
    block_stride: int | None = Field(
        None, ge=1, description="The sampler's block stride in unmask_step numbers: merged steps never span two "
                                "blocks (null: unknown, no split)."
    )
    per_row: bool = Field(False, description="Merge shrink consecutive distinct steps of each row (TraceRL's released "
                                             "LLaDA trainer) instead of the global step grid.")
    block_rounds: int | None = Field(
        None, ge=1, description="Block size of a block family: one pass per round, bundling round r of every block "
                                "(TraceRL's released SDAR trainer); null = one pass per transition.")


class TrajectoryEstimator(Estimator):
    """Exact (``shrink = 1``) or shrunk replay of the recorded decoding trajectory."""

    name = "trajectory"
    level = "token"

    Params = TrajectoryParams

    def draw(self, batch: ScoringBatch, generator: torch.Generator | None = None) -> list[Pass]:
        p = self.params
        return trajectory_passes(batch, p.shrink, p.block_stride, p.per_row, p.block_rounds)
