"""The hostile corpus: every program in tests/sandbox_corpus/ is scored by the ``code`` reward.

Each program defines ``f`` so that the tests (``assert f() == 1`` unless its ``# tests:`` line says
otherwise) pass exactly when its attack worked; reward hacks try to pass with a wrong ``f``. For
every program: it scores 0, its run (from the start of its process until every process of it was
reaped) ends within the time limit plus 1 s, no process of it
survives, nothing outside its directory is written (a world-writable directory with a sentinel),
no planted secret (a root-only private key, a variable in this process's environment, /etc/shadow)
appears in anything it printed, nothing reaches this process's TCP and UDP sockets, its whole
process tree stayed within its memory limit and its directory within its disk quota, and this
test process is unchanged.

Configurations: ``auto`` (what the reward uses here: bubblewrap where it works), ``native`` (the
fallback layers alone, where Landlock ABI 4+ is available), ``process`` (the caller's uid, bubblewrap
where it works) and ``process-native`` (the caller's uid without bubblewrap). A program's ``# prompt:``
line is the task's prompt (the trusted helpers its tests may call), its ``# tests:`` line the tests.
"""

from __future__ import annotations

import ctypes
import os
import re
import resource
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path
from string import Template

import pytest

from native_build import build_native
from dare_code.outcome import PRELUDE, code_outcome
from dare_code.sandbox import SandboxLimits, landlock, procfs
from dare_code.sandbox.isolation import Isolation, resolve_isolation
from dare_code.sandbox.launch import RUNNER

CORPUS = Path(__file__).parent / "sandbox_corpus"
CASES = sorted(CORPUS.glob("[0-9][0-9]_*.py"))
LIMITS = SandboxLimits(timeout_s=2.0, cpu_time_s=4, memory_mb=512, max_processes=8, max_file_mb=8, max_disk_mb=32)
#: over the memory limit before the 10 ms watchdog acts (the largest jump seen between two checks
#: is a few tens of MiB); disk under bubblewrap is exact (tmpfs size)
MEMORY_SLACK_MB = 128
DISK_SLACK_MB = 64
#: the program's run (fork to last reap) must end within the time limit plus 1 s; starting the
#: interpreter and bubblewrap before it takes ~0.3 s here, more when the machine is busy
STARTUP_SLACK_S = 5.0
#: the slow configurations run the whole corpus again; make test runs these cases in them
#: attacks that only need the caller's rights: outside the sandbox they succeed (the control)
CONTROL = {"14", "15", "16", "17", "26", "27", "28", "39", "48", "49", "50", "51"}
NATIVE_FAST = {"04", "05", "09", "14", "15", "16", "18", "19", "20", "21", "26", "27", "28", "31", "33", "39", "41"}
#: native code (tests/native_attack.c) and executable memory: run in every configuration by make test
NATIVE = {"45", "46", "47", "48", "49"}
#: UDP to the caller, a test's helper bound to the program, a StopIteration, a subinterpreter, 700 threads,
#: UDP over IPv6 and netlink: run in every configuration by make test
EVERY_MODE = {"08", "50", "51", "52", "53", "54"}
#: processes and threads seen above max_processes before the watchdog's kill, where no pids cgroup holds the cap
TASK_SLACK = 64
_KEY_SPEC_SESSION_KEYRING, _KEYCTL_JOIN_SESSION_KEYRING = -3, 1


def test_corpus_is_complete():
    """At least 40 programs, numbered without gaps."""
    numbers = [int(p.name[:2]) for p in CASES]
    assert len(CASES) >= 40 and numbers == list(range(1, len(CASES) + 1))


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """Secrets and targets outside the sandbox: a root-only key, an environment variable of this
    process, a world-writable directory with a sentinel, a TCP and a UDP socket."""
    root = tmp_path_factory.mktemp("corpus")
    private = root / "private"
    private.mkdir(mode=0o700)
    key_token = secrets.token_hex(16)
    key = private / "id_ed25519"
    key.write_text(f"-----BEGIN OPENSSH PRIVATE KEY-----\n{key_token}\n-----END OPENSSH PRIVATE KEY-----\n")
    key.chmod(0o600)
    outside = root / "outside"
    outside.mkdir()
    outside.chmod(0o777)  # only the sandbox may stop writes here, not this directory's permissions
    (outside / "sentinel.txt").write_text("intact")
    env_name, env_token = f"DARE_CORPUS_SECRET_{secrets.token_hex(4).upper()}", secrets.token_hex(16)
    os.environ[env_name] = env_token
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(8)
    tcp.setblocking(False)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.setblocking(False)
    try:
        udp6 = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        udp6.bind(("::1", 0))
        udp6.setblocking(False)
    except OSError:  # no IPv6 here: a second IPv4 listener stands in
        udp6 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        udp6.bind(("127.0.0.1", 0))
        udp6.setblocking(False)
    (root / "sockets").mkdir()
    (root / "sockets").chmod(0o777)
    unix_path = str(root / "sockets" / "host.sock")
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(unix_path)
    os.chmod(unix_path, 0o777)
    unix.listen(8)
    unix.setblocking(False)
    key_secret = _plant_session_key()
    native = build_native(root / "attack.so", outside, unix_path, os.getpid())
    native_hex = native.hex() if native else None
    try:
        yield {
            "values": {
                "OUTSIDE": str(outside),
                "SECRET_FILE": str(key),
                "SECRET_ENV_NAME": env_name,
                "CALLER_DIR": str(Path(__file__).parent),
                "TCP_PORT": str(tcp.getsockname()[1]),
                "UDP_PORT": str(udp.getsockname()[1]),
                "UDP6_PORT": str(udp6.getsockname()[1]),
                "MEMORY_MB": str(LIMITS.memory_mb),
                "MAX_DISK_MB": str(LIMITS.max_disk_mb),
                "RUNNER": RUNNER,
                **({"NATIVE_SO_HEX": native_hex} if native_hex else {}),
            },
            "secrets": [key_token, env_token] + ([key_secret] if key_secret else []),
            "outside": outside,
            "tcp": tcp,
            "udp": udp,
            "udp6": udp6,
            "unix": unix,
        }
    finally:
        del os.environ[env_name]
        tcp.close()
        udp.close()
        udp6.close()
        unix.close()


def _plant_session_key() -> str | None:
    """A new session keyring for this test process holding a ``user`` key ``dare-corpus`` (keyctl(2),
    add_key(2)); its secret must never appear in what a program printed. None where unsupported."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    nr = {"x86_64": (250, 248), "aarch64": (219, 217)}.get(os.uname().machine)
    if nr is None or libc.syscall(nr[0], _KEYCTL_JOIN_SESSION_KEYRING, b"dare-corpus-test") < 0:
        return None
    secret = secrets.token_hex(16)
    key = libc.syscall(nr[1], b"user", b"dare-corpus", secret.encode(), len(secret), _KEY_SPEC_SESSION_KEYRING)
    return secret if key >= 0 else None


def _sysv_ipc() -> list[str]:
    """The System V IPC objects of this IPC namespace (shared memory, queues, semaphores)."""
    rows = []
    for kind in ("shm", "msg", "sem"):
        try:
            with open(f"/proc/sysvipc/{kind}") as f:
                rows += [f"{kind}: {line.split()[1]}" for line in f.readlines()[1:]]
        except OSError:
            pass
    return rows


def _split(source: str) -> tuple[str, str]:
    """The program (without its ``# tests:`` and ``# prompt:`` lines, which it must not see) and its tests."""
    source = re.sub(r"^# prompt: .*$\n", "", source, flags=re.MULTILINE)
    found = re.search(r"^# tests: (.*)$\n", source, re.MULTILINE)
    if found is None:
        return source, "assert f() == 1\n"
    return source.replace(found.group(0), ""), found.group(1).replace("\\n", "\n") + "\n"


def _prompt(source: str) -> str:
    """The task's prompt (its ``# prompt:`` line: trusted helpers the tests may call), else ``def f():``."""
    found = re.search(r"^# prompt: (.*)$", source, re.MULTILINE)
    return "def f():" if found is None else found.group(1).replace("\\n", "\n")


def _state() -> tuple:
    kinds = (resource.RLIMIT_NPROC, resource.RLIMIT_AS, resource.RLIMIT_CPU, resource.RLIMIT_FSIZE)
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    return os.getpid(), os.getuid(), os.getcwd(), env, [resource.getrlimit(k) for k in kinds]


def _survivors(result) -> list[int]:
    found = []
    if result.pidns:
        found += procfs.in_namespace(result.pidns)
    elif result.pid > 0:
        found += procfs.session_members(result.pid)
    if result.layers.get("uid") is not None:
        found += procfs.owned_by(result.layers["uid"])
    return found


def _shadow_lines() -> list[str]:
    try:
        with open("/etc/shadow") as f:
            return [line.strip() for line in f if line.count(":") > 3 and len(line.split(":")[1]) > 8]
    except OSError:
        return []


def _isolation(config: str) -> Isolation:
    auto = resolve_isolation("auto")
    if config == "auto":
        return auto
    if config in ("native", "process-native"):
        if landlock.abi_version() < 4:
            pytest.skip("the native layers meet this bar only with Landlock ABI 4+ (reads, writes, TCP)")
        return Isolation(auto.mode, auto.read_all, bwrap=False) if config == "native" else Isolation("process")
    return resolve_isolation("process")


def run_case(path: Path, planted: dict, config: str) -> None:
    """Score one corpus program and assert everything the module docstring lists."""
    iso = _isolation(config)
    text = Template(path.read_text()).safe_substitute(planted["values"])
    program, tests = _split(text)
    if "$NATIVE_SO_HEX" in program:
        pytest.skip("no C compiler (cc/gcc) to build tests/native_attack.c")
    ipc_before = _sysv_ipc()
    sample = {"data_source": "corpus", "prompt": _prompt(text), "reward_model": {"ground_truth": tests}}
    before = _state()
    started = time.monotonic()
    outcome = code_outcome(f"```python\n{program}\n```", sample, LIMITS, per_test_timeout_s=LIMITS.timeout_s,
                           isolation=iso)
    seconds = time.monotonic() - started
    result = outcome.result
    printed = result.stdout + result.stderr + result.tests_stderr
    assert outcome.score == 0.0, printed[-2000:]
    assert result.run_s <= LIMITS.timeout_s + 1.0, f"ran {result.run_s:.2f} s"
    assert seconds <= LIMITS.timeout_s + STARTUP_SLACK_S, f"took {seconds:.2f} s"
    time.sleep(0.05)  # a killed process leaves /proc a moment later
    assert _survivors(result) == []
    assert sorted(p.name for p in planted["outside"].iterdir()) == ["sentinel.txt"]
    assert (planted["outside"] / "sentinel.txt").read_text() == "intact"
    for secret in planted["secrets"] + _shadow_lines():
        assert secret not in printed
    with pytest.raises(BlockingIOError):
        planted["tcp"].accept()
    for udp in (planted["udp"], planted["udp6"]):
        with pytest.raises(BlockingIOError):
            udp.recvfrom(64)
    with pytest.raises(BlockingIOError):
        planted["unix"].accept()
    assert _sysv_ipc() == ipc_before
    assert result.peak_memory_mb <= LIMITS.memory_mb + MEMORY_SLACK_MB
    assert result.peak_disk_mb <= LIMITS.max_disk_mb + (0 if result.layers.get("bwrap") else DISK_SLACK_MB)
    assert result.peak_tasks <= LIMITS.max_processes + (0 if result.layers.get("tasks_cgroup") else TASK_SLACK)
    assert _state() == before


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_corpus(path, planted):
    run_case(path, planted, "auto")


@pytest.mark.parametrize("path", [p for p in CASES if p.name[:2] in NATIVE_FAST], ids=lambda p: p.stem)
def test_corpus_native_subset(path, planted):
    """The fallback layers (no bubblewrap) on the cases that differ most between the two."""
    run_case(path, planted, "native")


@pytest.mark.parametrize("config", ["auto", "native", "process"])
@pytest.mark.parametrize("path", [p for p in CASES if p.name[:2] in NATIVE], ids=lambda p: p.stem)
def test_native_code_in_every_configuration(path, config, planted):
    """Native code and executable memory score 0 and leave nothing (no IPC object, no process, no
    file outside, no connection, no key printed) in each configuration this machine runs."""
    run_case(path, planted, config)


@pytest.mark.parametrize("config", ["auto", "native", "process", "process-native"])
@pytest.mark.parametrize("path", [p for p in CASES if p.name[:2] in EVERY_MODE], ids=lambda p: p.stem)
def test_escapes_in_every_configuration(path, config, planted):
    """A helper of the tests bound to the program (HumanEval/38), a StopIteration ending the tests' map(),
    a subinterpreter without the guard, 700 threads at once and UDP/netlink traffic score 0 and leave
    nothing behind under bubblewrap + uid, the native uid layers, process mode with bubblewrap and
    process mode without it (its own seccomp filter refuses every socket, the pids cgroup or the
    watchdog caps the threads)."""
    run_case(path, planted, config)


def test_native_library_runs_without_the_sandbox(planted, tmp_path):
    """The native cases can fail: outside the sandbox the library loads from the program's own
    directory and its code runs (``DARE_NATIVE_DRY``: it only records that)."""
    if "NATIVE_SO_HEX" not in planted["values"]:
        pytest.skip("no C compiler (cc/gcc) to build tests/native_attack.c")
    path = next(p for p in CASES if p.name.startswith("45"))
    program, tests = _split(Template(path.read_text()).safe_substitute(planted["values"]))
    done = subprocess.run([sys.executable, "-I", "-c", f"{program}\n{tests}"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "DARE_NATIVE_DRY": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "native_ran.txt").read_text() == "loaded\n"


@pytest.mark.parametrize("number", sorted(CONTROL))
def test_attacks_work_without_the_sandbox(number, planted, tmp_path):
    """The corpus can fail: run as this user in one namespace with its tests (as rLLM's runner
    does), outside the sandbox, each of these programs passes its tests."""
    if number in ("14", "15") and os.geteuid() != 0:
        pytest.skip("reading /etc/shadow and a root-only key needs root outside the sandbox")
    path = next(p for p in CASES if p.name.startswith(number))
    program, tests = _split(Template(path.read_text()).safe_substitute(planted["values"]))
    done = subprocess.run([sys.executable, "-I", "-c", f"{PRELUDE}\n{program}\n{tests}"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("DARE_SLOW") != "1", reason="slow: set DARE_SLOW=1")
@pytest.mark.parametrize("config", ["native", "process"])
@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_corpus_other_configurations(path, config, planted):
    run_case(path, planted, config)
