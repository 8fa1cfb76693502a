"""Decoding trajectory records (which step committed each completion token)."""

from __future__ import annotations

import torch

__all__ = ["Trajectory", "completion_mask"]


class Trajectory:
    """Records, for each completion position, the global denoising step that committed it.

    ``unmask_step`` is ``[B, G]`` int64, -1 until committed. Trajectory-replay estimators
    (CJ-GRPO, TraceRL) rebuild the state before step ``s`` as "positions with ``unmask_step < s``
    are clean, the rest masked".
    """

    def __init__(self, batch: int, gen_length: int, device: torch.device | str = "cpu"):
        self.unmask_step = torch.full((batch, gen_length), -1, dtype=torch.int64, device=device)

    def record(self, transfer: torch.Tensor, step: int) -> None:
        """Mark ``transfer`` (``[B, G]`` bool) as committed at global ``step``.

        :raises RuntimeError: a position is committed twice (a sampler bug).
        """
        if bool((transfer & (self.unmask_step >= 0)).any()):
            raise RuntimeError("a completion position was committed twice")
        self.unmask_step[transfer] = step


def completion_mask(completions: torch.Tensor, stop_ids: tuple[int, ...], pad_in_response: bool) -> torch.Tensor:
    """Which completion positions belong to the response.

    With ``pad_in_response`` (LLaDA/Dream convention) every position counts, EOS padding included.
    Otherwise the response ends at the first stop id (inclusive) and later positions are excluded.

    :param completions: ``[B, G]`` int64. :returns: ``[B, G]`` bool.
    """
    if pad_in_response:
        return torch.ones_like(completions, dtype=torch.bool)
    is_stop = torch.zeros_like(completions, dtype=torch.bool)
    for sid in stop_ids:
        is_stop |= completions == sid
    after = torch.cumsum(is_stop.to(torch.int64), dim=1) - is_stop.to(torch.int64)
    return after == 0
