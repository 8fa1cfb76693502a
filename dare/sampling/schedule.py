"""Transfer schedules: how many masked tokens are committed at each denoising step."""

from __future__ import annotations

import torch

__all__ = ["num_transfer_tokens", "block_quota"]


def num_transfer_tokens(mask_index: torch.Tensor, steps: int) -> torch.Tensor:
    """LLaDA's per-row schedule for one block (ML-GSAI/LLaDA ``generate.py``, ``get_num_transfer_tokens``).

    Each row with ``n`` masks gets ``n // steps`` tokens per step, the first ``n % steps`` steps one more.

    :param mask_index: ``[B, L]`` bool, masked positions of the block.
    :param steps: denoising steps for the block (> 0).
    :returns: ``[B, steps]`` int64; rows sum to the row's mask count.
    :raises ValueError: ``steps <= 0``.
    """
    if steps <= 0:
        raise ValueError(f"steps must be positive, got {steps}")
    mask_num = mask_index.sum(dim=1, keepdim=True)
    base = mask_num // steps
    remainder = mask_num % steps
    out = torch.zeros(mask_num.size(0), steps, device=mask_index.device, dtype=torch.int64) + base
    idx = torch.arange(steps, device=mask_index.device).unsqueeze(0)
    return out + (idx < remainder).to(torch.int64)


def block_quota(block_length: int, steps: int) -> list[int]:
    """Per-step quota of block decoders (SDAR, LLaDA2): ``block_length // steps`` each, the first
    ``block_length % steps`` steps one more (JetAstra/SDAR ``generate.py``; LLaDA2 ``generate``).

    :raises ValueError: ``steps <= 0``.
    """
    if steps <= 0:
        raise ValueError(f"steps must be positive, got {steps}")
    base, rem = divmod(block_length, steps)
    return [base + (1 if i < rem else 0) for i in range(steps)]
