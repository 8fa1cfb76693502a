"""MDPO's step loss input and its step-wise reward maths (arXiv 2508.13148 §3, eq. (4)-(6); DARE
``mdpo_algos.py``: ``compute_step_wise_advantage``, ``select_top_k_steps``), shared by the objective
(:mod:`dare_grpo.objectives.mdpo`, which assembles the loss) and the trainer (:mod:`dare_grpo.objectives.mdpo.trainer`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dare.rl import group_advantages

__all__ = ["StepLossInput", "step_scores", "step_advantages", "select_steps"]


def step_scores(step_rewards: torch.Tensor) -> torch.Tensor:
    """MDPO's step score (adv-v3 + adv-v4): ``[N, T]`` float32 from per-step rewards ``[N, T]``.

    ``score_s = (r_s - r_{s-1} + 1) + mean_{s' > s} r_{s'}``, ``r_0 = 0``; the last step uses ``r_T``
    for the second term (DARE ``compute_step_wise_advantage``).
    :raises ValueError: ``step_rewards`` is not 2-D with at least one step.
    """
    if step_rewards.ndim != 2 or step_rewards.shape[1] == 0:
        raise ValueError(f"step_rewards must be [N, T] with T >= 1, got {tuple(step_rewards.shape)}")
    r = step_rewards.float()
    diffs = torch.cat([r[:, :1], r[:, 1:] - r[:, :-1]], dim=1) + 1.0
    T = r.shape[1]
    future_sum = r.flip(1).cumsum(1).flip(1) - r                     # sum_{s' > s} r_{s'}
    count = torch.arange(T - 1, -1, -1, device=r.device, dtype=r.dtype)  # T - 1 - s
    future = torch.where(count > 0, future_sum / count.clamp(min=1.0), r[:, -1:].expand_as(r))
    return diffs + future


def step_advantages(scores: torch.Tensor, group_size: int, kind: str = "grpo", std_eps: float = 1e-6) -> torch.Tensor:
    """Group advantages of each step's scores: column ``s`` of ``[N, T]`` normalised within groups of
    ``group_size`` rows (:func:`dare.rl.group_advantages`, ``std_eps`` added to the std by ``grpo``; the released
    MDPO trainer uses 1e-4). :returns: ``[N, T]`` float32."""
    return torch.stack([group_advantages(scores[:, s], group_size, kind, std_eps) for s in range(scores.shape[1])],
                       dim=1)


def select_steps(advantages: torch.Tensor, k: int) -> torch.Tensor:
    """The ``min(k, T)`` steps with the largest ``sum_b |A_{b,s}|``, ascending: ``[k]`` int64 (DARE
    ``select_top_k_steps``). :raises ValueError: ``k < 1``."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    importance = advantages.abs().sum(dim=0)
    return torch.topk(importance, min(k, importance.numel())).indices.sort().values


@dataclass
class StepLossInput:
    """A chunk of selected (step, completion) rows.

    * ``current``: ``[n, G]`` float32 ``l_k`` (differentiable); ``old``, ``ref`` (or None): ``[n, G]``;
    * ``mask``: ``[n, G]`` bool, masked positions of ``x^(s)`` that are scored; ``confidence``: ``[n, G]``;
    * ``advantages``: ``[n]`` step advantages ``A_{b,s}``; ``completion_length``: ``G``;
    * ``num_tokens``: ``sum mask`` over every selected row of the rollout batch.
    """

    current: torch.Tensor
    old: torch.Tensor
    ref: torch.Tensor | None
    mask: torch.Tensor
    confidence: torch.Tensor
    advantages: torch.Tensor
    completion_length: int
    num_tokens: float
