"""Token sampling: Gumbel-max, top-k/top-p filtering, categorical sampling."""

from __future__ import annotations

import torch

from dare.randomness import RowGenerators, multinomial, rand

__all__ = ["add_gumbel_noise", "filter_top_k_top_p", "sample_categorical"]


def add_gumbel_noise(logits: torch.Tensor, temperature: float,
                     generator: torch.Generator | None = None) -> torch.Tensor:
    """Gumbel-max perturbation as in LLaDA's official sampler (ML-GSAI/LLaDA ``add_gumbel_noise``).

    Returns ``logits`` unchanged at temperature 0; otherwise, in float64,
    ``exp(logits) / (-log U)^T`` with ``U ~ U(0, 1)``, whose argmax is a sample from
    ``softmax(logits / T)``. ``generator=None`` draws from the global RNG (as the official code); with
    :class:`dare.randomness.RowGenerators` each row of ``logits`` draws its own noise.

    :param logits: ``[..., V]`` float (``[B, ...]`` with row generators).
    :returns: same shape; float64 when ``temperature > 0``.
    """
    if temperature == 0:
        return logits
    logits = logits.to(torch.float64)
    if isinstance(generator, RowGenerators):
        noise = generator.rand(logits.shape[1:], device=logits.device, dtype=torch.float64)
    else:
        noise = torch.rand(logits.shape, dtype=torch.float64, device=logits.device, generator=generator)
    gumbel = (-torch.log(noise)) ** temperature
    return logits.exp() / gumbel


def filter_top_k_top_p(logits: torch.Tensor, top_k: int | None = None, top_p: float | None = None,
                       fill: float = float("-inf")) -> torch.Tensor:
    """Keep the ``top_k`` largest logits and the smallest nucleus with mass ``> top_p``; others -> ``fill``.

    Top-p follows the common rule (Dream/SDAR/LLaDA2 official samplers): sort descending, drop tokens
    whose cumulative probability exceeds ``top_p`` after shifting the drop mask right by one (the most
    likely token always stays). ``top_k`` None/<=0 and ``top_p`` None/>=1 mean off.

    :param logits: ``[..., V]`` float. Returns a new tensor.
    """
    out = logits
    if top_p is not None and top_p < 1.0:
        sorted_logits, sorted_idx = torch.sort(out, descending=True, dim=-1)
        cum = torch.cumsum(torch.softmax(sorted_logits, dim=-1), dim=-1)
        drop = cum > top_p
        drop[..., 1:] = drop[..., :-1].clone()
        drop[..., 0] = False
        mask = torch.zeros_like(drop).scatter(-1, sorted_idx, drop)
        out = out.masked_fill(mask, fill)
    if top_k is not None and top_k > 0:
        k = min(top_k, out.size(-1))
        kth = torch.topk(out, k, dim=-1).values[..., -1, None]
        out = out.masked_fill(out < kth, fill)
    return out


def sample_categorical(probs: torch.Tensor, generator=None, rows: torch.Tensor | None = None) -> torch.Tensor:
    """One draw per row from ``probs`` ``[N, V]`` (rows sum to 1). Returns ``[N]`` int64.

    :param generator: a ``torch.Generator``, :class:`dare.randomness.RowGenerators` (then ``rows`` ``[N]``
        names the generator of each row; default ``arange(N)``), or None (global RNG).
    """
    return multinomial(probs, 1, generator, rows=rows).squeeze(-1)
