"""Fast-dLLM block-wise approximate KV cache for full-attention (masked diffusion) decoders.

Source: Fast-dLLM (arXiv 2505.22618 §3.2 and Algorithm 1; official repo NVlabs/Fast-dLLM,
``llada/generate.py`` ``generate_with_prefix_cache`` / ``generate_with_dual_cache``). A semi-
autoregressive decoder works on one block ``[s, e)`` at a time. At the block's first step (the
*refresh*) the model runs on the whole sequence and its keys/values are kept; the block's later steps
run the model only on

* ``prefix`` cache: ``x[s:]`` (the block and every later position), attending to the cached keys/values
  of ``x[:s]``;
* ``dual`` cache: ``x[s:e]`` (the block alone), attending to the cached keys/values of ``x[:s]`` and of
  ``x[e:]`` (the still-masked suffix).

Where it is exact. With bidirectional attention the keys/values of layer ``l >= 1`` at a cached position
depend on every token of the sequence, so once the block changes they are stale: the cache is an
approximation (Fast-dLLM's observation is that they change little inside a block). It is exact

* at every block's refresh step (a full forward), hence for schedules with one step per block;
* for a 1-layer model: its only keys/values are projections of the token embeddings, and a cached
  position's token does not change inside the block (prefix tokens are committed, suffix tokens stay
  masks), so a cached step computes the same function as the full forward;
* for any model, at any step, if no token changed since the refresh (e.g. the model proposed only the
  mask token) - which is what the model-level tests check.

Cached forward contract (``kv_logits``). A family that supports the cache has a method
``kv_logits(model, input_ids, attention_mask=None, past=None, start=0, end=None, use_cache=False)``
returning ``(logits, cache)``:

* ``input_ids`` ``[B, L]`` is the *whole* current sequence and ``attention_mask`` ``[B, L]`` its
  padding mask (1 real, 0 left padding) or None;
* ``past=None`` (then ``start = 0, end = L``): a full forward; ``logits`` ``[B, L, V]`` aligned
  (position ``i`` scores token ``i``) and, with ``use_cache``, ``cache`` holds the keys/values of all
  ``L`` positions of every layer;
* ``past`` (a cache from a full forward of the same batch): the model runs on positions ``[start, end)``
  only (a family whose logits are shifted may also run ``start - 1`` to align them); its fresh keys/values
  replace the cached ones at those positions, every other position is read from ``past``. ``logits``
  ``[B, end - start, V]`` aligned. ``past`` itself is not modified.

:class:`BlockKVCache` drives that contract for one decode call; the prefix step is ``[s, L)``, the dual
step ``[s, e)``.
"""

from __future__ import annotations

from typing import Any, Callable, Literal

import torch

__all__ = ["CACHE_MODES", "CacheMode", "BlockKVCache", "kv_logits_of", "replace_span"]

CacheMode = Literal["none", "prefix", "dual"]
#: ``none`` (recompute everything at every step), ``prefix`` or ``dual`` (module docstring).
CACHE_MODES: tuple[str, ...] = ("none", "prefix", "dual")


def kv_logits_of(family) -> Callable | None:
    """The family's cached forward (``family.kv_logits``, module docstring), or None if it has none."""
    fn = getattr(family, "kv_logits", None)
    return fn if callable(fn) else None


def replace_span(replace_position: torch.Tensor) -> tuple[int, int]:
    """``(start, end)`` of the positions a ``replace_position`` mask marks (Fast-dLLM's dual-cache argument).

    :param replace_position: ``[B, L]`` bool (or 0/1), True at the positions whose cached keys/values the
        forward's inputs replace; the same contiguous, non-empty span in every row.
    :raises ValueError: an empty, non-contiguous or row-dependent span.
    """
    rp = replace_position.to(torch.bool)
    cols = rp.any(dim=0).nonzero().flatten()
    if cols.numel() == 0:
        raise ValueError("replace_position marks no position")
    start, end = int(cols[0]), int(cols[-1]) + 1
    if end - start != cols.numel() or not bool((rp == rp[:1]).all()):
        raise ValueError("replace_position must mark the same contiguous span of positions in every row")
    return start, end


class BlockKVCache:
    """The keys/values of the last refresh and the block-wise forwards of one decode call.

    :param kv_logits: ``(input_ids, attention_mask, past, start, end, use_cache) -> (logits, cache)``,
        a family's ``kv_logits`` bound to a model (module docstring).
    :param mode: ``prefix`` or ``dual``.
    :raises ValueError: another mode.
    """

    def __init__(self, kv_logits: Callable[..., tuple[torch.Tensor, Any]], mode: str):
        if mode not in ("prefix", "dual"):
            raise ValueError(f"BlockKVCache mode must be prefix or dual, got {mode!r}")
        self.kv_logits = kv_logits
        self.mode = mode
        self.past = None

    def block_logits(self, x: torch.Tensor, attention_mask: torch.Tensor | None, start: int, end: int,
                     refresh: bool) -> torch.Tensor:
        """Aligned logits ``[B, end - start, V]`` of the block ``x[:, start:end]``: one forward pass.

        With ``refresh`` (the block's first step) a full forward over ``x`` that also replaces the cache;
        otherwise a forward of ``x[:, start:]`` (prefix) or ``x[:, start:end]`` (dual) against the cache.

        :param x: ``[B, L]`` int64 current sequence; :param attention_mask: ``[B, L]`` or None.
        """
        if refresh or self.past is None:
            logits, self.past = self.kv_logits(x, attention_mask, None, 0, x.shape[1], True)
            return logits[:, start:end]
        stop = x.shape[1] if self.mode == "prefix" else end
        logits, _ = self.kv_logits(x, attention_mask, self.past, start, stop, False)
        return logits[:, : end - start]
