"""The sandbox's process side: ``python -I -B -X utf8 runner.py CONFIG_JSON`` (stdlib only).

This script never imports :mod:`dare` (that would cost a pydantic import per program); it loads its
sibling modules by file path. It runs as two processes:

* the **supervisor** (this process) reads the program's units, becomes a subreaper, forks the
  child, enforces the wall-clock limit, then kills and reaps *every* descendant (so nothing the
  program started survives it) and prints one JSON report on stdout;
* the **child** starts a new session, points stdin at ``/dev/null`` and stdout/stderr at files in
  the work directory, closes every other descriptor, then applies the confinement layers in this
  order: network namespace (uid mode), resource limits, unprivileged uid (uid mode),
  ``no_new_privs``, Landlock, ``chdir`` into the work directory, the audit-hook guard; it reports
  what was applied on a pipe and runs the units in one namespace (``__name__ == "__sandbox__"``, so
  ``if __name__ == "__main__":`` blocks do not run).

Exit status of the child: 0 every unit ran to completion; ``EXIT_UNIT + i`` unit ``i`` raised
(``SyntaxError``, ``AssertionError``, ``MemoryError``, ``SystemExit``...); ``EXIT_SETUP`` the
sandbox could not be set up (its report carries ``error``).

Config keys: ``workdir``, ``units`` (file names in ``workdir``), ``timeout_s``, ``cpu_time_s``,
``memory_mb``, ``max_processes``, ``max_file_mb``, ``uid`` (int or null), ``read_all`` (bool).
"""

from __future__ import annotations

import builtins
import importlib.util
import json
import os
import resource
import signal
import sys
import time
import traceback
import types

EXIT_SETUP = 70
EXIT_UNIT = 100
TAIL_BYTES = 4096
KILL_DEADLINE_S = 5.0

_HERE = os.path.dirname(os.path.abspath(__file__))
_real_exit = os._exit


def _sibling(name: str):
    """Load ``<name>.py`` next to this file under a private module name."""
    spec = importlib.util.spec_from_file_location(f"_dare_sandbox_{name}", os.path.join(_HERE, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_SIBLINGS = ("procfs", "identity", "landlock", "guard")
procfs, identity, landlock, guard = (_sibling(n) for n in _SIBLINGS)


# ----------------------------------------------------------------------------------------- child
def _redirect(out_fd: int, err_fd: int, keep: int) -> None:
    null = os.open(os.devnull, os.O_RDONLY)
    for src, dst in ((null, 0), (out_fd, 1), (err_fd, 2)):
        os.dup2(src, dst)
    os.closerange(3, keep)
    os.closerange(keep + 1, max(os.sysconf("SC_OPEN_MAX"), keep + 1))


def _limit(kind: int, soft: int, hard: int | None = None) -> None:
    """Lower a limit to ``(soft, hard)`` (``hard`` defaults to ``soft``), never above the current hard cap."""
    hard = soft if hard is None else hard
    _, cap = resource.getrlimit(kind)
    if cap != resource.RLIM_INFINITY:
        soft, hard = min(soft, cap), min(hard, cap)
    resource.setrlimit(kind, (soft, hard))


def _apply_limits(cfg: dict) -> dict:
    """Set the rlimits; returns the process cap applied and whether ``os.fork`` must be refused.

    ``RLIMIT_NPROC`` counts *all* tasks of the real uid and is not enforced for root. In uid mode
    the uid is private to this run, so the cap is exactly ``max_processes``; as another non-root
    user it is that user's current task count plus ``max_processes``; as root the cap would be
    ignored, so the guard refuses ``os.fork`` instead.
    """
    mib = 1024 * 1024
    _limit(resource.RLIMIT_CORE, 0)
    _limit(resource.RLIMIT_CPU, int(cfg["cpu_time_s"]), int(cfg["cpu_time_s"]) + 1)  # SIGXCPU, then SIGKILL
    _limit(resource.RLIMIT_AS, int(cfg["memory_mb"]) * mib)
    _limit(resource.RLIMIT_FSIZE, int(cfg["max_file_mb"]) * mib)
    if cfg["uid"] is not None:
        nproc = int(cfg["max_processes"])
    elif os.geteuid() != 0 and procfs.available():
        nproc = procfs.task_count(os.getuid()) + int(cfg["max_processes"])
    else:
        return {"nproc": None, "fork_blocked": True}
    _limit(resource.RLIMIT_NPROC, nproc)
    return {"nproc": nproc, "fork_blocked": False}


def _setup(cfg: dict, out_fd: int, err_fd: int, report_fd: int) -> dict:
    os.setsid()
    _redirect(out_fd, err_fd, report_fd)
    uid = cfg["uid"]
    layers = {"uid": uid, "read_all": bool(cfg["read_all"]), "netns": False}
    if uid is not None:
        layers["netns"] = identity.new_network_namespace()
    layers.update(_apply_limits(cfg))
    if uid is not None:
        identity.drop_privileges(uid, uid, keep_read_all=bool(cfg["read_all"]))
    layers["no_new_privs"] = identity.forbid_new_privileges()
    layers["landlock"] = landlock.restrict([cfg["workdir"]], [os.devnull])
    os.chdir(cfg["workdir"])
    return layers


def _program_module() -> types.ModuleType:
    """A fresh module for the program, registered as ``__sandbox__`` and ``__main__`` (so pickling
    works); the runner's own modules are unregistered so ``import __main__`` cannot reach them."""
    module = types.ModuleType("__sandbox__")
    module.__builtins__ = builtins
    for name in _SIBLINGS:
        sys.modules.pop(f"_dare_sandbox_{name}", None)
    sys.modules["__sandbox__"] = sys.modules["__main__"] = module
    return module


def _execute(units: list[tuple[str, str]], workdir: str, block_fork: bool) -> int:
    """Run the units in one namespace; the child's exit status (see the module docstring)."""
    guard.install(workdir, block_fork)
    namespace = _program_module().__dict__
    status = 0
    for index, (name, source) in enumerate(units):
        try:
            exec(compile(source, name, "exec"), namespace)
        except BaseException:  # noqa: BLE001 - any failure of untrusted code is a failed unit
            try:
                traceback.print_exc(limit=-8)  # the innermost frames: where it failed
            except BaseException:  # noqa: BLE001 - e.g. MemoryError while formatting
                pass
            status = EXIT_UNIT + index
            break
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 - the program may have closed or replaced it
            pass
    return status


def _child(cfg: dict, units: list[tuple[str, str]], report_fd: int, out_fd: int, err_fd: int) -> None:
    try:
        layers = _setup(cfg, out_fd, err_fd, report_fd)
    except BaseException as exc:  # noqa: BLE001 - reported to the supervisor
        os.write(report_fd, json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode())
        _real_exit(EXIT_SETUP)
    os.write(report_fd, json.dumps(layers).encode())
    os.close(report_fd)
    _real_exit(_execute(units, cfg["workdir"], layers["fork_blocked"]))


# ------------------------------------------------------------------------------------ supervisor
class _Deadline(Exception):
    pass


def _on_alarm(signum, frame):
    raise _Deadline


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks)


def _wait(pid: int, report_fd: int, timeout_s: float) -> tuple[bytes, int | None]:
    """The child's setup report and wait status; status None when the wall-clock limit (or a
    SIGTERM from the launcher) came first. Later SIGTERMs are ignored so cleanup always finishes."""
    report, status = b"", None
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.signal(signal.SIGTERM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        report = _read_all(report_fd)
        _, status = os.waitpid(pid, 0)
    except _Deadline:
        pass
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return report, status


def _kill_descendants(child: int) -> int:
    """SIGKILL and reap every descendant; returns how many besides ``child`` were still there
    (running or zombie) when the program ended.

    As a subreaper this process inherits every orphan, so the tree walk sees them all, and reaping
    them leaves no zombie behind (PID 1 in a container may never reap).
    """
    try:
        os.killpg(child, signal.SIGKILL)
    except OSError:
        pass
    killed: set[int] = set()
    deadline = time.monotonic() + KILL_DEADLINE_S
    while time.monotonic() < deadline:
        alive = procfs.descendants(os.getpid())
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        killed.update(alive)
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            if not alive:
                break
        time.sleep(0.002)
    killed.discard(child)
    return len(killed)


def _parse_setup(raw: bytes) -> dict:
    try:
        return json.loads(raw)
    except ValueError:
        return {"error": f"incomplete setup report {raw[:200]!r} (the child died during setup)"}


def _tail(fd: int) -> str:
    size = os.fstat(fd).st_size
    return os.pread(fd, TAIL_BYTES, max(0, size - TAIL_BYTES)).decode("utf-8", "replace")


def main(argv: list[str]) -> int:
    """Supervise one sandboxed program; prints the JSON report (see the module docstring)."""
    cfg = json.loads(argv[1])
    workdir = cfg["workdir"]
    units = []
    for name in cfg["units"]:
        with open(os.path.join(workdir, name), encoding="utf-8") as f:
            units.append((name, f.read()))
    subreaper = identity.become_subreaper()
    flags = os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    out_fd = os.open(os.path.join(workdir, "stdout.txt"), flags, 0o600)
    err_fd = os.open(os.path.join(workdir, "stderr.txt"), flags, 0o600)
    report_r, report_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(report_r)
        _child(cfg, units, report_w, out_fd, err_fd)
    os.close(report_w)
    setup, status = _wait(pid, report_r, float(cfg["timeout_s"]))
    os.close(report_r)
    leftover = _kill_descendants(pid)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(
        json.dumps(
            {
                "pid": pid,
                "returncode": None if status is None else os.waitstatus_to_exitcode(status),
                "timed_out": status is None,
                "leftover": leftover,
                "subreaper": subreaper,
                "cpu_s": usage.ru_utime + usage.ru_stime,
                "maxrss_mb": usage.ru_maxrss / 1024,
                "setup": _parse_setup(setup),
                "stdout": _tail(out_fd),
                "stderr": _tail(err_fd),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
