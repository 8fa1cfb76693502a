"""KL estimators between the current policy and the reference policy (Schulman, "Approximating KL
divergence", 2020; the k1/k2/k3 of verl ``kl_penalty`` and TRL's GRPO ``beta`` term).

With ``d = log pi_theta(y) - log pi_ref(y)`` for ``y`` sampled from the (old) policy:

* ``k1 = d`` (unbiased, high variance, can be negative);
* ``k2 = d^2 / 2`` (biased, low variance, >= 0);
* ``k3 = exp(-d) + d - 1`` (unbiased, >= 0; verl's ``low_var_kl``).

**[QUIRK] decided:** DARE's ``kl_penalty`` replaces ``d`` by ``log(1 + d)`` when the advantage is
positive, which is NaN for ``d <= -1`` (docs/algorithms.md §0). DARE keeps the textbook estimators above,
independent of the advantage. To stay finite, ``k3`` clamps the exponent at ``MAX_EXP`` (``d < -20``
means the policy moved by a factor e^20 from the reference; the clamp only stops an overflow to inf,
whose zero-gradient branch would otherwise turn into NaN). DARE/verl also clamp k3 to [-10, 10];
we do not, since that silently zeroes the gradient of large but finite KL values.
"""

from __future__ import annotations

from typing import Literal

import torch

__all__ = ["KLEstimator", "kl_estimate", "MAX_EXP"]

KLEstimator = Literal["k1", "k2", "k3"]

#: Largest exponent fed to ``exp`` in ratio and KL computations (e^20 ~ 4.9e8).
MAX_EXP = 20.0


def kl_estimate(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: KLEstimator = "k3") -> torch.Tensor:
    """Per-element KL estimate of ``pi_theta`` from ``pi_ref`` (module docstring).

    :param logp: log-likelihoods under the current policy (any shape; tokens or sequences), float.
    :param ref_logp: the same under the reference policy, same shape.
    :param estimator: ``"k1"``, ``"k2"`` or ``"k3"``.
    :returns: float tensor of the same shape, finite for finite inputs.
    :raises ValueError: shapes differ or unknown estimator.
    """
    if logp.shape != ref_logp.shape:
        raise ValueError(f"logp {tuple(logp.shape)} and ref_logp {tuple(ref_logp.shape)} must have the same shape")
    d = logp.float() - ref_logp.float()
    if estimator == "k1":
        return d
    if estimator == "k2":
        return 0.5 * d.square()
    if estimator == "k3":
        return torch.exp((-d).clamp(max=MAX_EXP)) + d - 1.0
    raise ValueError(f"unknown KL estimator {estimator!r}; use k1, k2 or k3")
