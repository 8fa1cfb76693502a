"""Running untrusted Python source in the sandbox: limits, result, and the launcher."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, fields
from typing import Any

from dare.rewards.sandbox.errors import SandboxError
from dare.rewards.sandbox.isolation import Isolation, lease_uid, resolve_isolation

__all__ = ["SandboxLimits", "SandboxResult", "run_python"]

log = logging.getLogger("dare.rewards.sandbox")

RUNNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runner.py")
#: the runner's child exits with EXIT_UNIT + i when unit i raised (see runner.py)
EXIT_UNIT = 100
#: seconds the launcher waits beyond ``timeout_s`` for the supervisor (startup, cleanup)
SUPERVISOR_GRACE_S = 15.0


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one sandboxed run.

    :param timeout_s: wall-clock seconds from the fork of the program to SIGKILL of its whole tree.
    :param cpu_time_s: ``RLIMIT_CPU`` seconds per process (SIGXCPU at the limit, SIGKILL one second later).
    :param memory_mb: ``RLIMIT_AS`` per process, MiB of address space (an allocation beyond it fails).
    :param max_processes: processes/threads the program may have at once (``RLIMIT_NPROC``; see
        :mod:`dare.rewards.sandbox.isolation` for how it is enforced in each mode).
    :param max_file_mb: ``RLIMIT_FSIZE``, MiB: the largest file the program may write (stdout included).
    :raises SandboxError: a limit that is not positive (naming the field).
    """

    timeout_s: float = 10.0
    cpu_time_s: int = 10
    memory_mb: int = 1024
    max_processes: int = 16
    max_file_mb: int = 16

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise SandboxError(f"sandbox limit {f.name} must be a positive number, got {value!r}")


@dataclass(frozen=True)
class SandboxResult:
    """What happened to one program.

    * ``returncode``: the program process's exit status (negative: killed by that signal; None: it
      was still running at the wall-clock limit). 0 means every unit ran to completion.
    * ``failed_unit``: index of the unit that raised, else None.
    * ``timed_out``: the wall-clock limit was hit.
    * ``elapsed_s``: wall seconds of the whole run, as the caller saw it (startup and cleanup included).
    * ``cpu_s``, ``maxrss_mb``: CPU seconds and peak resident MiB of the program's processes.
    * ``leftover``: other processes of the program still present when it ended (all were killed).
    * ``pid``: the program's process id (also its session id).
    * ``layers``: the confinement actually applied: ``uid``, ``read_all``, ``netns``, ``nproc``,
      ``fork_blocked``, ``landlock`` (ABI version, 0 = none), ``subreaper``.
    * ``stdout``/``stderr``: the last 4 KiB the program wrote to each.
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

    @property
    def passed(self) -> bool:
        """Every unit ran to completion within the limits."""
        return self.returncode == 0 and not self.timed_out


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


def _prepare(workdir: str, units: Sequence[str], uid: int | None) -> list[str]:
    """Write the units as ``unit<i>.py`` (the runner reads them before anything runs) and hand the
    directory to the sandbox uid; returns the file names."""
    names = []
    for i, source in enumerate(units):
        name = f"unit{i}.py"
        with open(os.path.join(workdir, name), "w", encoding="utf-8", errors="replace") as f:  # lone surrogates -> "?"
            f.write(source)
        names.append(name)
    if uid is not None:
        os.chown(workdir, uid, uid)
    return names


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


def _supervise(cmd: list[str], workdir: str, limits: SandboxLimits) -> dict[str, Any]:
    """Run the runner and parse its report. :raises SandboxError: it failed or overran."""
    proc = subprocess.Popen(
        cmd, cwd=workdir, env=_environment(workdir), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=limits.timeout_s + SUPERVISOR_GRACE_S)
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


def run_python(
    units: Sequence[str], limits: SandboxLimits | None = None, isolation: str | Isolation = "auto"
) -> SandboxResult:
    """Run Python source units, in order and in one namespace, in a fresh sandbox.

    Each call gets a new temporary directory (its working directory, ``HOME`` and ``TMPDIR``; removed
    afterwards), a new session and a minimal environment, and runs under ``python -I -B``. What is
    confined and how is described in :mod:`dare.rewards.sandbox`.

    :param units: Python sources; unit ``i`` runs after unit ``i - 1`` completed.
    :param limits: resource limits (defaults: :class:`SandboxLimits`).
    :param isolation: ``auto``, ``uid``, ``process`` or a resolved :class:`Isolation`.
    :returns: the result; a program that fails, hangs or misbehaves yields a result, never an exception.
    :raises SandboxError: the sandbox itself cannot run here (e.g. ``uid`` without root) or its
        runner failed.
    """
    limits = limits or SandboxLimits()
    iso = isolation if isinstance(isolation, Isolation) else resolve_isolation(isolation)
    started = time.monotonic()
    with ExitStack() as stack:
        uid = stack.enter_context(lease_uid()) if iso.mode == "uid" else None
        workdir = os.path.realpath(tempfile.mkdtemp(prefix="dare-sandbox-"))
        stack.callback(_remove, workdir)
        config = {
            "workdir": workdir,
            "units": _prepare(workdir, units, uid),
            "timeout_s": limits.timeout_s,
            "cpu_time_s": limits.cpu_time_s,
            "memory_mb": limits.memory_mb,
            "max_processes": limits.max_processes,
            "max_file_mb": limits.max_file_mb,
            "uid": uid,
            "read_all": iso.read_all,
        }
        report = _supervise([sys.executable, "-I", "-B", "-X", "utf8", RUNNER, json.dumps(config)], workdir, limits)
    code = report["returncode"]
    return SandboxResult(
        returncode=code,
        failed_unit=code - EXIT_UNIT if code is not None and EXIT_UNIT <= code < EXIT_UNIT + len(units) else None,
        timed_out=report["timed_out"],
        elapsed_s=time.monotonic() - started,
        cpu_s=report["cpu_s"],
        maxrss_mb=report["maxrss_mb"],
        leftover=report["leftover"],
        pid=report["pid"],
        layers={**report["setup"], "subreaper": report["subreaper"]},
        stdout=report["stdout"],
        stderr=report["stderr"],
    )
