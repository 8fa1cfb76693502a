"""Forward (noising) process of masked diffusion LMs (MDLM / LLaDA, arXiv 2502.09992 eq. (1)-(3))."""

from __future__ import annotations

import torch

from dare.randomness import rand

__all__ = ["sample_mask_ratio", "bernoulli_mask", "apply_mask"]


def sample_mask_ratio(batch: int, eps: float = 1e-3, generator=None, device="cpu") -> torch.Tensor:
    """Per-example mask ratio ``t = (1 - eps) u + eps``, ``u ~ U(0, 1)`` (LLaDA pre-training/SFT).

    :param generator: a ``torch.Generator``, per-row :class:`dare.randomness.RowGenerators` (one draw per
        row), or None (torch's global RNG).
    :returns: ``[batch]`` float32 in ``[eps, 1)``.
    :raises ValueError: ``eps`` outside ``[0, 1)``.
    """
    if not 0.0 <= eps < 1.0:
        raise ValueError(f"eps must be in [0, 1), got {eps}")
    u = torch.rand(batch, device=device) if generator is None else rand((batch,), generator, device=device)
    return (1.0 - eps) * u + eps


def bernoulli_mask(t: torch.Tensor, eligible: torch.Tensor, generator=None) -> torch.Tensor:
    """Mask each eligible position independently with probability ``t`` of its row.

    With per-row :class:`dare.randomness.RowGenerators` row ``b`` draws ``L`` uniforms from its generator
    (position ``j`` gets the ``j``-th draw, whatever the batch's other rows).

    :param t: ``[B]`` float mask ratios. :param eligible: ``[B, L]`` bool (e.g. response tokens).
    :returns: ``[B, L]`` bool corruption indicator (never True outside ``eligible``).
    """
    if generator is None:
        u = torch.rand(eligible.shape, device=eligible.device)
    else:
        u = rand(eligible.shape, generator, device=eligible.device)
    return (u < t[:, None]) & eligible


def apply_mask(input_ids: torch.Tensor, mask: torch.Tensor, mask_id: int) -> torch.Tensor:
    """``x_t``: ``input_ids`` with masked positions replaced by ``mask_id`` (new tensor)."""
    return torch.where(mask, torch.full_like(input_ids, mask_id), input_ids)
