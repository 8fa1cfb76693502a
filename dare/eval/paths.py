"""Where a benchmark's data file is (no torch: spec validation checks these files before anything loads)."""

from __future__ import annotations

import os
from pathlib import Path

from dare.errors import DataError
from dare.io import resolve_path

__all__ = ["benchmark_path", "data_root"]


def data_root() -> Path | None:
    """``$DARE_DATA_DIR`` if set."""
    root = os.environ.get("DARE_DATA_DIR")
    return Path(root) if root else None


def benchmark_path(evaluator, bspec) -> Path:
    """The data file of a benchmark: ``bspec.path``, else the evaluator's default.

    :raises DataError: no path given and no default (or ``$DARE_DATA_DIR`` unset for it).
    """
    if bspec.path:
        return resolve_path(bspec.path)
    default = evaluator.default_path
    if default is None:
        raise DataError(f"benchmark {evaluator.name!r} has no default data file; set its path")
    if default.startswith("dare://"):
        return resolve_path(default)
    root = data_root()
    if root is None:
        raise DataError(
            f"benchmark {evaluator.name!r}: set its path, or set DARE_DATA_DIR to a folder holding {default}"
        )
    return root / default
