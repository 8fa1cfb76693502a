"""The sandboxed ``code`` reward and the code benchmarks.

Real rows pass with a correct program and fail with a wrong one; each attack scores 0 within its
limit, is contained (no process of it survives, no file outside its directory, no connection) and
leaves this test process as it was.
"""

from __future__ import annotations

import errno
import functools
import json
import logging
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from dare.builtins.rewards import FormatReward
from dare.data import load_rows
from dare.rewards import WeightedReward
from dare_code.outcome import build_tests, code_outcome, count_tests, entry_point
from dare_code.extract import fenced_code, mbpp_code
from dare_code.sandbox import SandboxError, SandboxLimits, isolation, landlock, procfs, run_python, uid_mode_problem
from dare_code.sandbox.launch import RUNNER
from dare.testing import shared_path
from dare_code.reward import CodeReward

MODES = ["auto", "process"]  # auto is uid mode where this runs as root
FAST = SandboxLimits(timeout_s=2.0, cpu_time_s=5, memory_mb=512, max_processes=6)


def code_reward(**params):
    return CodeReward(params)


@functools.lru_cache(maxsize=None)
def row(name: str, index: int = 0) -> dict:
    return load_rows(str(shared_path("data", "rl", "test", f"{name}_1.parquet")), limit=index + 1)[index]


def fenced(code: str) -> str:
    return f"Here is the solution.\n```python\n{code}```\nIt sorts first."


CLOSE_OK = """def has_close_elements(numbers, threshold):
    s = sorted(numbers)
    return any(b - a < threshold for a, b in zip(s, s[1:]))
"""
CLOSE_WRONG = CLOSE_OK.replace("< threshold", "> threshold")
REMOVE_OCC_OK = (  # MBPP's own solutions use \r\n line ends
    "def remove_Occ(s, ch):\r\n    i = s.find(ch)\r\n    s = s[:i] + s[i + 1:] if i >= 0 else s\r\n"
    "    j = s.rfind(ch)\r\n    return s[:j] + s[j + 1:] if j >= 0 else s"
)


# ----------------------------------------------------------------------------------- extraction
def test_fenced_extraction():
    two = "```python\ndef f():\n    return 1\n```\nusage:\n```\nprint(f())\n```"
    assert fenced_code(two) == "print(f())"
    assert fenced_code(two, "first_with_def") == "def f():\n    return 1"
    assert fenced_code("```py\r\nx = 1\n```") == "x = 1"
    assert fenced_code("def f(): pass") is None  # no fence: format error
    assert fenced_code("```python\ndef f(): pass") is None  # unclosed (truncated) block
    assert fenced_code("```\n\n```") is None


def test_mbpp_extraction():
    body = "def f(a):\r\n    return a + 1"
    assert mbpp_code(f" '{body}' \n[DONE] \n\n") == body  # completion after the prompt's "[BEGIN]\n"
    assert mbpp_code(f"[BEGIN]\n '{body}' \n[DONE]") == body
    assert mbpp_code(f"{body}\n[DONE]\nmore text") == body  # no quotes: cut at DONE
    assert mbpp_code(f"```python\n{body}\n```\n") == body
    assert mbpp_code("[BEGIN] 'x=1' [DONE]") is None  # shorter than 10 characters


# -------------------------------------------------------------------------------- test programs
def test_entry_point_and_test_counts():
    he0, he32 = row("humaneval", 0), row("humaneval", 32)
    assert entry_point(he0, "") == "has_close_elements"
    assert entry_point(he32, "def helper(): pass") == "find_zero"  # the last def of the prompt, not poly
    assert entry_point({"extra_info": {"entry_point": "g"}, "prompt": "def f(): pass"}, "") == "g"
    assert entry_point({"prompt": "no code"}, "def first(x):\n    pass\ndef second(): pass") == "first"
    assert count_tests(he0["reward_model"]["ground_truth"]) == 7
    assert count_tests(row("humanevalplus")["reward_model"]["ground_truth"]) == 1006  # len(inputs)
    source, n = build_tests(he0, "")
    assert n == 7 and source.rstrip().endswith("check(has_close_elements)")
    source, n = build_tests(row("mbpp"), "")
    assert n == 3 and source.count("assert remove_Occ(") == 3
    plus_source, _ = build_tests(row("humanevalplus"), "")
    assert plus_source.count("check(has_close_elements)") == 1  # HumanEval+ calls check itself


# ------------------------------------------------------------------------------------ real rows
def test_humaneval_rows():
    he, reward = row("humaneval"), code_reward()
    assert reward.score(fenced(CLOSE_OK), he) == 1.0
    assert reward.score(fenced(CLOSE_WRONG), he) == 0.0
    assert reward.score(CLOSE_OK, he) == 0.0  # not fenced: format error
    early_exit = fenced("import os\nos._exit(0)\n" + CLOSE_WRONG)
    assert reward.score(early_exit, he) == 0.0  # exiting 0 before the tests is not a pass


def test_humanevalplus_row():
    plus, reward = row("humanevalplus"), code_reward()
    assert reward.score(fenced(CLOSE_OK), plus) == 1.0  # 1006 inputs, numpy-based assertion
    assert reward.score(fenced(CLOSE_WRONG), plus) == 0.0


def test_mbpp_rows():
    mbpp, reward = row("mbpp"), code_reward()
    assert reward.score(f" '{REMOVE_OCC_OK}' \n[DONE] \n\n", mbpp) == 1.0
    assert reward.score(" 'def remove_Occ(s, ch):\r\n    return s' \n[DONE]", mbpp) == 0.0
    sort_matrix = row("mbpp", 1)
    assert reward.score("[BEGIN]\n 'def sort_matrix(m):\n  return sorted(m, key=sum)' \n[DONE]", sort_matrix) == 1.0


def test_mbpp_few_shot_solutions_pass_their_own_tests():
    """The three solved examples in every MBPP prompt are canonical solutions with real asserts."""
    messages, reward = row("mbpp")["prompt"], code_reward()
    pairs = [(q["content"], a["content"]) for q, a in zip(messages[0:6:2], messages[1:6:2])]
    for question, answer in pairs:
        asserts = [line.strip() for line in question.splitlines() if line.strip().startswith("assert ")]
        sample = {"data_source": "mbpp", "reward_model": {"ground_truth": json.dumps(asserts)}}
        assert len(asserts) == 3 and reward.score(answer, sample) == 1.0
        assert reward.score(answer.replace("return", "return None and"), sample) == 0.0


def test_per_test_budget_follows_dare():
    sample = {"data_source": "mbpp", "reward_model": {"ground_truth": json.dumps(["assert f() == 1"] * 3)}}
    slow = " 'import time\ndef f():\n    return 1\ntime.sleep(0.6)' [DONE]"
    limits = SandboxLimits(timeout_s=10)
    assert code_outcome(slow, sample, limits, per_test_timeout_s=0.5).score == 1.0  # 3 tests x 0.5 s
    late = code_outcome(slow, sample, limits, per_test_timeout_s=0.1)  # 0.3 s
    assert late.score == 0.0 and late.result.timed_out


def test_malformed_ground_truth_is_a_data_error():
    from dare.errors import DataError

    for truth, problem in (
        ("def check(:", "is not valid Python"),
        ("x = 1", "has no assert and no check"),  # every program would pass
        ("[]", "is a list without assert strings"),
        ([1, 2], "is a list without assert strings"),
        (42, "is a int"),
    ):
        with pytest.raises(DataError, match=f"reward_model.ground_truth {problem}"):
            build_tests({"reward_model": {"ground_truth": truth}}, "")
    with pytest.raises(DataError, match="needs reward_model.ground_truth"):
        build_tests({"prompt": "x"}, "")


def test_raising_reward_is_logged_and_scores_zero(caplog):
    combined = WeightedReward([(code_reward(), 1.0), (FormatReward(), 0.5)])
    ok = "<reasoning>r</reasoning><answer>a</answer>"
    bad_sample = {"data_source": "humaneval", "reward_model": {"ground_truth": 42}, "extra_info": {"index": 7}}
    with caplog.at_level(logging.WARNING, logger="dare.rewards"):
        total, parts = combined.score_one(ok + "\n```python\nx = 1\n```", bad_sample)
    assert parts == {"code": 0.0, "format": 0.0} and total == 0.0  # code block breaks the strict format
    assert combined.errors["code"] == 1
    assert "reward code raised DataError" in caplog.text and "index=7" in caplog.text


# -------------------------------------------------------------------------------------- attacks
def process_state() -> tuple:
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    kinds = (resource.RLIMIT_NPROC, resource.RLIMIT_AS, resource.RLIMIT_CPU, resource.RLIMIT_FSIZE)
    limits = [resource.getrlimit(kind) for kind in kinds]
    return os.getpid(), os.getuid(), os.getcwd(), env, limits


@pytest.fixture
def unharmed(tmp_path):
    """This process's state and a file of it; asserts both are unchanged after the attack."""
    sentinel = tmp_path / "sentinel.txt"
    sentinel.write_text("intact")
    before = process_state()
    yield tmp_path
    assert process_state() == before and sentinel.read_text() == "intact"


def attack(source: str, mode: str, limits: SandboxLimits = FAST):
    """Score an attack as a HumanEval-style completion; returns (score, result, seconds)."""
    sample = {"data_source": "x", "prompt": "def f():", "reward_model": {"ground_truth": "assert f() == 1\n"}}
    start = time.monotonic()
    program = fenced(source + "\ndef f():\n    return 1\n")
    outcome = code_outcome(program, sample, limits, per_test_timeout_s=limits.timeout_s, isolation=mode)
    return outcome.score, outcome.result, time.monotonic() - start


def survivors(result) -> list[int]:
    """Processes of the run still present: in its PID namespace (bubblewrap) or session, or of its uid."""
    time.sleep(0.05)  # a killed process leaves /proc a moment later
    uid = result.layers.get("uid")
    found = procfs.in_namespace(result.pidns) if result.pidns else procfs.session_members(result.pid)
    return found + (procfs.owned_by(uid) if uid is not None else [])


@pytest.mark.parametrize("mode", MODES)
def test_infinite_loop(mode, unharmed):
    score, result, seconds = attack("while True:\n    pass", mode)
    assert score == 0.0 and result.timed_out and result.returncode is None
    assert seconds < FAST.timeout_s + 3.0
    assert survivors(result) == []


@pytest.mark.parametrize("mode", MODES)
def test_fork_bomb(mode, unharmed):
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    score, result, seconds = attack(bomb, mode)
    assert score == 0.0 and result.timed_out
    assert seconds < FAST.timeout_s + 4.0
    if result.layers["fork_blocked"]:  # root without uid mode: the guard refuses fork
        assert result.leftover == 0
    else:  # the kernel's process cap stopped it (the program itself is one); the supervisor killed the rest
        assert result.layers["nproc"] >= FAST.max_processes and 1 <= result.leftover < FAST.max_processes
    assert survivors(result) == []


@pytest.mark.parametrize("mode", MODES)
def test_ten_gigabyte_allocation(mode, unharmed):
    score, result, seconds = attack("blob = bytearray(10 * 1024 ** 3)", mode)
    assert score == 0.0 and result.failed_unit == 1 and "MemoryError" in result.stderr
    assert seconds < FAST.timeout_s + 3.0


@pytest.mark.parametrize("mode", MODES)
def test_write_outside_the_sandbox(mode, unharmed):
    target = unharmed / "outside" / "pwned.txt"
    target.parent.mkdir()
    target.parent.chmod(0o777)  # only the sandbox may stop it, not this directory's permissions
    direct = f"open({str(target)!r}, 'w').write('x')"
    score, result, _ = attack(direct, mode)
    assert score == 0.0 and not target.exists()
    from dare_code.sandbox import bwrap
    from dare_code.sandbox.view import view

    if result.layers["bwrap"] and bwrap.workdir(view()) == bwrap.WORKDIR:  # /tmp is the program's own empty tmpfs
        assert "No such file or directory" in result.stderr
    elif result.layers["bwrap"]:  # a checkout under /tmp: the program's directory is elsewhere, the guard refuses /tmp
        assert "outside the sandbox directory" in result.stderr
    else:
        assert "outside the sandbox directory" in result.stderr
    if landlock.abi_version() < 1 and not result.layers["bwrap"]:
        return  # without Landlock nothing below the Python guard stops writes to a 0777 directory
    # dir_fd-relative opens get past the Python guard; Landlock must still refuse
    relative = (
        f"import os\nfd = os.open('/', os.O_RDONLY)\nos.open({str(target)[1:]!r}, os.O_WRONLY | os.O_CREAT, dir_fd=fd)"
    )
    score, result, _ = attack(relative, mode)
    assert score == 0.0 and ("Permission denied" in result.stderr or "No such file" in result.stderr)
    assert not target.exists()


@pytest.mark.parametrize("mode", MODES)
def test_network_connection(mode, unharmed):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        server.setblocking(False)
        port = server.getsockname()[1]
        for source in (
            f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)",
            f"import _socket\n_socket.socket().connect(('127.0.0.1', {port}))",
        ):
            score, result, _ = attack(source, mode)
            assert score == 0.0 and "PermissionError" in result.stderr
        with pytest.raises(BlockingIOError):
            server.accept()  # nothing connected


def test_subprocesses_are_refused(unharmed):
    score, result, _ = attack("import subprocess\nsubprocess.run(['true'])", "auto")
    assert score == 0.0 and "subprocess.Popen is not allowed" in result.stderr


# ----------------------------------------------------------------------------- kernel layers
KERNEL_PROBE = r"""
import importlib.util, json, os, socket, sys
def load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(sys.argv[1], name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
identity, landlock = load("identity"), load("landlock")
box, target, port, layer = sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
if layer == "netns":
    assert identity.new_network_namespace()
else:
    identity.forbid_new_privileges()
    assert landlock.restrict([box], [os.devnull]) >= 4
out = {}
for key, act in (("outside", lambda: open(target, "w")), ("inside", lambda: open(os.path.join(box, "ok"), "w")),
                 ("connect", lambda: socket.create_connection(("127.0.0.1", port), timeout=1))):
    try:
        act()
        out[key] = "ok"
    except OSError as exc:
        out[key] = exc.errno
print(json.dumps(out))
"""


@pytest.mark.parametrize("layer", ["landlock", "netns"])
def test_kernel_layers_without_the_python_guard(layer, tmp_path):
    """Each kernel layer alone, as the runner applies it, refuses what the guard would."""
    if layer == "landlock" and landlock.abi_version() < 4:
        pytest.skip("needs Landlock ABI 4+ (file and TCP rules)")
    if layer == "netns" and uid_mode_problem() is not None:
        pytest.skip("a network namespace needs root")
    box, target = tmp_path / "box", tmp_path / "pwned.txt"
    box.mkdir()
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        server.setblocking(False)
        here = os.path.dirname(landlock.__file__)
        args = [here, str(box), str(target), str(server.getsockname()[1]), layer]
        out = json.loads(subprocess.run([sys.executable, "-I", "-c", KERNEL_PROBE, *args], capture_output=True,
                                        text=True, check=True, timeout=30).stdout)
        with pytest.raises(BlockingIOError):
            server.accept()
    if layer == "landlock":
        assert out["outside"] == errno.EACCES and out["inside"] == "ok" and not target.exists()
        assert out["connect"] == errno.EACCES
    else:
        assert out["connect"] == errno.ENETUNREACH


# ------------------------------------------------------------------------ isolation and setup
def test_uid_mode_layers():
    if uid_mode_problem() is not None:
        pytest.skip(f"uid mode unavailable: {uid_mode_problem()}")
    result = run_python(["import os\nprint(os.getuid(), os.getgid(), os.getgroups())"], FAST, "uid")
    layers = result.layers
    assert result.passed and isolation.UID_BASE <= layers["uid"] < isolation.UID_BASE + isolation.UID_COUNT
    assert result.stdout.split()[:2] == [str(layers["uid"])] * 2 and result.stdout.strip().endswith("[]")
    assert layers["nproc"] == FAST.max_processes and not layers["fork_blocked"] and layers["subreaper"]
    assert procfs.owned_by(layers["uid"]) == []


def test_uid_leases_are_exclusive():
    if uid_mode_problem() is not None:
        pytest.skip(f"uid mode unavailable: {uid_mode_problem()}")
    with isolation.lease_uid() as first, isolation.lease_uid() as second:
        assert first != second
        with socket.socket(socket.AF_UNIX) as other, pytest.raises(OSError, match="in use"):
            other.bind(f"\0dare-sandbox-uid-{first}")  # what another process's lease would try


def test_interrupted_caller_leaves_nothing_running(unharmed):
    """Ctrl-C while a program runs: the supervisor is told to stop and kills the program's tree."""
    spinner = "import os\nfor _ in range(2):\n    os.fork()\nwhile True:\n    pass"
    before = set(_sandbox_processes())
    # Python's own Ctrl-C handler, also when the suite runs with SIGINT ignored (nohup, `trap '' INT`)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.8, os.kill, (os.getpid(), signal.SIGINT))
    started = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_python([spinner], SandboxLimits(timeout_s=61.25, max_processes=8))  # 61.25: marks this run
    finally:
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - started < 10
    time.sleep(0.05)
    assert set(_sandbox_processes()) - before == set()


def _sandbox_processes() -> list[int]:
    """Processes running the sandbox runner (bwrap, supervisor and its forks keep its path in their
    command line) or owned by a sandbox uid."""
    runner = RUNNER.encode()
    found = [p for p in procfs.parents() if runner in _cmdline(p)]
    for pid in procfs.parents():
        uids = procfs._status(pid).get("Uid", "").split()
        if uids and isolation.UID_BASE <= int(uids[0]) < isolation.UID_BASE + isolation.UID_COUNT:
            found.append(pid)
    return found


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def test_isolation_choice(monkeypatch):
    monkeypatch.setattr(isolation, "_probe", lambda: ("it needs root (this process runs as uid 1000)", False))
    assert isolation.resolve_isolation("auto").mode == "process"
    monkeypatch.setattr(isolation, "bwrap_problem", lambda packages=(): "bwrap is not installed")
    assert isolation.resolve_isolation("auto") == isolation.Isolation("process", bwrap=False)
    with pytest.raises(SandboxError, match="isolation 'uid' is unavailable: it needs root"):
        isolation.resolve_isolation("uid")
    (where, message), = CodeReward({"isolation": "uid"}).check(None, "rewards[0]")  # what `dare validate` reports
    assert where == "rewards[0].params.isolation" and "it needs root" in message
    assert CodeReward({"isolation": "auto"}).check(None, "rewards[0]") == []
    with pytest.raises(SandboxError, match="isolation must be"):
        isolation.resolve_isolation("docker")
    with pytest.raises(SandboxError, match="memory_mb must be a positive number"):
        SandboxLimits(memory_mb=0)


def test_code_reward_and_benchmarks_are_registered(monkeypatch):
    """Through the plugin's entry point (``dare_code.plugin``), which registers lazy references."""
    from dare.eval.runner import benchmark_path
    from dare.plugins.manager import get_registry
    from dare.runspec import BenchmarkSpec

    reg = get_registry()
    assert reg.get("reward", "code").distribution == "dare-plugin-code"
    assert reg.get("reward", "code").cls is CodeReward
    evaluators = {name: reg.get("evaluator", name).cls for name in ("humaneval", "humanevalplus", "humaneval+", "mbpp")}
    assert evaluators["humaneval+"] is evaluators["humanevalplus"]
    monkeypatch.setenv("DARE_DATA_DIR", str(shared_path("data")))
    for name, count in (("humaneval", 164), ("humanevalplus", 163), ("mbpp", 500)):
        evaluator = evaluators[name]()
        assert evaluator.reward == "code" and evaluator.data_sources == (name,)
        path = benchmark_path(evaluator, BenchmarkSpec(name=name))
        assert path.name == f"{name}_1.parquet" and len(load_rows(str(path))) == count


# --------------------------------------------------------------------- tests in another process
def test_wire_round_trip():
    import collections
    import decimal
    import fractions
    import math

    import numpy as np

    from dare_code.sandbox import wire

    def refuse(obj):
        raise AssertionError(f"{obj!r} should be plain data")

    point = collections.namedtuple("Point", "x y")
    values = [
        None, True, 3, -(2**100), 1.5, float("inf"), "text\u00e9", b"\x00b", bytearray(b"ab"), (1, [2, {3: (4,)}]),
        {1, 2}, frozenset({"a"}), 2 - 3j, fractions.Fraction(1, 3), decimal.Decimal("0.1"), {(1, 2): [None]},
    ]
    for value in values:
        back = wire.decode(json.loads(json.dumps(wire.encode(value, refuse))), refuse)
        assert back == value and type(back) is type(value)
    converted = [(point(1, 2), (1, 2)), (collections.Counter("aab"), {"a": 2, "b": 1}), (np.int64(7), 7),
                 (np.float32(0.5), 0.5), (np.bool_(True), True)]
    for value, plain in converted:
        back = wire.decode(json.loads(json.dumps(wire.encode(value, refuse))), refuse)
        assert back == plain and type(back) is type(plain)
    nan = wire.decode(json.loads(json.dumps(wire.encode(float("nan"), refuse))), refuse)
    assert math.isnan(nan)
    seen = []
    assert wire.encode([object(), np.zeros(2)], lambda obj: seen.append(obj) or len(seen)) == [
        "l", [["r", 1, "object"], ["r", 2, "ndarray"]]
    ]


def test_wire_refuses_malformed_values():
    from dare_code.sandbox import wire

    for bad in ({"a": 1}, ["zz", []], ["l"], ["l", 3], ["d", [[["l", []], 1]]], ["s", [["l", []]]], ["b", "xyz"],
                ["q", 1, 0], ["r", "1", "x"], ["c", "1", 2], ["e", "not a number"]):
        with pytest.raises(wire.WireError):
            wire.decode(bad, lambda n, t: n)
    read, write = os.pipe()
    os.write(write, (2**31).to_bytes(4, "big"))
    with pytest.raises(wire.WireError, match="over the"):
        wire.receive(read)
    os.close(read)
    os.close(write)


def run_with_tests(program: str, tests: str, **kwargs):
    return run_python([program], FAST, tests=tests, **kwargs)


def test_program_objects_reach_the_tests_as_plain_data():
    program = (
        "class Node:\n    def __init__(self, v, kids=()):\n        self.v, self.kids = v, list(kids)\n"
        "def total(n):\n    return n.v + sum(total(k) for k in n.kids)\n"
        "def gen(n):\n    yield from range(n)\n"
        "def fail(kind):\n    raise {'value': ValueError, 'own': type('Own', (Exception,), {})}[kind]('no')\n"
        "def add(xs):\n    xs.append(1)\n    return len(xs)\n"
        "LIMIT = {'a': (1, 2.5)}\n"
    )
    tests = (
        "assert total(Node(1, [Node(2), Node(3, [Node(4)])])) == 10\n"
        "assert Node(5).v == 5 and Node(5) != Node(5)\n"  # a program object equals only itself
        "assert list(gen(3)) == [0, 1, 2] and LIMIT == {'a': (1, 2.5)}\n"
        "try:\n    fail('value')\nexcept ValueError as exc:\n    assert str(exc) == 'no'\n"
        "else:\n    raise AssertionError\n"
        "xs = []\nassert add(xs) == 1 and xs == []\n"  # arguments are copies
    )
    result = run_with_tests(program, tests)
    assert result.passed, result.tests_stderr
    result = run_with_tests(program, "try:\n    fail('own')\nexcept ValueError:\n    pass\n")
    assert not result.passed and "RemoteError: Own: no" in result.tests_stderr
    assert result.failed_unit == 1 and result.returncode == 0 and result.tests_returncode == 1


def test_program_failures_are_test_failures():
    raising = run_with_tests("raise RuntimeError('top level')", "pass\n")
    assert not raising.passed and raising.failed_unit == 0 and "RuntimeError: top level" in raising.stderr
    exiting = run_with_tests("def f():\n    import os\n    os.abort()\n", "assert f() is None\n")
    assert not exiting.passed and "ProgramGone" in exiting.tests_stderr


def test_builtins_are_taken_from_the_program_only_for_the_function_under_test():
    mbpp_sum = ["assert sum(10,15) == 6", "assert sum(100,150) == 93", "assert sum(4,6) == 3"]  # MBPP row 115
    sample = {"data_source": "mbpp", "reward_model": {"ground_truth": json.dumps(mbpp_sum)}}
    program = "import builtins\ndef sum(a, b):\n    return builtins.sum(d for d in range(1, a) if a % d == b % d == 0)"
    assert code_outcome(f"[BEGIN]\n '{program}' \n[DONE]", sample, FAST).score == 1.0
    hack = "def abs(x):\n    return 0\ndef sum(*a):\n    return 0\ndef f():\n    return 5\n"
    result = run_with_tests(hack, "assert abs(f() - 1) < 1e-9\nassert sum([f()]) == 1\n", entry_points=["f"])
    assert not result.passed and "AssertionError" in result.tests_stderr


def test_tested_names():
    from dare_code.outcome import tested_names

    assert tested_names("def check(candidate):\n    assert candidate(1)\n\ncheck(sum)\n") == ["sum"]
    assert tested_names("assert sum(10,15) == 6\nassert sum(4,6) == 3\n") == ["sum"]
    assert tested_names("assert set(similar(a, b)) == set((4, 5))\n") == []  # `set` is not under test
    assert tested_names("check(has_close_elements)\n") == []  # not a built-in: taken anyway


def test_active_layers_report():
    layers = isolation.active_layers()
    assert layers["kernel"] == os.uname().release
    assert layers["bwrap"] is True or isinstance(layers["bwrap"], str)
    assert (layers["bwrap"] is True) == (isolation.bwrap_problem() is None)
    assert layers["landlock_abi"] == landlock.abi_version()
    assert layers["tests"].startswith("separate process")
    result = run_python(["pass"], FAST)
    assert result.layers["bwrap"] == (layers["bwrap"] is True) and result.layers["landlock"] == layers["landlock_abi"]


def test_view_holds_no_secrets():
    from dare_code.sandbox.view import view

    seen = view()
    paths = seen.readable() + seen.listable()
    assert os.path.realpath(sys.base_prefix) in paths and seen.packages == ("numpy",)
    for private in ("/etc", "/root", "/home", "/proc", os.path.expanduser("~"), os.getcwd()):
        assert private not in paths
    assert all(not p.startswith(("/etc/", "/proc")) or p == "/etc/ld.so.cache" for p in paths)


def test_sandbox_directory_moves_when_the_view_lies_under_tmp():
    """A checkout or environment under /tmp would be hidden by the /tmp tmpfs: use another mount point."""
    import dataclasses

    from dare_code.sandbox import bwrap
    from dare_code.sandbox.view import view

    seen = view()
    under_tmp = dataclasses.replace(seen, trees=seen.trees + ("/tmp/checkout/dare_code/sandbox",))
    assert bwrap.workdir(under_tmp) == bwrap.FALLBACK_WORKDIR
    args = bwrap.command("bwrap", under_tmp, True, 2**20, {})
    assert args[args.index("--tmpfs", args.index("/dev/shm") + 1) + 1] == bwrap.FALLBACK_WORKDIR
    elsewhere = dataclasses.replace(seen, trees=tuple(t for t in seen.trees if not t.startswith("/tmp/")))
    assert bwrap.workdir(elsewhere) == "/tmp"
