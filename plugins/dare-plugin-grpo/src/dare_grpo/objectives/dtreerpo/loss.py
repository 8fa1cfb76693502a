"""d-TreeRPO's edge loss input and its self-distillation maths (arXiv 2512.09675 §3, eq. (6)-(8); DARE
``dtreerpo_algos.py``), shared by the objective (:mod:`dare_grpo.objectives.dtreerpo`, which assembles the loss)
and the trainer (:mod:`dare_grpo.objectives.dtreerpo.trainer`, which builds the inputs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

__all__ = ["EdgeLossInput", "sd_schedule", "self_distillation", "sd_pair_count"]


def sd_schedule(progress: float, lambda_max: float, gamma: float, tau_max: float, beta: float) -> tuple[float, float]:
    """``(lambda_t, tau_t)`` at training progress ``p`` (clamped to ``[0, 1]``; the schedules of
    :mod:`dare_grpo.objectives.dtreerpo`)."""
    p = min(1.0, max(0.0, progress))
    lam = lambda_max * (math.exp(gamma * p) - 1.0) / (math.exp(gamma) - 1.0) if gamma != 0 else lambda_max * p
    tau = max(tau_max * (1.0 - p) ** beta, 1e-6)
    return lam, tau


def _positive_groups(group: torch.Tensor, advantages: torch.Tensor):
    """Yield ``idx`` (edges with ``A > 0``) of every group of >= 2 edges with a positive advantage."""
    for g in torch.unique(group).tolist():
        idx = torch.nonzero(group == g).flatten()
        if idx.numel() <= 1:
            continue
        pos = idx[advantages[idx] > 0]
        if pos.numel():
            yield pos


def sd_pair_count(group: torch.Tensor, advantages: torch.Tensor, active: torch.Tensor) -> int:
    """Number of ``(group, position)`` pairs the self-distillation mean runs over."""
    return sum(int(active[idx].any(dim=0).sum()) for idx in _positive_groups(group, advantages))


def self_distillation(logp: torch.Tensor, tokens: torch.Tensor, active: torch.Tensor, group: torch.Tensor,
                      advantages: torch.Tensor, tau: float) -> torch.Tensor:
    """``sum_{(group, j)} KL(q_j || p_theta(. | x^p)_j)`` restricted to ``q``'s support
    (:mod:`dare_grpo.objectives.dtreerpo` docstring).

    Because every child of a group shares the parent's forward, ``log p_theta(v | x^p)_j`` for a chosen
    token ``v`` is the edge log-prob ``logp[c, j]`` of any child ``c`` that chose it, so
    ``KL_j = sum_c w_hat_{c,j} (log q_j(tok_c) - logp[c, j])`` over the positive children active at ``j``.

    :param logp: ``[n, G]`` float32 edge log-probs (differentiable); :param tokens: ``[n, G]`` child tokens;
    :param active: ``[n, G]`` bool; :param group: ``[n]`` int64 parent ids; :param advantages: ``[n]``.
    :returns: float32 scalar (a *sum* over pairs; divide by :func:`sd_pair_count`).
    """
    total = logp.new_zeros(())
    for idx in _positive_groups(group, advantages):
        w = torch.softmax(advantages[idx].float() / tau, dim=0)
        W = w[:, None] * active[idx].float()                        # [c, G]
        w_hat = W / W.sum(dim=0, keepdim=True).clamp(min=1e-30)
        same = (tokens[idx][:, None, :] == tokens[idx][None, :, :]).float()  # [c, c, G]
        q = (w_hat[None] * same).sum(dim=1)                          # q_j(tok_c) for every c
        terms = torch.where(w_hat > 0, w_hat * (torch.log(q.clamp(min=1e-30)) - logp[idx]), torch.zeros_like(w_hat))
        total = total + terms.sum()
    return total


@dataclass
class EdgeLossInput:
    """A chunk of edges (all edges of the parents in the chunk).

    * ``current``: ``[n, G]`` float32 ``l_k`` (differentiable; 0 where not active); ``old``/``ref``: ``[n, G]``;
    * ``tokens``: ``[n, G]`` child tokens; ``active``: ``[n, G]`` bool; ``advantages``: ``[n]`` local advantages;
    * ``group``: ``[n]`` parent ids; ``num_edges``: edges of the whole rollout batch; ``sd_pairs``: its
      :func:`sd_pair_count`; ``progress``: ``global_step / max_steps``.
    """

    current: torch.Tensor
    old: torch.Tensor
    ref: torch.Tensor | None
    tokens: torch.Tensor
    active: torch.Tensor
    advantages: torch.Tensor
    group: torch.Tensor
    num_edges: int
    sd_pairs: int
    progress: float
