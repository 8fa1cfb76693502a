"""Verifiable evaluation: run benchmarks with a sampler and a reward (generation or likelihood scoring) and score
them; the reports made of the results are :mod:`dare.report`'s.

The names below are imported from their submodules on first access (PEP 562): the runner needs torch,
while spec validation imports only the torch-free :mod:`dare.eval.paths`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dare.lazy import lazy_exports

if TYPE_CHECKING:  # pragma: no cover
    from dare.eval.paths import benchmark_path
    from dare.eval.runner import BenchmarkResult, evaluate_benchmark

#: Public name -> the submodule that defines it.
_HOME = {
    "BenchmarkResult": "runner",
    "evaluate_benchmark": "runner",
    "benchmark_path": "paths",
}

__all__ = list(_HOME)


__getattr__, __dir__ = lazy_exports(__name__, {name: f"{__name__}.{sub}" for name, sub in _HOME.items()})
