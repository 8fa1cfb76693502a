"""Running untrusted Python source in the sandbox: limits, result, and the launcher."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import struct
import subprocess
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, fields
from typing import Any

from dare_code.sandbox import bwrap
from dare_code.sandbox.errors import SandboxError
from dare_code.sandbox.isolation import Isolation, lease_uid, resolve_isolation
from dare_code.sandbox.taskcap import task_cgroup
from dare_code.sandbox.view import DEFAULT_PACKAGES, view

__all__ = ["SandboxLimits", "SandboxResult", "run_python"]

log = logging.getLogger("dare_code.sandbox")

RUNNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runner.py")
#: the program process exits with EXIT_UNIT + i when unit i raised (see child.py)
EXIT_UNIT = 100
#: the test process's exit status when a test raised (see remote.py)
EXIT_TESTS_FAILED = 1
#: seconds the launcher waits beyond ``timeout_s`` for the supervisor (startup, cleanup)
SUPERVISOR_GRACE_S = 15.0


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one sandboxed run.

    :param timeout_s: wall-clock seconds from the fork of the program to SIGKILL of its whole tree.
    :param cpu_time_s: ``RLIMIT_CPU`` seconds per process (SIGXCPU at the limit, SIGKILL one second later).
    :param memory_mb: MiB. Per process: ``RLIMIT_AS`` (an allocation beyond it fails). Whole tree:
        resident anonymous + shared memory of all the program's processes together; the supervisor
        checks it every 10 ms and kills the tree above it.
    :param max_processes: processes/threads the program may have at once (``RLIMIT_NPROC``; see
        :mod:`dare_code.sandbox.isolation` for how it is enforced in each mode).
    :param max_file_mb: ``RLIMIT_FSIZE``, MiB: the largest file the program may write.
    :param max_disk_mb: MiB the program may store in its directory in total: the size of its tmpfs
        under bubblewrap (writes beyond fail), else checked every 10 ms (the tree is killed above it).
    :raises SandboxError: a limit that is not positive (naming the field).
    """

    timeout_s: float = 10.0
    cpu_time_s: int = 10
    memory_mb: int = 1024
    max_processes: int = 16
    max_file_mb: int = 16
    max_disk_mb: int = 64

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise SandboxError(f"sandbox limit {f.name} must be a positive number, got {value!r}")


@dataclass(frozen=True)
class SandboxResult:
    """What happened to one program.

    * ``passed``: with tests, the test process ran every test to completion; without, every unit
      ran to completion; in both cases within the limits.
    * ``returncode``: the program process's exit status (negative: killed by that signal; None: it
      was still running when the run ended). 0 means every unit ran to completion.
    * ``tests_returncode``: the test process's exit status (None without tests).
    * ``failed_unit``: index of the unit that raised (``len(units)``: the tests), else None.
    * ``timed_out``: the wall-clock limit was hit; ``killed_for``: ``"memory"``, ``"disk"`` or
      ``"tasks"`` (more processes and threads than ``max_processes``) when the supervisor killed the
      tree for exceeding that limit, else None.
    * ``elapsed_s``: wall seconds of the whole run, as the caller saw it (startup and cleanup included);
      ``run_s``: from the start of the program process until every process of it was reaped.
    * ``cpu_s``, ``maxrss_mb``: CPU seconds and largest single-process peak resident MiB of the
      run's processes; ``peak_memory_mb``: the largest whole-tree memory the supervisor saw;
      ``peak_disk_mb``: the most the directory held (as last measured); ``peak_tasks``: the most
      processes and threads of the program's tree the supervisor saw at once.
    * ``leftover``: other processes of the program still present when it ended (all were killed).
    * ``pid``: the program's process id as the supervisor saw it (inside bubblewrap's PID
      namespace, ``pidns``, where that is used).
    * ``layers``: the confinement actually applied: ``bwrap``, ``uid``, ``read_all``, ``netns``,
      ``nproc``, ``fork_blocked``, ``noexec`` (the directory is a noexec mount), ``keyring`` (a new empty
      session keyring), ``no_new_privs``, ``landlock`` (ABI version, 0 = none), ``seccomp`` (the
      :mod:`.seccomp` filter), ``tasks_cgroup`` (the program joined a pids cgroup of ``max_processes``,
      :mod:`.taskcap`), ``subreaper``.
    * ``stdout``/``stderr``: the last 4 KiB the program wrote to each; ``tests_stderr``: the test
      process's (the failing test's traceback).
    """

    returncode: int | None
    failed_unit: int | None
    timed_out: bool
    elapsed_s: float
    cpu_s: float
    maxrss_mb: float
    leftover: int
    pid: int
    layers: dict[str, Any] = field(default_factory=dict)
    stdout: str = ""
    stderr: str = ""
    tests_returncode: int | None = None
    tests_stderr: str = ""
    killed_for: str | None = None
    peak_memory_mb: float = 0.0
    peak_disk_mb: float = 0.0
    peak_tasks: int = 0
    pidns: str | None = None
    run_s: float = 0.0
    verdict: bool = False

    @property
    def passed(self) -> bool:
        """See the class docstring."""
        return self.verdict


def _environment(workdir: str) -> dict[str, str]:
    """The program's whole environment: no inherited variables, one BLAS thread."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": workdir,
        "TMPDIR": workdir,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM the supervisor (it then kills and reaps the program's tree); SIGKILL its session if
    it has not exited within ``SUPERVISOR_GRACE_S``."""
    proc.terminate()
    try:
        proc.communicate(timeout=SUPERVISOR_GRACE_S)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()


def _supervise(cmd: list[str], cwd: str, env: dict[str, str], payload: bytes, limits: SandboxLimits) -> dict | None:
    """Run the runner and parse its report; None when it was killed by a signal that was not ours
    (only a program that got past the layers could do that: a failed run).

    :raises SandboxError: it failed or overran.
    """
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True, umask=0o022,  # bubblewrap's mount points: traversable by the program's uid
    )
    try:
        out, err = proc.communicate(input=payload, timeout=limits.timeout_s + SUPERVISOR_GRACE_S)
    except subprocess.TimeoutExpired:
        _stop(proc)
        overran = limits.timeout_s + SUPERVISOR_GRACE_S
        raise SandboxError(f"the sandbox supervisor overran {overran:.0f} s and was stopped") from None
    except BaseException:  # e.g. KeyboardInterrupt: do not leave the program running
        _stop(proc)
        raise
    try:
        report = json.loads(out)
    except ValueError:
        tail = err.decode("utf-8", "replace")[-2000:]
        if proc.returncode < 0:
            log.warning("the sandbox supervisor was killed by signal %d; scoring the run as failed: %s",
                        -proc.returncode, tail)
            return None
        raise SandboxError(f"the sandbox runner failed (exit {proc.returncode}): {tail}") from None
    if "error" in report["setup"]:
        raise SandboxError(f"the sandbox could not be set up: {report['setup']['error']}")
    return report


def _remove(workdir: str) -> None:
    """Delete the work directory even if the program removed its own permissions."""

    def force(func, path, _exc):
        for p in (os.path.dirname(path), path):
            try:
                os.chmod(p, 0o700)
            except OSError:
                pass
        try:
            func(path)
        except OSError as exc:
            log.warning("could not remove %s from the sandbox directory: %s", path, exc)

    shutil.rmtree(workdir, onerror=force)


def _failed_unit(report: dict, n_units: int) -> int | None:
    code = report["returncode"]
    if code is not None and EXIT_UNIT <= code < EXIT_UNIT + n_units:
        return code - EXIT_UNIT
    if report.get("tests_returncode") == EXIT_TESTS_FAILED:
        return n_units
    return None


def run_python(
    units: Sequence[str],
    limits: SandboxLimits | None = None,
    isolation: str | Isolation = "auto",
    *,
    tests: str | None = None,
    setup_units: int = 0,
    entry_points: Sequence[str] = (),
    packages: Sequence[str] = DEFAULT_PACKAGES,
    test_setup: str | None = None,
    bound_names: Sequence[str] | None = None,
) -> SandboxResult:
    """Run Python source units, in order and in one namespace, in a fresh sandbox; with ``tests``,
    run those in a separate process against the program (:mod:`dare_code.sandbox.remote`).

    Each call gets a new directory (its working directory, ``HOME`` and ``TMPDIR``; gone afterwards),
    a new session and a minimal environment. What is confined and how is described in
    :mod:`dare_code.sandbox`. Neither the units nor the tests are written to disk.

    :param units: Python sources; unit ``i`` runs after unit ``i - 1`` completed.
    :param limits: resource limits (defaults: :class:`SandboxLimits`).
    :param isolation: ``auto``, ``uid``, ``process`` or a resolved :class:`Isolation`.
    :param tests: test source (asserts, ``check(...)``); passed means it ran to completion.
    :param setup_units: how many leading ``units`` the test process runs too (e.g. a prelude of
        imports); names they define are the test process's own.
    :param entry_points: names the program provides to the tests even where they shadow a built-in
        or setup name (the function under test).
    :param packages: third-party packages the program and tests may import (default: numpy).
    :param test_setup: trusted source only the test process runs, after the setup units (the task's
        helpers its tests call); the names it defines are never taken from the program.
    :param bound_names: the only names the tests take from the program (the entry points and what
        the task declares the program must define); None: every name the tests use that neither a
        built-in nor the setup defines.
    :returns: the result; a program that fails, hangs or misbehaves yields a result, never an exception.
    :raises SandboxError: the sandbox itself cannot run here (e.g. ``uid`` without root) or its
        runner failed.
    """
    limits = limits or SandboxLimits()
    packages = tuple(packages)
    iso = isolation if isinstance(isolation, Isolation) else resolve_isolation(isolation, packages)
    seen = view(packages)
    started = time.monotonic()
    with ExitStack() as stack:
        uid = stack.enter_context(lease_uid()) if iso.mode == "uid" else None
        tasks_file = stack.enter_context(task_cgroup(limits.max_processes))
        if iso.bwrap:
            workdir = cwd = bwrap.workdir(seen)
        else:
            workdir = cwd = os.path.realpath(tempfile.mkdtemp(prefix="dare-sandbox-"))
            stack.callback(_remove, workdir)
            if uid is not None:
                os.chown(workdir, uid, uid)
        config = {
            "units": [[f"unit{i}.py", source] for i, source in enumerate(units)],
            "setup_count": int(setup_units),
            "tests_name": None if tests is None else "tests.py",
            "entry_points": list(entry_points),
            "test_units": [] if test_setup is None else [["task.py", test_setup]],
            "bound_names": None if bound_names is None else list(bound_names),
            "packages": list(seen.packages),
            "sys_path": list(seen.sys_path),
            "readable": seen.readable(),
            "listable": seen.listable(),
            "workdir": workdir,
            "bwrap": iso.bwrap,
            "timeout_s": limits.timeout_s,
            "cpu_time_s": limits.cpu_time_s,
            "memory_mb": limits.memory_mb,
            "max_processes": limits.max_processes,
            "max_file_mb": limits.max_file_mb,
            "max_disk_mb": limits.max_disk_mb,
            "uid": uid,
            "read_all": iso.read_all,
            "tasks_cgroup": None if tasks_file is None else bwrap.TASKS_FILE if iso.bwrap else tasks_file,
        }
        header = json.dumps(config).encode("utf-8", "surrogatepass")
        payload = struct.pack(">Q", len(header)) + header
        if tests is not None:
            payload += tests.encode("utf-8", "replace")
        env = _environment(workdir)
        cmd = [seen.python, "-I", "-S", "-B", "-X", "utf8", RUNNER]
        if iso.bwrap:
            binary = bwrap.executable()
            if binary is None:
                raise SandboxError("isolation asks for bubblewrap but bwrap is not installed; resolve it with 'auto'")
            cmd = bwrap.command(binary, seen, os.geteuid() == 0, limits.max_disk_mb * 1024 * 1024, env,
                                tasks_file) + cmd
        report = _supervise(cmd, cwd if not iso.bwrap else "/", env, payload, limits)
    elapsed = time.monotonic() - started
    if report is None:
        return SandboxResult(None, None, False, elapsed, 0.0, 0.0, 0, -1, {"bwrap": iso.bwrap, "uid": uid})
    return SandboxResult(
        returncode=report["returncode"],
        failed_unit=_failed_unit(report, len(units)),
        timed_out=report["timed_out"],
        elapsed_s=elapsed,
        cpu_s=report["cpu_s"],
        maxrss_mb=report["maxrss_mb"],
        leftover=report["leftover"],
        pid=report["pid"],
        layers={**report["setup"], "subreaper": report["subreaper"]},
        stdout=report["stdout"],
        stderr=report["stderr"],
        tests_returncode=report["tests_returncode"],
        tests_stderr=report["tests_stderr"],
        killed_for=report["killed_for"],
        peak_memory_mb=report["peak_memory_mb"],
        peak_disk_mb=report["peak_disk_mb"],
        peak_tasks=report["peak_tasks"],
        pidns=report["pidns"],
        run_s=report["run_s"],
        verdict=report["passed"],
    )
