"""The tests' helpers are the task's code, never the program's: the scan of HumanEval, HumanEval+ and MBPP
for tests that call a name the program could define besides the function under test, and HumanEval/38 and
/50 (the tests call ``encode_cyclic``/``encode_shift`` on the expected answer) scored for real.

The data is the project's shared copy (``$DARE_SHARED_DIR/data/rl/test/*.parquet``); without it these tests
skip with the reason.
"""

from __future__ import annotations

import ast
import json
import os

import pytest

from dare.testing import shared_path
from dare_code.outcome import (
    PRELUDE,
    build_tests,
    code_outcome,
    declared_names,
    entry_point,
    program_names,
    task_helpers,
)
from dare_code.sandbox import SandboxLimits
from dare_code.sandbox.isolation import Isolation, resolve_isolation

#: rows whose tests call a name the program could define other than the function under test, and that
#: name: the expected answer (or a value derived from it) goes through it. Each is defined by the row's
#: prompt, so the test process takes it from there (task_helpers). HumanEval+ defines its helpers in its
#: tests; MBPP's asserts call only the function under test.
HELPER_CALLS = {
    "humaneval": {32: ["poly"], 38: ["encode_cyclic"], 50: ["encode_shift"]},
    "humanevalplus": {},
    "mbpp": {},
}
#: MBPP rows whose asserts read names only the program can define besides the function (inputs the
#: original task's test_setup_code built: the program defines them, and the expected answer is not among them)
MBPP_PROGRAM_INPUTS = {356: ["is_tree_balanced", "root", "root1", "root2"]}
LIMITS = SandboxLimits(timeout_s=10.0, cpu_time_s=10, memory_mb=512, max_processes=8)


def _rows(name: str) -> list[dict]:
    import pandas as pd

    frame = pd.read_parquet(shared_path("data", "rl", "test", f"{name}_1.parquet"))
    return [row.to_dict() for _, row in frame.iterrows()]


def _test_source(row: dict) -> str:
    truth = row["reward_model"]["ground_truth"]
    try:
        asserts = json.loads(truth)
    except ValueError:
        return truth
    return "\n".join(asserts) if isinstance(asserts, list) else truth


_SLOW = [pytest.mark.slow, pytest.mark.skipif(
    os.environ.get("DARE_SLOW") != "1", reason="slow (HumanEval+'s tests are ~30 s of parsing here): set DARE_SLOW=1")]


@pytest.mark.parametrize("name", ["humaneval", pytest.param("humanevalplus", marks=_SLOW), "mbpp"])
def test_scan_for_tests_that_call_a_helper_the_program_could_define(name):
    """Every row: the names its tests read that neither they, a built-in, the prelude nor the task's prompt
    helpers define are only the function under test (MBPP: the names its asserts call); the helpers its
    tests call with the expected answer are exactly :data:`HELPER_CALLS`, and each comes from the prompt."""
    found, inputs = {}, {}
    for row in _rows(name):
        index = row["extra_info"]["index"]
        tree = ast.parse(_test_source(row))  # once: HumanEval+'s tests are megabytes
        if name == "mbpp":
            names = program_names(tree)
            calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
            if len(set(names) & calls) > 1:
                found[index] = sorted(set(names) & calls)
            if len(names) > 1:
                inputs[index] = names
            continue
        entry = entry_point(row, "")
        without_prompt = [n for n in program_names(tree) if n != entry]
        if without_prompt:
            found[index] = without_prompt
        helpers = task_helpers(row, [entry])
        if helpers is not None:  # the trusted unit runs on its own (imports included) and covers every helper
            assert [n for n in program_names(tree, helpers) if n != entry] == [], index
            exec(compile(PRELUDE + helpers, "task.py", "exec"), {"__name__": "task"})
        if name == "humaneval":
            assert declared_names(build_tests(row, "def x(): pass")[0], entry, helpers) == [entry], index
    assert found == HELPER_CALLS[name]
    if name == "mbpp":
        assert inputs == MBPP_PROGRAM_INPUTS


HUMANEVAL_38 = '''```python
def decode_cyclic(s: str):
    groups = [s[(3 * i):min((3 * i + 3), len(s))] for i in range((len(s) + 2) // 3)]
    groups = [(group[-1] + group[:-1]) if len(group) == 3 else group for group in groups]
    return "".join(groups)
```'''
HUMANEVAL_50 = '''```python
def decode_shift(s: str):
    return "".join([chr(((ord(ch) - 5 - ord("a")) % 26) + ord("a")) for ch in s])
```'''
#: record the argument of the tests' helper (the expected answer) and return it from the function under test
RECORDER = '''```python
seen = []


def {helper}(s):
    seen.append(s)
    return s


def {entry}(s):
    return seen[-1] if seen else s
```'''


def _isolation(config: str) -> Isolation:
    auto = resolve_isolation("auto")
    if config == "auto":
        return auto
    if config == "native":
        return Isolation(auto.mode, auto.read_all, bwrap=False)
    return resolve_isolation("process") if config == "process" else Isolation("process")


@pytest.mark.parametrize("config", ["auto", "native", "process", "process-native"])
@pytest.mark.parametrize("index,helper,entry,solution", [(38, "encode_cyclic", "decode_cyclic", HUMANEVAL_38),
                                                          (50, "encode_shift", "decode_shift", HUMANEVAL_50)])
def test_humaneval_38_and_50_need_a_solution(config, index, helper, entry, solution):
    """The recorder scores 0 in every configuration (the tests' helper is the prompt's); a decoding
    solution scores 1, so the 0 is the helper's doing and not a broken task."""
    row = next(r for r in _rows("humaneval") if r["extra_info"]["index"] == index)
    iso = _isolation(config)
    cheat = code_outcome(RECORDER.format(helper=helper, entry=entry), row, LIMITS, isolation=iso)
    assert cheat.score == 0.0 and "AssertionError" in cheat.result.tests_stderr
    assert code_outcome(solution, row, LIMITS, isolation=iso).score == 1.0


def test_task_helpers_of_a_fenced_chat_prompt():
    """A chat prompt with instructions and a fenced block: the helpers are the block's functions but the
    entry point; the fence and the text around it are not code."""
    prompt = [{"role": "user", "content": "Complete this:\n```python\nimport math\n\ndef helper(x):\n    return "
               "math.floor(x)\n\n\ndef solve(x):\n    \"\"\"Use helper.\"\"\"\n```\nThanks."}]
    assert task_helpers({"prompt": prompt}, ["solve"]) == "import math\n\ndef helper(x):\n    return math.floor(x)\n"
    assert task_helpers({"prompt": "def solve(x):\n    \"\"\"Only the entry point.\"\"\"\n"}, ["solve"]) is None
    assert task_helpers({"prompt": "Write a function that adds two numbers."}, ["add"]) is None


def test_the_recorder_passes_when_the_program_provides_the_helper():
    """The check can fail: with the program's own helper (one namespace, as rLLM runs it) the recorder
    passes HumanEval/38's tests."""
    row = next(r for r in _rows("humaneval") if r["extra_info"]["index"] == 38)
    program = RECORDER.format(helper="encode_cyclic", entry="decode_cyclic").strip("`\npython")
    namespace: dict = {}
    exec(PRELUDE + program + "\n" + row["reward_model"]["ground_truth"] + "\ncheck(decode_cyclic)\n", namespace)
