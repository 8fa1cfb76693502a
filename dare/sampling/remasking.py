"""Remasking rules: which masked positions to commit at a step."""

from __future__ import annotations

import torch

from dare.randomness import rand

__all__ = ["FASTDLLM_CONFIDENCE_DTYPE", "proposal_probability", "fastdllm_probs", "fastdllm_confidence",
           "confidence_scores", "topk_transfer"]

#: The dtype Fast-dLLM scores confidences in: ``F.softmax(logits.to(torch.float64))`` in NVlabs/Fast-dLLM
#: ``llada/generate.py`` ``get_transfer_index`` (commit 24cc59e7). Read at call time by
#: :func:`fastdllm_confidence`, so a test can swap it to show that float32 scoring breaks parity.
FASTDLLM_CONFIDENCE_DTYPE: torch.dtype = torch.float64


def proposal_probability(logits: torch.Tensor, x0: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``softmax(logits)[x0]``: the probability of each proposed token, computed in ``dtype``.

    :param logits: ``[B, L, V]`` (or ``[N, V]`` with ``x0`` ``[N]``), any float dtype.
    :param x0: ``[B, L]`` int64 proposed tokens.
    :param dtype: the dtype the softmax runs in; None keeps the logits' dtype (LLaDA's release rule).
    :returns: ``[B, L]`` in ``dtype`` (the logits' dtype when None).
    """
    p = torch.softmax(logits if dtype is None else logits.to(dtype), dim=-1)
    return torch.gather(p, dim=-1, index=x0.unsqueeze(-1)).squeeze(-1)


def fastdllm_probs(logits: torch.Tensor) -> torch.Tensor:
    """``softmax(logits)`` over the last dim in :data:`FASTDLLM_CONFIDENCE_DTYPE` (float64): the distribution a
    decoder under a Fast-dLLM rule scores its proposals with (probability, margin or entropy; Dream's rules).

    :param logits: ``[..., V]`` any float dtype. :returns: ``[..., V]`` float64.
    """
    return torch.softmax(logits.to(FASTDLLM_CONFIDENCE_DTYPE), dim=-1)


def fastdllm_confidence(logits: torch.Tensor, x0: torch.Tensor) -> torch.Tensor:
    """Fast-dLLM's confidence of the proposals ``x0``: ``softmax(logits)[x0]`` in float64.

    Source: NVlabs/Fast-dLLM ``llada/generate.py`` ``get_transfer_index`` (commit 24cc59e7). Why
    float64: the threshold and factor rules and the top-k order compare confidences that sit within
    ~1e-6 of each other near 1.0 on a confident model; in float32 (or bf16, ~3 significant digits) such
    near-ties round to equal values and the commit order falls back to index order, so the decoded tokens
    differ from Fast-dLLM's. Every DARE decoding path under a Fast-dLLM rule (a KV cache, a threshold,
    a factor) scores through this function or :func:`fastdllm_probs`; the cache-free fixed-schedule decoders
    keep their release's rule (docs/architecture.md, "Fast-dLLM decoding").

    :param logits: ``[B, L, V]`` (or ``[N, V]`` with ``x0`` ``[N]``), any float dtype.
    :param x0: ``[B, L]`` int64 proposed tokens.
    :returns: ``[B, L]`` in :data:`FASTDLLM_CONFIDENCE_DTYPE` (float64).
    """
    return torch.gather(fastdllm_probs(logits), dim=-1, index=x0.unsqueeze(-1)).squeeze(-1)


def confidence_scores(
    logits: torch.Tensor,
    x0: torch.Tensor,
    remasking: str,
    generator: torch.Generator | None = None,
    fastdllm: bool = False,
) -> torch.Tensor:
    """Per-position confidence of the proposed tokens ``x0``.

    * ``low_confidence``: ``softmax(logits)[x0]`` (un-tempered) in the logits' dtype, as LLaDA's
      official sampler, or in float64 with ``fastdllm`` (:func:`fastdllm_confidence`, Fast-dLLM's rule);
    * ``random``: ``U(0, 1)`` scores (float32, from ``generator``: a ``torch.Generator``, per-row
      :class:`dare.randomness.RowGenerators`, or None for the global RNG).

    :param logits: ``[B, L, V]``; ``x0``: ``[B, L]`` int64.
    :param fastdllm: score as Fast-dLLM (float64), for decoding under a cache, threshold or factor rule.
    :returns: ``[B, L]``.
    :raises ValueError: unknown rule.
    """
    if remasking == "low_confidence":
        return fastdllm_confidence(logits, x0) if fastdllm else proposal_probability(logits, x0)
    if remasking == "random":
        if generator is None:
            return torch.rand(x0.shape, device=x0.device)
        return rand(x0.shape, generator, device=x0.device)
    raise ValueError(f"unknown remasking {remasking!r}; use low_confidence or random")


def topk_transfer(confidence: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Select the ``k[b]`` most confident positions of each row (``torch.topk`` per row, official tie order; one
    batched call per distinct quota).

    :param confidence: ``[B, L]`` float, ``-inf`` where a position may not be chosen.
    :param k: ``[B]`` int64 quota per row.
    :returns: ``[B, L]`` bool transfer mask.
    """
    transfer = torch.zeros_like(confidence, dtype=torch.bool)
    quotas = k.tolist()
    for kj in sorted(set(quotas)):
        if kj <= 0:
            continue
        # the rows sharing a quota in one call: torch.topk ranks each row of a matrix alone, with the tie order of
        # the row's own 1-D call, so the chosen positions are those of the per-row loop of the release
        if len(quotas) == 1 or quotas.count(kj) == len(quotas):
            transfer.scatter_(1, torch.topk(confidence, k=kj, dim=-1).indices, True)
            continue
        rows = torch.tensor([j for j, q in enumerate(quotas) if q == kj], device=confidence.device)
        idx = torch.topk(confidence[rows], k=kj, dim=-1).indices
        transfer[rows] = transfer[rows].scatter(1, idx, True)
    return transfer
