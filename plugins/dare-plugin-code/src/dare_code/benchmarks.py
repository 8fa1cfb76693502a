"""The code benchmarks: humaneval, humanevalplus, mbpp, scored by the ``code`` reward
(:mod:`dare_code.reward`).

Default data files live under ``$DARE_DATA_DIR`` (the layout of DARE's preprocessed data:
``rl/test/<name>.parquet``).
"""

from __future__ import annotations

from dare.components import Evaluator

__all__ = ["HumanEval", "HumanEvalPlus", "MBPP"]


class HumanEval(Evaluator):
    """HumanEval (164 Python functions); pass@1 of the fenced program against check(), sandboxed."""

    name = "humaneval"
    reward = "code"
    data_sources = ("humaneval",)
    default_path = "rl/test/humaneval_1.parquet"


class HumanEvalPlus(Evaluator):
    """HumanEval+ (EvalPlus, 163 problems with many more inputs); pass@1 of the fenced program, sandboxed."""

    name = "humanevalplus"
    aliases = ("humaneval+",)
    reward = "code"
    data_sources = ("humanevalplus",)
    default_path = "rl/test/humanevalplus_1.parquet"


class MBPP(Evaluator):
    """MBPP (500 test problems, 3-shot [BEGIN]/[DONE] prompts); pass@1 on the assert list, sandboxed."""

    name = "mbpp"
    reward = "code"
    data_sources = ("mbpp",)
    default_path = "rl/test/mbpp_1.parquet"
