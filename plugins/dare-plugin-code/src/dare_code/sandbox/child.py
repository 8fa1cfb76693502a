"""The sandbox's program and test processes, forked by the supervisor (:mod:`.runner`; stdlib only).

* :func:`program`: starts a new session, points stdin at ``/dev/null`` and stdout/stderr at pipes,
  closes every other descriptor, applies the confinement layers in this order: network namespace
  (native uid mode), the run's pids cgroup (tasks and threads capped at ``max_processes``, where one
  could be made), resource limits, unprivileged uid (uid mode) or no capabilities (root in process
  mode), a new empty session keyring, ``no_new_privs``, Landlock (writes only in its directory,
  nothing there executable; reads only in the :mod:`.view`), the seccomp filter (:mod:`.seccomp`:
  no code it wrote, no IPC, no keyring, no other process's limits, no socket of any family), ``chdir``,
  the audit-hook guard; reports what was applied on a pipe and runs the units in one
  namespace (``__name__ == "__sandbox__"``: ``if __name__ == "__main__":`` blocks do not run). With
  tests it then serves the test process (:func:`.remote.serve`).
* :func:`tests`: drops its capabilities, forbids inspection, applies Landlock (no writes) and the
  seccomp filter (no new processes), runs the
  setup units and the tests against the program over two pipes (:func:`.remote.run_tests`). Its exit
  status is the verdict; the program cannot write to it.

Exit status of the program process: 0 every unit ran to completion (and, with tests, the test
process closed the connection); ``EXIT_UNIT + i`` unit ``i`` raised; ``EXIT_SETUP`` the sandbox
could not be set up (its report carries ``error``). Loaded by file path by the runner, after its
siblings (found in ``sys.modules`` as ``_dare_sandbox_<name>``).
"""

from __future__ import annotations

import builtins
import importlib
import json
import os
import resource
import signal
import sys
import traceback
import types

__all__ = ["EXIT_SETUP", "EXIT_UNIT", "MAX_OPEN_FILES", "SIBLINGS", "program", "tests"]

EXIT_SETUP = 70
EXIT_UNIT = 100
#: open files per program process (bounds memory held in unlinked memfd/tmpfs files: this times max_file_mb)
MAX_OPEN_FILES = 64
#: the modules the runner loads by path, in order (this one last)
SIBLINGS = ("procfs", "identity", "landlock", "seccomp", "guard", "wire", "remote", "child")
_real_exit = os._exit


def _sibling(name: str):
    return sys.modules.get(f"_dare_sandbox_{name}") or importlib.import_module(f"dare_code.sandbox.{name}")


procfs, identity, landlock, seccomp, guard, wire, remote = (_sibling(n) for n in SIBLINGS[:-1])


def _redirect(stdout_fd: int, stderr_fd: int, keep: tuple[int, ...]) -> None:
    """stdin from /dev/null, stdout/stderr to the given descriptors, every other one closed but ``keep``."""
    null = os.open(os.devnull, os.O_RDWR)
    for src, dst in ((null, 0), (stdout_fd if stdout_fd >= 0 else null, 1), (stderr_fd, 2)):
        os.dup2(src, dst)
    keep = sorted(set(keep))
    low = 3
    for fd in keep:
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, max(os.sysconf("SC_OPEN_MAX"), low))
    for fd in keep:
        os.set_inheritable(fd, False)


def _limit(kind: int, soft: int, hard: int | None = None) -> None:
    """Lower a limit to ``(soft, hard)`` (``hard`` defaults to ``soft``), never above the current hard cap."""
    hard = soft if hard is None else hard
    _, cap = resource.getrlimit(kind)
    if cap != resource.RLIM_INFINITY:
        soft, hard = min(soft, cap), min(hard, cap)
    resource.setrlimit(kind, (soft, hard))


def _apply_limits(cfg: dict, memory_mb: int) -> None:
    mib = 1024 * 1024
    _limit(resource.RLIMIT_CORE, 0)
    _limit(resource.RLIMIT_CPU, int(cfg["cpu_time_s"]), int(cfg["cpu_time_s"]) + 1)  # SIGXCPU, then SIGKILL
    _limit(resource.RLIMIT_AS, int(memory_mb) * mib)
    _limit(resource.RLIMIT_FSIZE, int(cfg["max_file_mb"]) * mib)
    _limit(resource.RLIMIT_NOFILE, MAX_OPEN_FILES)


def _process_cap(cfg: dict) -> dict:
    """``RLIMIT_NPROC`` for the program, or a refused ``os.fork`` where the kernel would ignore it.

    The limit counts *all* tasks of the real uid (in its user namespace) and is not enforced for
    root. In uid mode the uid is private to this run, so the cap is exactly ``max_processes``; as
    another non-root user it is that user's current task count (as ``/proc`` shows it, which inside
    bwrap is the sandbox only) plus ``max_processes``; as root the guard refuses ``os.fork``.
    """
    if cfg["uid"] is not None:
        nproc = int(cfg["max_processes"])
    elif os.geteuid() != 0 and procfs.available():
        nproc = procfs.task_count(os.getuid()) + int(cfg["max_processes"])
    else:
        return {"nproc": None, "fork_blocked": True}
    _limit(resource.RLIMIT_NPROC, nproc)
    return {"nproc": nproc, "fork_blocked": False}


def _confine(cfg: dict, writable: list[str], block_fork: bool) -> dict:
    """A new empty session keyring, ``no_new_privs``, Landlock (writes beneath ``writable``, reads in
    the view, nothing written executable) and the seccomp filter (:mod:`.seccomp`)."""
    layers = {"keyring": identity.new_session_keyring(), "no_new_privs": identity.forbid_new_privileges()}
    layers["landlock"] = landlock.restrict(writable, [os.devnull], cfg["readable"], cfg["listable"])
    layers["seccomp"] = seccomp.restrict(block_fork)
    return layers


def _join_task_cgroup(procs_file: str | None) -> bool:
    """Move this process into the run's pids cgroup (:mod:`dare_code.sandbox.taskcap`): from then on
    the kernel caps its tasks, threads included. False where there is none or the kernel refused."""
    if not procs_file:
        return False
    try:
        fd = os.open(procs_file, os.O_WRONLY)
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)
    except OSError:
        return False
    return True


def _program_setup(cfg: dict) -> dict:
    uid = cfg["uid"]
    layers = {"bwrap": bool(cfg["bwrap"]), "uid": uid, "read_all": bool(cfg["read_all"]) and not cfg["bwrap"],
              "noexec": bool(cfg.get("noexec")), "tasks_cgroup": _join_task_cgroup(cfg.get("tasks_cgroup"))}
    layers["netns"] = True if cfg["bwrap"] else (uid is not None and identity.new_network_namespace())
    _apply_limits(cfg, int(cfg["memory_mb"]))
    layers.update(_process_cap(cfg))
    if uid is not None:
        identity.drop_privileges(uid, uid, keep_read_all=layers["read_all"])
    else:  # root, or capabilities in a user namespace of the supervisor's (bwrap, noexec mount)
        identity.drop_capabilities()
    layers.update(_confine(cfg, [cfg["workdir"]], layers["fork_blocked"]))
    os.chdir(cfg["workdir"])
    return layers


def _program_module() -> types.ModuleType:
    """A fresh module for the program, registered as ``__sandbox__`` and ``__main__`` (so pickling
    works); the runner's own modules are unregistered."""
    module = types.ModuleType("__sandbox__")
    module.__builtins__ = builtins
    for name in SIBLINGS:
        sys.modules.pop(f"_dare_sandbox_{name}", None)
    sys.modules["__sandbox__"] = sys.modules["__main__"] = module
    return module


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 - the program may have closed or replaced it
            pass


def program(cfg: dict, fds: dict) -> None:
    """The program process (never returns)."""
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.setsid()
        _redirect(fds["out"], fds["err"], (fds["setup"], fds["request"], fds["reply"]))
        layers = _program_setup(cfg)
    except BaseException as exc:  # noqa: BLE001 - reported to the supervisor
        os.write(fds["setup"], json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode())
        _real_exit(EXIT_SETUP)
    os.write(fds["setup"], json.dumps(layers).encode())
    os.close(fds["setup"])
    tests = cfg["tests_name"] is not None
    guard.install(cfg["workdir"], layers["fork_blocked"])
    namespace = _program_module().__dict__
    baseline = None
    for index, (name, source) in enumerate(cfg["units"]):
        if index == cfg["setup_count"]:
            baseline = {k: id(v) for k, v in namespace.items()}
        try:
            exec(compile(source, name, "exec"), namespace)
        except BaseException:  # noqa: BLE001 - any failure of untrusted code is a failed unit
            try:
                traceback.print_exc(limit=-8)  # the innermost frames: where it failed
            except BaseException:  # noqa: BLE001 - e.g. MemoryError while formatting
                pass
            _flush()
            _real_exit(EXIT_UNIT + index)
    _flush()
    if tests:
        if baseline is None:
            baseline = {k: id(v) for k, v in namespace.items()}
        try:
            wire.send(fds["reply"], ["ready"])
            remote.serve(namespace, baseline, fds["request"], fds["reply"])
        except BaseException:  # noqa: BLE001 - the connection broke or the program broke it
            pass
        _flush()
    _real_exit(0)


def tests(cfg: dict, source: str, fds: dict) -> None:
    """The test process (never returns)."""
    status = EXIT_SETUP
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _redirect(-1, fds["tests_err"], (fds["request"], fds["reply"]))
        identity.forbid_inspection()
        _apply_limits(cfg, max(int(cfg["memory_mb"]), 1024))
        identity.drop_capabilities()
        _confine(cfg, [], True)
        os.chdir("/")
        setup = [tuple(u) for u in cfg["units"][: cfg["setup_count"]] + cfg.get("test_units", [])]
        bound = cfg.get("bound_names")
        status = remote.run_tests(
            setup, (cfg["tests_name"], source), fds["request"], fds["reply"], frozenset(cfg["entry_points"]),
            frozenset(cfg["packages"]), None if bound is None else frozenset(bound),
        )
    except BaseException:  # noqa: BLE001 - a broken test process is a failed run
        try:
            traceback.print_exc(limit=-4)
        except BaseException:  # noqa: BLE001
            pass
    _flush()
    _real_exit(status)
