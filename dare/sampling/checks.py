"""The KV-cache checks samplers share: a ``cache`` other than ``none`` needs the model family's cached forward.

Samplers with Fast-dLLM's block-wise cache (``llada``, ``dream``; :mod:`dare.sampling.kv_cache`) report the
missing forward at spec validation (:func:`cache_problems`) and bind it to the model when they decode
(:func:`bound_kv_logits`), both with the same message.
"""

from __future__ import annotations

from typing import Callable

from dare.errors import DareError
from dare.sampling.kv_cache import kv_logits_of

__all__ = ["cache_problems", "bound_kv_logits"]


def _missing(cache: str, family) -> str:
    return (f"cache {cache!r} needs the model family's cached forward (kv_logits), which family {family.name!r} "
            "does not provide; use cache: none")


def cache_problems(cache: str, family, loc: str) -> list[tuple[str, str]]:
    """``[(f"{loc}.params.cache", message)]`` when ``cache`` is not ``none`` and ``family`` has no ``kv_logits``;
    else ``[]`` (also when ``family`` is None: not known at validation)."""
    if family is None or cache == "none" or kv_logits_of(family) is not None:
        return []
    return [(f"{loc}.params.cache", _missing(cache, family))]


def bound_kv_logits(sampler: str, cache: str, model, family) -> Callable | None:
    """``family.kv_logits`` bound to ``model``: ``(ids, attention_mask, past, start, end, use_cache) -> (logits,
    cache)`` (:class:`dare.sampling.kv_cache.BlockKVCache`'s forward), or None when ``cache`` is ``none``.

    :raises DareError: a cache was asked for but the family has no ``kv_logits`` (names ``sampler``).
    """
    if cache == "none":
        return None
    fn = kv_logits_of(family)
    if fn is None:
        raise DareError(f"sampler {sampler}: {_missing(cache, family)}")
    return lambda ids, am, past, start, end, use_cache: fn(model, ids, am, past, start, end, use_cache)
