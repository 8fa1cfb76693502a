"""Whole-batch totals of an RL update over every process: loss normalisers and logged loss metrics.

Under data parallelism (docs/scaling.md) each process holds some groups of the rollout batch. For 1 and N
processes to train and log the same numbers, the per-pass loss divides by counts of the *whole* batch (scored
tokens per pass, rows, response tokens), and each process's loss is multiplied by the world size because DDP
averages gradients; the loss metrics computed with those normalisers are each process's share, so the batch's
value is their sum. Both exchanges are one small ``all_gather_object`` (:func:`dare.scaling.distributed.gather`); with
one process nothing is exchanged and the values are the process's own.
"""

from __future__ import annotations

import torch

from dare.scaling import distributed
from dare.diffusion.estimators import Pass, ScoringBatch

__all__ = ["whole_batch_normalisers", "whole_batch_sums", "whole_batch_metrics", "whole_batch_values"]


def whole_batch_normalisers(passes: list[Pass], batch: ScoringBatch) -> tuple[list[float], int, float, int, int]:
    """The loss normalisers of the whole rollout batch over every process.

    :param passes: this process's likelihood passes (``Pass.scored`` ``[N, G]`` bool counts the scored tokens).
    :param batch: this process's rows (``num_rows``; ``response_lengths`` ``[N]`` int64, tokens).
    :returns: ``(tokens, rows, response_tokens, world, num_passes)``: scored tokens of each of this process's
        passes over the whole batch (list of floats, one per pass), rows and response tokens of the whole batch,
        the number of processes, and the number of passes of the whole batch.

    Passes that depend on the rows (trajectory replay: one pass per denoising step present in the process's
    rows, :func:`dare.diffusion.estimators.trajectory.trajectory_passes`) carry a ``key`` (the transition index):
    a pass's token count is summed over the processes' passes of the same key and the pass count is the number
    of distinct keys, exactly what one process holding every row would have. Passes without a key are matched
    by position; only if their number differs between processes (a third-party estimator whose pass count
    depends on the rows) does each pass's token normaliser stay per process (scaled by the world size).
    Collective: every process must call it.
    """
    counts = [float(p.scored.sum()) for p in passes]
    keys = [p.key for p in passes]
    parts = distributed.gather((keys, counts, batch.num_rows, float(batch.response_lengths.sum())))
    world = len(parts)
    rows, response_tokens = sum(n for _, _, n, _ in parts), sum(t for _, _, _, t in parts)
    if all(k is not None for ks, _, _, _ in parts for k in ks):
        totals: dict[int, float] = {}
        for ks, cs, _, _ in parts:
            for k, c in zip(ks, cs):
                totals[k] = totals.get(k, 0.0) + c
        return [totals[k] for k in keys], rows, response_tokens, world, len(totals)
    if all(len(cs) == len(counts) for _, cs, _, _ in parts):
        tokens = [sum(cs[p] for _, cs, _, _ in parts) for p in range(len(counts))]
        return tokens, rows, response_tokens, world, len(counts)
    return [c * world for c in counts], rows, response_tokens, world, len(counts)


def whole_batch_sums(*values: float) -> tuple[list[float], int]:
    """Each of ``values`` summed over every process, and the number of processes: ``([totals], world)``.

    For the normalisers of trainers with their own row layout (SPG's response tokens and rows, MDPO's scored
    step tokens, d-TreeRPO's edges and self-distillation pairs): a loss divided by the whole batch's count and
    multiplied by ``world`` (DDP averages the gradients) gives N processes the gradient of one. Collective:
    every process must call it with the same number of values.
    """
    parts = distributed.gather(tuple(float(v) for v in values))
    return [sum(part[i] for part in parts) for i in range(len(values))], len(parts)


def whole_batch_metrics(metrics: dict[str, float], entropy_sum: float,
                        entropy_count: float) -> tuple[dict[str, float], float, float]:
    """The whole batch's loss metrics from every process's share: ``(metrics, entropy sum, entropy count)``.

    :param metrics: this process's summed loss-metric contributions (``clip_fraction``, ``approx_kl``, ``kl``,
        ...), each divided by the whole batch's normalisers (:func:`whole_batch_normalisers`) like the loss;
        empty when the process ran no row (every row skipped).
    :param entropy_sum: sum of per-token entropies (nats) over this process's scored tokens.
    :param entropy_count: number of those tokens.

    The batch's value of each metric is the sum over processes, as the loss is (each process's loss times the
    world size, averaged by DDP); entropy sums and token counts are summed likewise, so ``sum / count`` is the
    whole batch's token-mean entropy. Collective: every process must call it.
    """
    parts = distributed.gather((metrics, entropy_sum, entropy_count))
    if len(parts) == 1:
        return metrics, entropy_sum, entropy_count
    total: dict[str, float] = {}
    for part, _, _ in parts:
        for k, v in part.items():
            total[k] = total.get(k, 0.0) + v
    return total, sum(p[1] for p in parts), sum(p[2] for p in parts)


def whole_batch_values(values: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Every process's per-row values concatenated in rank order: ``{name: [N_total] float32 (CPU)}``.

    :param values: ``{name: [n] tensor}`` of this process's rows (rewards, advantages, reward parts); the same
        names on every process.

    For statistics that are not means (``reward_std``, ``advantage_std``), which the mean over processes of
    per-process values would get wrong. Each process holds whole groups, so group
    statistics of the result are the whole batch's. Collective: every process must call it.
    """
    local = {k: v.detach().float().flatten().cpu() for k, v in values.items()}
    parts = distributed.gather({k: v.tolist() for k, v in local.items()})
    if len(parts) == 1:
        return local
    return {k: torch.tensor([x for part in parts for x in part[k]], dtype=torch.float32) for k in local}
