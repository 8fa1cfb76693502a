"""Fast-dLLM confidence-aware parallel decoding: how many masked positions one step commits.

Source: Fast-dLLM (arXiv 2505.22618 §3.3 and Algorithm 1; official repo NVlabs/Fast-dLLM,
``llada/generate.py`` ``get_transfer_index`` and ``get_transfer_index_dynamic``). A fixed schedule
commits ``k`` tokens per step; these rules let the step commit as many as the model is sure of:

* **threshold** ``tau``: every candidate whose confidence is ``>= tau``, and always the most
  confident one, so each step makes progress (Algorithm 1 line 8);
* **factor** ``f``: the ``n`` most confident, with ``n`` the largest count whose ``n``-th highest
  confidence ``c_(n)`` satisfies ``(n + 1)(1 - c_(n)) <= f`` (at least 1). With ``f = 1`` this is
  Theorem 1's condition ``(n + 1) eps <= 1`` (``eps = 1 - c_(n)``) under which greedy parallel decoding
  of ``n`` tokens equals greedy sequential decoding. ``(n + 1)(1 - c_(n))`` never decreases with
  ``n`` (``c_(n)`` is sorted), so "largest ``n``" is the longest passing prefix, as the official loop
  computes it. The official loop also commits the last candidate when only it fails (an off-by-one
  at ``top_i == len - 1``); these rules follow the stated condition instead.

Choosing ``tau``: a candidate committed at confidence ``c`` is wrong with probability about ``1 - c`` when the
model is calibrated, and every wrong token committed in parallel stays (the one-token-per-step decoder would
have re-predicted it after committing the surest one). On tasks scored all-or-nothing this adds up:
``benchmarks/bench_decoding.py`` (2-layer Sudoku models; docs/results.md, "Decoding") measured threshold 0.9 at
-6.2 pt exact-solve on its LLaDA and 0.99 at +0.0 pt, both ~14x faster than vanilla, and prints the model's
calibration at the answer's first step. Check an accelerated decoder's accuracy on your model before relying on it.

Confidences are ``[B, L]`` floats with ``-inf`` at positions that may not be committed (outside the
current block, not masked, or proposing the mask token); a row without any finite entry commits
nothing. Both rules are per row, so a row's choice never depends on the rest of the batch.
"""

from __future__ import annotations

import torch

__all__ = ["threshold_transfer", "factor_transfer"]


def _most_confident(confidence: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
    """``[B, L]`` bool: each row's highest-confidence candidate (first index on ties), none for empty rows."""
    best = torch.zeros_like(candidates)
    idx = confidence.argmax(dim=1, keepdim=True)
    best.scatter_(1, idx, True)
    return best & candidates.any(dim=1, keepdim=True)


def threshold_transfer(confidence: torch.Tensor, threshold: float) -> torch.Tensor:
    """Commit every candidate with ``confidence >= threshold`` and each row's most confident one.

    :param confidence: ``[B, L]`` float, ``-inf`` at positions that may not be committed.
    :param threshold: ``tau`` in ``(0, 1]`` (Fast-dLLM's default 0.9).
    :returns: ``[B, L]`` bool transfer mask; at least one position per row that has a candidate.
    """
    candidates = torch.isfinite(confidence)
    return (candidates & (confidence >= threshold)) | _most_confident(confidence, candidates)


def factor_transfer(confidence: torch.Tensor, factor: float) -> torch.Tensor:
    """Commit each row's ``n`` most confident candidates, ``n`` the largest with ``(n+1)(1 - c_(n)) <= factor``.

    :param confidence: ``[B, L]`` float probabilities, ``-inf`` at positions that may not be committed.
    :param factor: ``f > 0`` (module docstring; the official scripts use ``f = 1``).
    :returns: ``[B, L]`` bool transfer mask; at least one position per row that has a candidate.
    """
    candidates = torch.isfinite(confidence)
    sorted_conf, order = torch.sort(confidence, dim=1, descending=True)
    n = torch.arange(1, confidence.shape[1] + 1, device=confidence.device, dtype=sorted_conf.dtype)
    passes = torch.isfinite(sorted_conf) & ((n + 1) * (1 - sorted_conf) <= factor)
    passes[:, 0] = torch.isfinite(sorted_conf[:, 0])  # at least one
    count = torch.cumprod(passes.to(torch.int64), dim=1).sum(dim=1, keepdim=True)  # longest passing prefix
    ranked = torch.arange(confidence.shape[1], device=confidence.device)[None] < count
    out = torch.zeros_like(candidates)
    out.scatter_(1, order, ranked)
    return out & candidates
