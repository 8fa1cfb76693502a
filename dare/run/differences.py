"""Which spec keys two runs differ in, and which of them only change what an evaluation measures.

:func:`spec_differences` compares two spec dumps (``RunSpec.model_dump(mode="json")``, e.g. the one stored in a run
directory's record against a new one) key by key; :func:`format_differences` puts them in one line for a message;
:data:`EVAL_ONLY_KEYS` are the keys ``dare eval`` of a finished run may change (:mod:`dare.run.rundir`). Plain
data in, plain data out: no file is read here.
"""

from __future__ import annotations

import json
import os
from typing import Any

__all__ = ["EVAL_ONLY_KEYS", "spec_differences", "format_differences", "is_eval_only_key", "eval_only"]

#: spec keys (dotted prefixes) that change what an evaluation measures but nothing a run trained: ``dare eval`` of a
#: finished run may override them (``eval.validation`` is not among them: it selected ``train.keep_best``'s weights)
EVAL_ONLY_KEYS = ("eval.benchmarks", "eval.batch_size", "eval.seed", "eval.before_train", "eval.num_threads")

#: keys the spec hash ignores (:func:`dare.runspec.spec_hash`), so never a difference between runs
_IGNORED = ("output.overwrite", "train.resume", "train.report_to", "launch")


def spec_differences(old: Any, new: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    """Dotted keys (list items as ``key[i]``) whose values differ between two spec dumps, with both values.

    A key missing on one side has the value ``"<absent>"`` there. ``output.overwrite``, ``train.resume``,
    ``train.report_to`` and ``launch`` (which the spec hash ignores) are never reported.
    """
    if prefix in _IGNORED:
        return []
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for k in list(old) + [k for k in new if k not in old]:
            key = f"{prefix}.{k}" if prefix else str(k)
            out += spec_differences(old.get(k, "<absent>"), new.get(k, "<absent>"), key)
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [d for i, (a, b) in enumerate(zip(old, new)) for d in spec_differences(a, b, f"{prefix}[{i}]")]
    if old == "<absent>" and new is None:  # an optional key the older spec did not have, left unset
        return []
    return [] if old == new else [(prefix, old, new)]


def format_differences(diffs: list[tuple[str, Any, Any]], most: int = 6, width: int = 40) -> str:
    """``"train.max_steps (750 -> 100), sampler.params.steps (17 -> 8)"``, at most ``most`` keys, then a count.

    A value longer than ``width`` characters is cut to a window of that width; both sides of a key are cut at the
    same place, just before their first differing character, so two long values show where they differ
    (``"...{{ extra_info.puzzle }} Solve it..." -> "...{{ extra_info.puzzle }} Answer..."``), never the same text."""
    shown = [f"{k} ({' -> '.join(_differing_parts(a, b, width))})" for k, a, b in diffs[:most]]
    more = len(diffs) - most
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def _differing_parts(a: Any, b: Any, width: int) -> tuple[str, str]:
    """The texts of ``a`` and ``b`` cut to ``width`` characters around where they first differ."""
    ta, tb = (v if isinstance(v, str) else json.dumps(v) for v in (a, b))
    if len(ta) <= width and len(tb) <= width:
        return ta, tb
    start = max(0, len(os.path.commonprefix([ta, tb])) - width // 3)

    def cut(t: str) -> str:
        return ("..." if start else "") + t[start:start + width] + ("..." if start + width < len(t) else "")

    return cut(ta), cut(tb)


def is_eval_only_key(key: str) -> bool:
    """Whether the dotted spec key ``key`` is, or lies under, one of :data:`EVAL_ONLY_KEYS`."""
    return any(key == p or key.startswith((p + ".", p + "[")) for p in EVAL_ONLY_KEYS)


def eval_only(diffs: list[tuple[str, Any, Any]]) -> bool:
    """The specs differ, and only in :data:`EVAL_ONLY_KEYS`."""
    return bool(diffs) and all(is_eval_only_key(k) for k, _, _ in diffs)
