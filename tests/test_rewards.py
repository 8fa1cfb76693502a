"""Benchmark scorers agree with hand-checked answers on real rows."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from dare.data import load_rows
from dare.plugins.manager import get_registry
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


class _Slow:
    """Test reward that hangs in one of three ways: a Python loop, a blocking sleep, or a sleep with SIGINT
    blocked (C code that never checks for signals)."""

    name = "slow"

    def __init__(self, how):
        self.how = how

    def score(self, completion, sample):
        import signal
        import time

        if self.how == "loop":
            while True:
                pass
        if self.how == "blocked":
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        time.sleep(3600)


@pytest.mark.parametrize("how", ["loop", "sleep"])
def test_a_reward_past_its_timeout_raises_naming_it_and_the_sample(how):
    """A call past ``timeout_s`` (0.3 s) raises RewardTimeoutError (a DareError) within a second or two, naming
    the reward, the limit and the sample; the next call of the same sum is timed afresh."""
    import time

    from dare.errors import DareError
    from dare.rewards.deadline import RewardTimeoutError

    sud = reward("sudoku", require_answer_tags=False)
    w = WeightedReward([(sud, 1.0), (_Slow(how), 1.0)], timeouts_s=[5.0, 0.3])
    sample = {"data_source": "sudoku", "extra_info": {"index": 17}, "reward_model": {"ground_truth": "1234"}}
    started = time.monotonic()
    with pytest.raises(RewardTimeoutError) as err:
        w.score_one("1234", sample)
    assert time.monotonic() - started < 3.0 and isinstance(err.value, DareError)
    assert str(err.value).startswith("reward 'slow' did not return within its timeout_s of 0.3 s on the sample with "
                                     "index=17 data_source=sudoku (completion '1234')")
    fast = WeightedReward([(sud, 1.0)], timeouts_s=[0.3])
    row = load_rows("dare://sudoku/test.parquet", limit=1)[0]
    for _ in range(3):  # calls well inside the limit (and one that raises) never see the watchdog
        assert fast.score_one(row["reward_model"]["ground_truth"], row) == (1.0, {"sudoku": 1.0})
        assert fast.score_one("x", sample) == (0.0, {"sudoku": 0.0})  # no puzzle: the reward raises, scores 0
        time.sleep(0.2)


def test_a_reward_that_blocks_the_interrupt_ends_the_process_with_the_paragraph(tmp_path):
    """C code that never returns to Python (here: SIGINT blocked, then a sleep): after the grace period the
    watchdog writes the paragraph and exits with status 2, as the CLI does for an error."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import dare.rewards.deadline as deadline
        deadline.GRACE_S = 0.5
        from dare.rewards import WeightedReward
        from test_rewards import _Slow
        WeightedReward([(_Slow("blocked"), 1.0)], timeouts_s=[0.3]).score_one("x", {{"data_source": "t"}})
        print("returned")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("error: reward 'slow' did not return within its timeout_s of 0.3 s on the sample")
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_non_finite_reward_values_are_kept_and_recorded():
    """NaN/Inf values pass through (the sum is non-finite) and are recorded per reward with the sample index
    until taken; a bad timeouts_s list is refused."""
    import math

    class Const:
        def __init__(self, name, value):
            self.name, self.value = name, value

        def score(self, completion, sample):
            return self.value

    w = WeightedReward([(Const("nan", float("nan")), 1.0), (Const("inf", float("inf")), 0.5), (Const("one", 1.0), 1.0)])
    total, parts = w.score_one("x", {"extra_info": {"index": 4}})
    assert math.isnan(total) and math.isnan(parts["nan"]) and parts["inf"] == math.inf and parts["one"] == 1.0
    w.score_one("x", {"extra_info": {"index": 5}})
    found = w.take_nonfinite()
    assert list(found) == ["nan", "inf"] and [i for _, i in found["nan"]] == [4, 5]
    assert found["inf"] == [(math.inf, 4), (math.inf, 5)] and w.take_nonfinite() == {}
    with pytest.raises(ValueError, match="one value above 0 per reward"):
        WeightedReward([(Const("one", 1.0), 1.0)], timeouts_s=[1.0, 2.0])
    with pytest.raises(ValueError, match="one value above 0 per reward"):
        WeightedReward([(Const("one", 1.0), 1.0)], timeouts_s=[0.0])


def test_non_finite_reward_guard_counts_rollouts_in_a_row():
    """Two bad rollouts warn (naming the reward, values and samples), a clean one resets the count, the
    third bad one in a row raises; a run shorter than the limit stops at its last step."""
    from dare.rl.reward_guard import NonFiniteRewardError, NonFiniteRewardGuard, describe_nonfinite

    bad = {"code": [(float("nan"), 3), (float("-inf"), 4)]}
    assert describe_nonfinite(bad) == "reward 'code' returned nan, -inf (2 completion(s); sample index 3, 4)"
    many = {"r": [(float("nan"), i) for i in range(8)]}
    assert describe_nonfinite(many) == ("reward 'r' returned nan, nan, nan, nan, nan, nan, ... (8 completion(s); "
                                        "sample index 0, 1, 2, 3, 4, 5, ...)")
    guard = NonFiniteRewardGuard(3)
    guard.observe(bad, 1, 100)
    guard.observe(bad, 2, 100)
    guard.observe({}, 3, 100)
    assert guard.consecutive == 0
    guard.observe(bad, 4, 100)
    guard.observe(bad, 5, 100)
    with pytest.raises(NonFiniteRewardError, match=r"^step 6: the rewards were NaN/Inf for 3 rollout\(s\) in a row"):
        guard.observe(bad, 6, 100)
    short = NonFiniteRewardGuard(3)
    short.observe(bad, 1, 2)
    with pytest.raises(NonFiniteRewardError, match="reward 'code' returned nan, -inf"):
        short.observe(bad, 2, 2)


def test_the_timeout_interrupts_whatever_sigint_handler_or_mask_the_process_has():
    """A library's own SIGINT handler, or SIGINT left blocked in the main thread, does not stop the timeout from
    interrupting the call; both are put back after it."""
    import signal

    from dare.rewards.deadline import RewardTimeoutError

    def quiet(signum, frame):  # a handler that swallows Ctrl-C (as some libraries install)
        pass

    previous = signal.signal(signal.SIGINT, quiet)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        w = WeightedReward([(_Slow("sleep"), 1.0)], timeouts_s=[0.3])
        with pytest.raises(RewardTimeoutError):
            w.score_one("x", {"data_source": "t"})
        assert signal.getsignal(signal.SIGINT) is quiet
        assert signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, set())
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        signal.signal(signal.SIGINT, previous)
