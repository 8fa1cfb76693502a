"""Built-in reward components (part of ``dare-dllm``): math, gsm8k, countdown, sudoku, format, code."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field

from dare.components import Params, Reward
from dare.rewards.code import code_outcome
from dare.rewards.countdown import countdown_score
from dare.rewards.format import DEFAULT_PATTERN, format_score
from dare.rewards.math import gsm8k_score, math_score
from dare.rewards.sandbox import SandboxLimits, uid_mode_problem
from dare.rewards.sudoku import sudoku_score

__all__ = ["MathReward", "GSM8KReward", "CountdownReward", "SudokuReward", "FormatReward", "CodeReward"]


class MathReward(Reward):
    """Last \\boxed{} answer equivalent to the ground truth under math-verify (1/0)."""

    name = "math"

    def score(self, completion: str, sample: dict[str, Any]) -> float:
        return math_score(completion, str(self.ground_truth(sample)))


class GSM8KReward(Reward):
    """GSM8K: boxed, <answer> or '#### n' answer equal to the ground truth (1/0)."""

    name = "gsm8k"

    def score(self, completion: str, sample: dict[str, Any]) -> float:
        return gsm8k_score(completion, str(self.ground_truth(sample)))


class CountdownParams(Params):
    format_score: float = Field(0.1, ge=0.0, le=1.0, description="Credit for a tagged answer that is wrong.")


class CountdownReward(Reward):
    """Countdown (d1 rule): 1 for a correct expression using the given numbers, 0.1 format credit, else 0."""

    name = "countdown"
    Params = CountdownParams

    def score(self, completion: str, sample: dict[str, Any]) -> float:
        info = sample.get("extra_info") or {}
        numbers = info.get("numbers")
        if isinstance(numbers, str):
            numbers = json.loads(numbers)
        return countdown_score(completion, list(numbers), float(self.ground_truth(sample)), self.params.format_score)


class SudokuParams(Params):
    require_answer_tags: bool = Field(
        True, description="Read the last <answer> block (d1 format); false: use the whole completion's digits."
    )
    solved_bonus: float = Field(
        0.0, ge=0.0, description="Added when every empty cell is right (an exact solve); 0 = d1's rule."
    )


class SudokuReward(Reward):
    """4x4 Sudoku: fraction of originally empty cells filled correctly (d1/DARE rule), plus
    ``solved_bonus`` for an exact solve (a DARE option, default 0, so the score stays in [0, 1])."""

    name = "sudoku"
    Params = SudokuParams

    def score(self, completion: str, sample: dict[str, Any]) -> float:
        info = sample.get("extra_info") or {}
        cells = sudoku_score(completion, str(info["puzzle"]), str(self.ground_truth(sample)), self.params.require_answer_tags)
        return cells + (self.params.solved_bonus if cells == 1.0 else 0.0)


class FormatParams(Params):
    pattern: str = Field(DEFAULT_PATTERN, description="Regex (DOTALL) the whole completion must match.")


class FormatReward(Reward):
    """1 if the completion matches the <reasoning>…</reasoning><answer>…</answer> format."""

    name = "format"
    Params = FormatParams

    def score(self, completion: str, sample: dict[str, Any]) -> float:
        return format_score(completion, self.params.pattern)


class CodeParams(Params):
    """Parameters of the ``code`` reward: program extraction, time budget and sandbox limits."""

    extraction: Literal["auto", "fenced", "mbpp"] = Field(
        "auto", description="Program extraction: 'auto' = the MBPP rule on data_source 'mbpp', else fenced blocks."
    )
    fenced_block: Literal["last", "first_with_def"] = Field(
        "last", description="Which fenced block: the last one, or rLLM/DARE's first block that defines a function."
    )
    per_test_timeout_s: float = Field(
        1.0, gt=0, description="Wall seconds per test (DARE: 1); a program's budget is this times its tests."
    )
    timeout_s: float = Field(30.0, gt=0, description="Cap on one program's wall-clock budget, seconds.")
    cpu_time_s: int = Field(30, ge=1, description="RLIMIT_CPU per process, seconds.")
    memory_mb: int = Field(1024, ge=64, description="RLIMIT_AS per process, MiB.")
    max_processes: int = Field(16, ge=1, description="Processes/threads the program may run at once.")
    max_file_mb: int = Field(16, ge=1, description="Largest file (stdout included) the program may write, MiB.")
    isolation: Literal["auto", "uid", "process"] = Field(
        "auto",
        description="'uid': a private uid and network namespace per run (root only); 'process': the caller's uid; "
        "'auto': uid where possible.",
    )


class CodeReward(Reward):
    """Program from the completion passes the sample's tests in the sandbox (1/0; format error 0).

    Rule: DARE ``code_reward.py`` (rLLM ``RewardCodeFn``), see :mod:`dare.rewards.code`; the sandbox:
    :mod:`dare.rewards.sandbox`. A program that fails, hangs or misbehaves scores 0. ``score`` raises
    :class:`~dare.errors.DataError` for a malformed ``reward_model.ground_truth`` and
    :class:`~dare.rewards.sandbox.SandboxError` when the sandbox cannot run here (the caller logs and
    scores 0).
    """

    name = "code"
    Params = CodeParams

    def score(self, completion: str, sample: dict[str, Any]) -> float:
        p = self.params
        limits = SandboxLimits(p.timeout_s, p.cpu_time_s, p.memory_mb, p.max_processes, p.max_file_mb)
        return code_outcome(
            completion, sample, limits, p.per_test_timeout_s, p.extraction, p.fenced_block, p.isolation
        ).score

    def check(self, ctx, loc: str) -> list[tuple[str, str]]:
        """``isolation: uid`` where this machine cannot run it."""
        problem = uid_mode_problem() if self.params.isolation == "uid" else None
        if problem is None:
            return []
        return [(f"{loc}.params.isolation", f"isolation 'uid' is unavailable here: {problem}; use 'auto' or 'process'")]
