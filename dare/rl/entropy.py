"""Entropy of the model's predictive distribution (a training metric, as TRL's GRPO ``entropy``)."""

from __future__ import annotations

import torch

__all__ = ["token_entropy"]


@torch.no_grad()
def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """``H = -sum_v p_v log p_v`` in nats per position, computed in float32 without gradient.

    :param logits: ``[..., V]`` float. :returns: ``[...]`` float32, ``0 <= H <= log V``.
    """
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(dim=-1)
