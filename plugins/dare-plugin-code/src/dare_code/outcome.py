"""The code reward: run the completion's program against the sample's tests in the sandbox.

Rule (DARE ``dllm_rm`` -> ``rllm_reward_fn_code``, ``verl/utils/reward_score/code_reward.py``; see
docs/algorithms.md §6): extract the program (:mod:`dare_code.extract`; MBPP rows use the MBPP rule),
run it with the tests; 1.0 if everything passes, 0.0 if anything fails, times out or no program can be
extracted (format error). The tests come from ``reward_model.ground_truth``:

* a list of assert statements, or a JSON string of one (MBPP): run one after another;
* test code (HumanEval, HumanEval+): run as is; when it defines ``check`` without calling it
  (HumanEval), ``check(<entry point>)`` is appended. The entry point is ``extra_info.entry_point``,
  else the last top-level ``def`` of the prompt (true for all 164 HumanEval prompts), else the first
  function the program defines (rLLM's fallback).

Time budget as DARE's runners: ``per_test_timeout_s`` times the number of tests (HumanEval+: the
length of its ``inputs`` list, as rLLM's ``get_num_test_cases``; otherwise the ``assert`` statements),
capped at ``timeout_s``. The program runs after :data:`PRELUDE` (common standard-library imports, as
rLLM's ``BASE_IMPORTS`` minus numpy/pandas) and with ``__name__ != "__main__"`` (so, as rLLM's
``clean_code_main_block``, a ``__main__`` block does not run).

Unlike rLLM (program and tests in one namespace), the tests run in a separate sandboxed process that
calls the program's functions and receives plain data only (:mod:`dare_code.sandbox.remote`): a
program cannot exit early with success, read or patch its tests, or pass with an object that equals
everything. The test process also runs :data:`PRELUDE`; names the program redefines that shadow a
built-in or a prelude name reach the tests only for the function under test (:func:`tested_names`).
The helpers the tests call come from the task's prompt (:func:`task_helpers`, run in the test
process), and the tests take from the program only the declared names (:func:`declared_names`: the
entry point of ``check``, or the names MBPP's asserts call), so the expected answer never reaches a
function of the program's making (HumanEval/38 and /50 call ``encode_cyclic``/``encode_shift`` on it).
The layers active on this machine are logged (INFO) at the first scored program.
"""

from __future__ import annotations

import ast
import builtins
import json
import logging
import re
from dataclasses import dataclass, replace
from typing import Any, Literal

from dare.components import Reward
from dare.errors import DataError
from dare_code.extract import fenced_code, mbpp_code
from dare_code.sandbox import Isolation, SandboxLimits, SandboxResult, active_layers, run_python

__all__ = [
    "PRELUDE",
    "CodeOutcome",
    "count_tests",
    "entry_point",
    "build_tests",
    "tested_names",
    "task_helpers",
    "program_names",
    "declared_names",
    "extract_program",
    "code_outcome",
]

log = logging.getLogger("dare_code.outcome")

PRELUDE = """\
import bisect, collections, copy, datetime, functools, heapq, itertools, math, operator, random, re, string, sys
from collections import Counter, OrderedDict, defaultdict, deque
from functools import cmp_to_key, lru_cache, partial, reduce
from heapq import heapify, heappop, heappush, nlargest, nsmallest
from itertools import accumulate, chain, combinations, groupby, permutations, product, zip_longest
from math import ceil, comb, factorial, floor, gcd, inf, isqrt, log, sqrt
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Set, Tuple, Union
"""

_reported: set[str] = set()  # isolation settings whose layers were logged
_PROMPT_DEF = re.compile(r"^def\s+([A-Za-z_]\w*)\s*\(", re.MULTILINE)
_CODE_DEF = re.compile(r"def\s+([A-Za-z_]\w*)\s*\(")


@dataclass(frozen=True)
class CodeOutcome:
    """One scored completion: ``score`` (1.0/0.0), the extracted ``program`` (None: format error) and
    the sandbox ``result`` (None when nothing ran: format error or no entry point for ``check``)."""

    score: float
    program: str | None
    result: SandboxResult | None


def _plain(value: Any) -> Any:
    """numpy arrays (as pandas hands out list columns) as lists."""
    return value.tolist() if hasattr(value, "tolist") else value


_EXPECTED = "expected test code (e.g. defining check(candidate)) or a list of assert statements (or its JSON)"


def _assert_list(truth: Any) -> list[str] | None:
    """The assert statements of an MBPP-style ground truth; None when it is test code.

    :raises DataError: a list (or JSON list) that is empty or holds anything but strings.
    """
    truth = _plain(truth)
    if isinstance(truth, str):
        try:
            truth = json.loads(truth)
        except ValueError:
            return None
    if not isinstance(truth, list):
        return None
    if not truth or not all(isinstance(t, str) for t in truth):
        raise DataError(f"reward_model.ground_truth is a list without assert strings ({str(truth)[:80]}); {_EXPECTED}")
    return truth


def count_tests(test_code: str) -> int:
    """Number of tests in test code: the length of an ``inputs = [...]`` list (HumanEval+), else the
    number of ``assert`` statements, at least 1.

    :raises SyntaxError: the test code does not parse.
    """
    return _count(ast.parse(test_code))


def _count(tree: ast.Module) -> int:
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.List):
            if any(isinstance(t, ast.Name) and t.id == "inputs" for t in node.targets):
                return max(len(node.value.elts), 1)
    return max(sum(isinstance(node, ast.Assert) for node in ast.walk(tree)), 1)


def _prompt_text(sample: dict[str, Any]) -> str:
    """The prompt as text: a string prompt, or the last user message of a chat prompt."""
    prompt = _plain(sample.get("prompt"))
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        users = [m.get("content", "") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        return str(users[-1]) if users else ""
    return ""


def entry_point(sample: dict[str, Any], program: str) -> str | None:
    """The function ``check`` must test (see the module docstring); None when none can be found."""
    info = sample.get("extra_info")
    if isinstance(info, dict) and isinstance(info.get("entry_point"), str) and info["entry_point"]:
        return info["entry_point"]
    names = _PROMPT_DEF.findall(_prompt_text(sample))
    if names:
        return names[-1]
    found = _CODE_DEF.search(program)
    return found.group(1) if found else None


def _calls_check(tree: ast.Module) -> bool:
    return any(
        isinstance(n, ast.Expr) and isinstance(n.value, ast.Call) and isinstance(n.value.func, ast.Name)
        and n.value.func.id == "check"
        for n in tree.body
    )


def _defines_check(tree: ast.Module) -> bool:
    return any(isinstance(n, ast.FunctionDef) and n.name == "check" for n in tree.body)


def build_tests(sample: dict[str, Any], program: str) -> tuple[str, int] | None:
    """The test source to run after ``program`` and its number of tests.

    :returns: ``(source, n_tests)``, or None when the tests need an entry point and none is found.
    :raises DataError: ``reward_model.ground_truth`` is missing, is neither test code nor a list of
        asserts, does not parse, or holds no test at all (every program would pass).
    """
    try:
        truth = Reward.ground_truth(sample)
    except KeyError:
        raise DataError(f"the code reward needs reward_model.ground_truth; {_EXPECTED}") from None
    asserts = _assert_list(truth)
    if asserts is not None:
        return "\n".join(asserts) + "\n", len(asserts)
    if not isinstance(truth, str):
        raise DataError(f"reward_model.ground_truth is a {type(truth).__name__}; {_EXPECTED}")
    try:
        tree = ast.parse(truth)
    except SyntaxError as exc:
        raise DataError(f"reward_model.ground_truth is not valid Python ({exc}); {_EXPECTED}") from None
    if not _defines_check(tree) and not any(isinstance(n, ast.Assert) for n in ast.walk(tree)):
        raise DataError(f"reward_model.ground_truth has no assert and no check(); every program would pass; {_EXPECTED}")
    source = truth
    if _defines_check(tree) and not _calls_check(tree):
        name = entry_point(sample, program)
        if name is None:
            return None
        source = f"{truth}\n\ncheck({name})\n"
    return source, _count(tree)


def _prelude_names() -> frozenset[str]:
    names = set(dir(builtins))
    for node in ast.walk(ast.parse(PRELUDE)):
        if isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
    return frozenset(names)


_STANDARD = _prelude_names()


def tested_names(test_source: str) -> list[str]:
    """The functions under test that share a name with a built-in or a :data:`PRELUDE` name (the
    test process takes those from the program; every other name the program defines it takes anyway,
    see :mod:`dare_code.sandbox.remote`): arguments of top-level ``check(...)`` calls, and in an
    ``assert`` that calls only such names (MBPP's ``assert sum(10,15) == 6``), the outermost call.

    :raises SyntaxError: the test source does not parse.
    """
    found = []
    for node in ast.parse(test_source).body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name):
            if node.value.func.id == "check":
                found += [a.id for a in node.value.args if isinstance(a, ast.Name)]
        elif isinstance(node, ast.Assert):
            calls = [n for n in ast.walk(node.test) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
            if calls and all(c.func.id in _STANDARD for c in calls):
                found.append(calls[0].func.id)
    return [name for name in dict.fromkeys(found) if name in _STANDARD]


_CODE_START = re.compile(r"^(?:def |async def |class |import |from |@)", re.MULTILINE)
_FENCE_END = re.compile(r"^```", re.MULTILINE)
_CHECK_DEF = re.compile(r"^def check\(", re.MULTILINE)
_HELPER_NODES = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign,
                 ast.AnnAssign)


def task_helpers(sample: dict[str, Any], entry_points: list[str]) -> str | None:
    """The trusted code of the task's prompt that its tests may call: the prompt's top-level imports,
    assignments, functions and classes but the entry points (HumanEval/38's ``encode_cyclic``, /50's
    ``encode_shift``, /32's ``poly``). The test process runs it, so a helper the tests call with the
    expected answer (``candidate(encode_cyclic(s)) == s``) is never the program's. The prompt's code
    starts at its first top-level ``def``/``class``/``import``/``from``/decorator line (a chat prompt's
    instruction text comes before it) and ends at a closing code fence, if any; None when there is no
    such code or it does not parse.
    """
    text = _prompt_text(sample)
    start = _CODE_START.search(text)
    if start is None:
        return None
    code = text[start.start():]
    fence = _FENCE_END.search(code)
    try:
        tree = ast.parse(code if fence is None else code[:fence.start()])
    except (SyntaxError, ValueError):
        return None
    kept = [n for n in tree.body if isinstance(n, _HELPER_NODES) and getattr(n, "name", None) not in entry_points]
    if not any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) for n in kept):
        return None
    return ast.unparse(ast.Module(body=kept, type_ignores=[])) + "\n"


def _names(tree: ast.AST) -> tuple[set[str], set[str]]:
    """``(bound, read)``: every name a piece of code binds anywhere (definitions, assignments, imports,
    parameters) and every name it reads, in one walk."""
    bound: set[str] = set()
    read: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name):
            (read if isinstance(n.ctx, ast.Load) else bound).add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(n.name)
        elif isinstance(n, ast.alias):
            bound.add((n.asname or n.name).split(".")[0])
        elif isinstance(n, ast.arg):
            bound.add(n.arg)
    return bound, read


def program_names(tests: str | ast.Module, helpers: str | None = None) -> list[str]:
    """Names the tests use that only the program can provide: read but never bound by the tests,
    not a built-in or :data:`PRELUDE` name, not defined by the task's trusted ``helpers``.

    :param tests: the test source, or its parsed module (HumanEval+'s tests are megabytes: parse once).
    :raises SyntaxError: the test source or the helpers do not parse.
    """
    bound, read = _names(ast.parse(tests) if isinstance(tests, str) else tests)
    own = bound | _STANDARD | (_names(ast.parse(helpers))[0] if helpers else set())
    return sorted(read - own)


def declared_names(test_source: str, entry: str | None, helpers: str | None = None,
                   tested: list[str] | None = None) -> list[str]:
    """The names the tests take from the program: for test code that calls ``check(<entry point>)``
    (HumanEval, HumanEval+) the entry point alone; for assert statements (MBPP) the names they use
    that only the program can provide (:func:`program_names`, the task shows these asserts); both
    with the :func:`tested_names` that shadow a built-in (``tested``: already computed).

    :raises SyntaxError: the test source does not parse.
    """
    base = [entry] if entry is not None and f"check({entry})" in test_source else program_names(test_source, helpers)
    return sorted(set(base) | set(tested_names(test_source) if tested is None else tested))


def extract_program(
    completion: str,
    sample: dict[str, Any],
    extraction: Literal["auto", "fenced", "mbpp"] = "auto",
    fenced_block: Literal["last", "first_with_def"] = "last",
) -> str | None:
    """The program of ``completion`` (None: format error): the MBPP rule for ``extraction="mbpp"``
    (or ``"auto"`` on a ``data_source == "mbpp"`` row, as DARE dispatches), else the fenced-block
    rule with ``fenced_block``."""
    if extraction == "mbpp" or (extraction == "auto" and sample.get("data_source") == "mbpp"):
        return mbpp_code(completion)
    return fenced_code(completion, fenced_block)


def code_outcome(
    completion: str,
    sample: dict[str, Any],
    limits: SandboxLimits,
    per_test_timeout_s: float = 1.0,
    extraction: Literal["auto", "fenced", "mbpp"] = "auto",
    fenced_block: Literal["last", "first_with_def"] = "last",
    isolation: str | Isolation = "auto",
) -> CodeOutcome:
    """Score one completion (see the module docstring); ``limits.timeout_s`` caps the test budget.

    :raises DataError: a malformed ground truth (see :func:`build_tests`).
    :raises dare_code.sandbox.SandboxError: the sandbox cannot run here.
    """
    program = extract_program(completion, sample, extraction, fenced_block)
    if program is None:
        return CodeOutcome(0.0, None, None)
    tests = build_tests(sample, program)
    if tests is None:
        return CodeOutcome(0.0, program, None)
    source, n_tests = tests
    entry = entry_point(sample, program) if _CHECK_DEF.search(source) else None
    helpers = task_helpers(sample, [entry] if entry else [])
    if isinstance(isolation, str) and isolation not in _reported:
        _reported.add(isolation)
        log.info("code reward sandbox (isolation %r): %s", isolation, active_layers(isolation))
    budget = min(limits.timeout_s, per_test_timeout_s * n_tests)
    run_limits = replace(limits, timeout_s=budget)
    tested = tested_names(source)
    result = run_python(
        [PRELUDE, program], run_limits, isolation, tests=source, setup_units=1, entry_points=tested,
        test_setup=helpers, bound_names=declared_names(source, entry, helpers, tested),
    )
    if not result.passed:
        log.debug("code program failed (unit %s, exit %s, timed out %s): %s", result.failed_unit, result.returncode,
                  result.timed_out, result.stderr[-300:])
    return CodeOutcome(1.0 if result.passed else 0.0, program, result)
