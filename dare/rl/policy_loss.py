"""The clipped policy-gradient surrogate of PPO/GRPO with dual clip.

Per element (a token or a whole sequence) with ratio ``rho = pi_theta / pi_old`` and advantage ``A``
(PPO, arXiv 1707.06347 eq. (7); dual clip, Ye et al. arXiv 1912.09729 eq. (5); verl/DARE
``compute_policy_loss``)::

    L = max(-A rho, -A clip(rho, 1 - eps_low, 1 + eps_high))        A >= 0
    L = min(-A c, max(-A rho, -A clip(rho, 1 - eps_low, 1 + eps_high)))   A < 0 (dual clip c > 1)

Written as ``L = -A rho'`` with an *effective ratio* ``rho' = min(rho, 1 + eps_high)`` for ``A >= 0``
and ``rho' = min(max(rho, 1 - eps_low), c)`` for ``A < 0``: identical values and gradients, and the
overflowing ``exp`` of a huge log-ratio never meets a zero advantage (``0 * inf = NaN``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dare.rl.kl import MAX_EXP

__all__ = ["ClippedLoss", "ratio_from_log", "clipped_policy_loss"]


def ratio_from_log(log_ratio: torch.Tensor) -> torch.Tensor:
    """``exp(log_ratio)`` with the exponent clamped at ``dare.rl.kl.MAX_EXP`` (finite; gradient 0 above)."""
    return torch.exp(log_ratio.float().clamp(max=MAX_EXP))


@dataclass
class ClippedLoss:
    """Result of :func:`clipped_policy_loss`; every tensor has the ratio's shape.

    * ``loss``: float32 surrogate ``-A rho'`` (minimise it);
    * ``clipped_high``/``clipped_low``: bool, where the PPO clip removed the gradient
      (``A > 0, rho > 1 + eps_high`` / ``A < 0, rho < 1 - eps_low``);
    * ``dual_clipped``: bool, ``A < 0`` and ``rho > c`` (the dual clip bound applies).
    """

    loss: torch.Tensor
    clipped_high: torch.Tensor
    clipped_low: torch.Tensor
    dual_clipped: torch.Tensor


def clipped_policy_loss(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    clip_eps_low: float = 0.2,
    clip_eps_high: float = 0.2,
    dual_clip_c: float | None = 3.0,
) -> ClippedLoss:
    """Elementwise clipped surrogate (module docstring).

    :param ratio: policy ratio ``rho`` (any shape, float, >= 0 for exp ratios; BGPO's first-order
        ratio ``1 + Delta`` may be negative, which the formula handles as well).
    :param advantages: broadcastable to ``ratio`` (e.g. ``[N, 1]`` against ``[N, G]``).
    :param clip_eps_low: ``eps_low`` in ``[0, 1)``. :param clip_eps_high: ``eps_high >= 0``.
    :param dual_clip_c: ``c > 1``, or None for no dual clip.
    :raises ValueError: out-of-range clip parameters.
    """
    if not 0.0 <= clip_eps_low < 1.0:
        raise ValueError(f"clip_eps_low must be in [0, 1), got {clip_eps_low}")
    if clip_eps_high < 0.0:
        raise ValueError(f"clip_eps_high must be >= 0, got {clip_eps_high}")
    if dual_clip_c is not None and dual_clip_c <= 1.0:
        raise ValueError(f"dual_clip_c must be > 1 (or None), got {dual_clip_c}")
    ratio = ratio.float()
    adv = torch.broadcast_to(advantages.float(), ratio.shape)
    positive = adv >= 0
    upper = torch.minimum(ratio, torch.full_like(ratio, 1.0 + clip_eps_high))
    lower = torch.maximum(ratio, torch.full_like(ratio, 1.0 - clip_eps_low))
    if dual_clip_c is not None:
        lower = torch.minimum(lower, torch.full_like(ratio, dual_clip_c))
    effective = torch.where(positive, upper, lower)
    with torch.no_grad():
        clipped_high = (adv > 0) & (ratio > 1.0 + clip_eps_high)
        clipped_low = (adv < 0) & (ratio < 1.0 - clip_eps_low)
        dual = (adv < 0) & (ratio > dual_clip_c) if dual_clip_c is not None else torch.zeros_like(positive)
    return ClippedLoss(loss=-adv * effective, clipped_high=clipped_high, clipped_low=clipped_low, dual_clipped=dual)
