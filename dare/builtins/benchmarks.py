"""Built-in verifiable benchmarks (part of ``dare-dllm``): gsm8k, math500, aime, countdown, sudoku
(the code benchmarks are a plugin's).

Default data files live under ``$DARE_DATA_DIR`` (the layout of DARE's preprocessed data:
``rl/test/<name>.parquet``); the Sudoku test set also ships with the package (``dare://sudoku/test.parquet``).
"""

from __future__ import annotations

from dare.components import Evaluator

__all__ = ["GSM8K", "MATH500", "AIME", "Countdown", "Sudoku"]


class GSM8K(Evaluator):
    """GSM8K test set (1319 grade-school word problems); exact numeric answer."""

    name = "gsm8k"
    reward = "gsm8k"
    data_sources = ("gsm8k",)
    default_path = "rl/test/gsm8k_1.parquet"


class MATH500(Evaluator):
    """MATH500 (500 competition problems); boxed answer, math-verify equivalence."""

    name = "math500"
    reward = "math"
    data_sources = ("math500",)
    default_path = "rl/test/math500_1.parquet"


class AIME(Evaluator):
    """AIME 2024 (30 problems); boxed integer answer."""

    name = "aime"
    aliases = ("aime2024",)
    reward = "math"
    default_path = "rl/test/aime2024.parquet"


class Countdown(Evaluator):
    """Countdown (256 test targets); correct expression inside <answer> tags (format credit 0.1 is not a solve)."""

    name = "countdown"
    reward = "countdown"
    data_sources = ("countdown",)
    default_path = "rl/test/countdown_1.parquet"


class Sudoku(Evaluator):
    """4x4 Sudoku (500 test puzzles); accuracy = exact solves, mean reward = empty-cell accuracy."""

    name = "sudoku"
    reward = "sudoku"
    data_sources = ("sudoku",)
    default_path = "dare://sudoku/test.parquet"
