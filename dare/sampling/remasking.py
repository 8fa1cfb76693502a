"""Remasking rules: which masked positions to commit at a step."""

from __future__ import annotations

import torch

from dare.randomness import rand

__all__ = ["confidence_scores", "topk_transfer"]


def confidence_scores(
    logits: torch.Tensor,
    x0: torch.Tensor,
    remasking: str,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Per-position confidence of the proposed tokens ``x0``.

    * ``low_confidence``: ``softmax(logits)[x0]`` in the logits' dtype (un-tempered), as LLaDA's
      official sampler;
    * ``random``: ``U(0, 1)`` scores (float32, from ``generator``: a ``torch.Generator``, per-row
      :class:`dare.randomness.RowGenerators`, or None for the global RNG).

    :param logits: ``[B, L, V]``; ``x0``: ``[B, L]`` int64.
    :returns: ``[B, L]``.
    :raises ValueError: unknown rule.
    """
    if remasking == "low_confidence":
        p = torch.softmax(logits, dim=-1)
        return torch.gather(p, dim=-1, index=x0.unsqueeze(-1)).squeeze(-1)
    if remasking == "random":
        if generator is None:
            return torch.rand(x0.shape, device=x0.device)
        return rand(x0.shape, generator, device=x0.device)
    raise ValueError(f"unknown remasking {remasking!r}; use low_confidence or random")


def topk_transfer(confidence: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Select the ``k[b]`` most confident positions of each row (``torch.topk`` per row, official tie order).

    :param confidence: ``[B, L]`` float, ``-inf`` where a position may not be chosen.
    :param k: ``[B]`` int64 quota per row.
    :returns: ``[B, L]`` bool transfer mask.
    """
    transfer = torch.zeros_like(confidence, dtype=torch.bool)
    for j in range(confidence.shape[0]):
        kj = int(k[j])
        if kj > 0:
            _, idx = torch.topk(confidence[j], k=kj)
            transfer[j, idx] = True
    return transfer
