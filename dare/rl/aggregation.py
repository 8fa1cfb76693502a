"""Reducing a per-token loss matrix to a scalar: ``token-mean`` and ``sequence-mean``.

* ``token-mean`` (verl ``agg_loss`` default, every DARE recipe): ``sum_{b,k} L w / sum_{b,k} w``,
  every scored token of the batch weighs the same;
* ``sequence-mean`` (GRPO paper, arXiv 2402.03300 eq. (3)): ``mean_b [sum_k L w / sum_k w]``, every
  sequence weighs the same whatever its length.

``w`` are token weights (0/1 masks, or fractional weights). When a batch is processed in row chunks
(one backward per chunk), pass the *whole* batch's normaliser (``num_tokens`` = total weight,
``num_sequences`` = sequences that have any weight) so the chunk losses add up to the batch loss.
"""

from __future__ import annotations

from typing import Literal

import torch

__all__ = ["Aggregation", "aggregate"]

Aggregation = Literal["token-mean", "sequence-mean"]


def aggregate(
    values: torch.Tensor,
    weights: torch.Tensor,
    mode: Aggregation = "token-mean",
    num_tokens: float | torch.Tensor | None = None,
    num_sequences: float | torch.Tensor | None = None,
) -> torch.Tensor:
    """Weighted mean of ``values`` ``[N, G]`` under ``weights`` ``[N, G]`` (module docstring).

    :param num_tokens: ``token-mean`` denominator (default ``weights.sum()``).
    :param num_sequences: ``sequence-mean`` denominator (default: rows with positive weight).
    :returns: float32 scalar; 0 when nothing is weighted.
    :raises ValueError: shapes differ or unknown mode.
    """
    if values.shape != weights.shape:
        raise ValueError(f"values {tuple(values.shape)} and weights {tuple(weights.shape)} must have the same shape")
    w = weights.to(values.dtype if values.is_floating_point() else torch.float32)
    if mode == "token-mean":
        denom = w.sum() if num_tokens is None else torch.as_tensor(num_tokens, dtype=w.dtype, device=w.device)
        return (values * w).sum() / denom.clamp(min=1e-8)
    if mode == "sequence-mean":
        row_w = w.sum(dim=-1)
        per_row = (values * w).sum(dim=-1) / row_w.clamp(min=1e-8)
        if num_sequences is None:
            num_sequences = (row_w > 0).sum()
        denom = torch.as_tensor(num_sequences, dtype=w.dtype, device=w.device)
        return per_row.sum() / denom.clamp(min=1.0)
    raise ValueError(f"unknown aggregation {mode!r}; use token-mean or sequence-mean")
