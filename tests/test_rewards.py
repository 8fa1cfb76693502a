"""Benchmark scorers agree with hand-checked answers on real rows."""

from __future__ import annotations

import logging

import pytest

from dare.data import load_rows
from dare.plugins import get_registry
from dare.rewards import WeightedReward, last_answer_tag, last_boxed
from dare.testing import shared_path


def reward(name, **params):
    return get_registry().get("reward", name).create(params)


def test_extractors():
    assert last_boxed(r"so \boxed{\frac{1}{2}} and finally \boxed{x^{2}}") == "x^{2}"
    assert last_boxed("no box") is None
    assert last_answer_tag("<answer> 1 </answer> then <answer>\n2+2\n</answer>") == "2+2"


def test_sudoku_on_real_test_rows():
    rows = load_rows("dare://sudoku/test.parquet", limit=2)
    r0 = rows[0]
    assert r0["extra_info"]["puzzle"] == "3102200002100320"
    solution = r0["reward_model"]["ground_truth"]
    assert solution == "3142243142131324"
    sud = reward("sudoku")
    assert sud.score(f"<reasoning>easy</reasoning>\n<answer>\n{solution}\n</answer>", r0) == 1.0
    # 8 empty cells (indices 2, 5, 6, 7, 8, 11, 12, 15); get cells 2 and 5 wrong (solution: 4 and 4)
    wrong = solution[:2] + "1" + solution[3:5] + "1" + solution[6:]
    assert sud.score(f"<answer>{wrong}</answer>", r0) == 6 / 8
    assert sud.score(solution, r0) == 0.0  # d1 format needs <answer> tags
    assert reward("sudoku", require_answer_tags=False).score(solution, r0) == 1.0
    assert reward("sudoku", require_answer_tags=False).score(solution[:10], r0) == 5 / 8  # cells 2,5,6,7,8 right; the rest padded with 0
    bonus = reward("sudoku", solved_bonus=0.5)
    assert bonus.score(f"<answer>{solution}</answer>", r0) == 1.5  # exact solve: cells + bonus
    assert bonus.score(f"<answer>{wrong}</answer>", r0) == 6 / 8  # no bonus short of a solve


def test_countdown_on_a_real_row():
    row = load_rows(str(shared_path("data", "rl", "test", "countdown_1.parquet")), limit=1)[0]
    assert row["extra_info"]["numbers"] == "[30, 100, 93]" and row["reward_model"]["ground_truth"] == "23"
    cd = reward("countdown")
    assert cd.score("<answer>30 - (100 - 93)</answer>", row) == 1.0
    assert cd.score("<answer>100 - 93 + 30</answer>", row) == 0.1  # valid numbers, wrong value
    assert cd.score("<answer>100 - 93</answer>", row) == 0.1       # not all numbers used
    assert cd.score("<answer>__import__('os')</answer>", row) == 0.1
    assert cd.score("30 - (100 - 93)", row) == 0.0                  # no tag


def test_gsm8k_on_a_real_row():
    row = load_rows(str(shared_path("data", "rl", "test", "gsm8k_1.parquet")), limit=1)[0]
    assert row["reward_model"]["ground_truth"] == "18"
    g = reward("gsm8k")
    assert g.score(r"16 - 3 - 4 = 9 eggs, 9 * 2 = 18 dollars. \boxed{18}", row) == 1.0
    assert g.score(r"\boxed{\$18.00}", row) == 1.0
    assert g.score("#### 18", row) == 1.0
    assert g.score(r"\boxed{17}", row) == 0.0
    assert g.score("the answer is 18", row) == 0.0  # no extractable answer


def test_math500_on_a_real_row():
    row = load_rows(str(shared_path("data", "rl", "test", "math500_1.parquet")), limit=1)[0]
    assert "polar" in row["prompt"][0]["content"]
    m = reward("math")
    assert m.score(r"So the point is \boxed{\left( 3, \frac{\pi}{2} \right)}", row) == 1.0
    assert m.score(r"\boxed{(3, \pi/2)}", row) == 1.0
    assert m.score(r"\boxed{(3, \pi)}", row) == 0.0
    assert m.score(r"(3, \frac{\pi}{2})", row) == 0.0  # no box


def test_format_reward():
    f = reward("format")
    assert f.score("<reasoning>r</reasoning>\n<answer>a</answer>", {}) == 1.0
    assert f.score("<answer>a</answer>", {}) == 0.0


def test_weighted_sum_and_failing_reward_scores_zero(caplog):
    class Boom:
        name = "boom"

        def score(self, completion, sample):
            raise ValueError("bad sample")

    sud = reward("sudoku", require_answer_tags=False)
    row = load_rows("dare://sudoku/test.parquet", limit=1)[0]
    w = WeightedReward([(sud, 0.5), (Boom(), 2.0)])
    with caplog.at_level(logging.WARNING, logger="dare.rewards"):
        total, parts = w.score_one(row["reward_model"]["ground_truth"], row)
    assert total == 0.5 and parts == {"sudoku": 1.0, "boom": 0.0}
    assert w.errors["boom"] == 1
    assert "boom raised ValueError: bad sample" in caplog.text and "data_source=sudoku" in caplog.text
    with pytest.raises(ValueError):
        WeightedReward([])
