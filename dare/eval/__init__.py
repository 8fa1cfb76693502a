"""Verifiable evaluation: run benchmarks with a sampler and a reward, write reports.

The names below are imported from their submodules on first access (PEP 562): the runner needs torch,
while spec validation imports only the torch-free :mod:`dare.eval.paths`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from dare.eval.paths import benchmark_path
    from dare.eval.report import provenance, write_report
    from dare.eval.runner import BenchmarkResult, evaluate_benchmark

#: Public name -> the submodule that defines it.
_HOME = {
    "BenchmarkResult": "runner",
    "evaluate_benchmark": "runner",
    "benchmark_path": "paths",
    "write_report": "report",
    "provenance": "report",
}

__all__ = list(_HOME)


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))
