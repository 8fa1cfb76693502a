"""Built-in reward components (part of ``dare-dllm``): math, gsm8k, countdown, sudoku, format (the
code-execution reward is a plugin's)."""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field

from dare.components import Params, Reward
from dare.rewards.countdown import countdown_score
from dare.rewards.format import DEFAULT_PATTERN, format_score
from dare.rewards.math import gsm8k_score, math_score
from dare.rewards.sudoku import sudoku_score

__all__ = ["MathReward", "GSM8KReward", "CountdownReward", "SudokuReward", "FormatReward"]


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
        cells = sudoku_score(completion, str(info["puzzle"]), str(self.ground_truth(sample)),
                             self.params.require_answer_tags)
        return cells + (self.params.solved_bonus if cells == 1.0 else 0.0)


class FormatParams(Params):
    pattern: str = Field(DEFAULT_PATTERN, description="Regex (DOTALL) the whole completion must match.")


class FormatReward(Reward):
    """1 if the completion matches the <reasoning>…</reasoning><answer>…</answer> format."""

    name = "format"
    Params = FormatParams

    def score(self, completion: str, sample: dict[str, Any]) -> float:
        return format_score(completion, self.params.pattern)
