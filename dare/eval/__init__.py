"""Verifiable evaluation: run benchmarks with a sampler and a reward, write reports."""

from dare.eval.report import provenance, write_report
from dare.eval.runner import BenchmarkResult, benchmark_path, evaluate_benchmark

__all__ = ["BenchmarkResult", "evaluate_benchmark", "benchmark_path", "write_report", "provenance"]
