"""A pids cgroup per run: the kernel caps the program's tasks (processes *and* threads) at ``max_processes``.

``RLIMIT_NPROC`` does not bind root, and counts a whole uid's tasks for any other caller; a
cgroup's ``pids.max`` counts exactly the tasks inside it, whoever runs them. The caller
(:func:`dare_code.sandbox.run_python`) creates one cgroup per run with :func:`task_cgroup`; the
program process moves itself into it (it writes ``0`` to the ``cgroup.procs`` file named in its
configuration, before it drops its privileges; under bubblewrap that one file is bound into the
sandbox), so everything it starts counts and a ``fork``/``clone`` past the cap fails with ``EAGAIN``
(``threading`` raises ``RuntimeError: can't start new thread``). Where no cgroup can be made (not
root, no pids controller) the supervisor's watchdog counts ``Threads:`` of every program process
(:mod:`.runner`) and kills the tree past the cap; it runs in every mode as a second layer.

Hierarchies: cgroup v1's ``pids`` controller (``/sys/fs/cgroup/pids``), else cgroup v2 where this
process's cgroup has ``pids`` in ``cgroup.subtree_control``. Files: the kernel's
``Documentation/admin-guide/cgroup-v1/pids.rst`` and ``cgroup-v2.rst`` ("PID").
"""

from __future__ import annotations

import functools
import os
import secrets
import signal
import time
from contextlib import contextmanager
from typing import Iterator

__all__ = ["cgroup_parent", "task_cgroup"]

_V1 = "/sys/fs/cgroup/pids"
_V2_MOUNTS = ("/sys/fs/cgroup/unified", "/sys/fs/cgroup")
#: seconds to wait for the kernel to release a cgroup whose last task was just reaped
_RELEASE_S = 2.0


def _v2_parent() -> str | None:
    try:
        with open("/proc/self/cgroup") as f:
            own = next((line.split("::", 1)[1].strip() for line in f if line.startswith("0::")), None)
    except OSError:
        return None
    if own is None:
        return None
    for mount in _V2_MOUNTS:
        path = os.path.join(mount, own.lstrip("/"))
        try:
            with open(os.path.join(path, "cgroup.subtree_control")) as f:
                if "pids" in f.read().split():
                    return path
        except OSError:
            continue
    return None


@functools.lru_cache(maxsize=1)
def cgroup_parent() -> str | None:
    """The directory under which this process can make pids cgroups (probed once by making and
    removing one), or None where it cannot (not root, no pids controller, no ``/sys/fs/cgroup``)."""
    for parent in (_V1 if os.path.isfile(os.path.join(_V1, "cgroup.procs")) else None, _v2_parent()):
        if parent is None:
            continue
        probe = os.path.join(parent, f"dare-probe-{os.getpid()}-{secrets.token_hex(4)}")
        try:
            os.mkdir(probe)
        except OSError:
            continue
        try:
            ok = os.path.isfile(os.path.join(probe, "pids.max"))
        finally:
            try:
                os.rmdir(probe)
            except OSError:
                pass
        if ok:
            return parent
    return None


def _remove(path: str) -> None:
    """Kill whatever is left in the cgroup (only the run's tasks can be there) and remove it."""
    deadline = time.monotonic() + _RELEASE_S
    while True:
        try:
            with open(os.path.join(path, "cgroup.procs")) as f:
                left = [int(p) for p in f.read().split()]
        except OSError:
            left = []
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                return
            time.sleep(0.01)


@contextmanager
def task_cgroup(max_tasks: int) -> Iterator[str | None]:
    """A new pids cgroup with ``pids.max = max_tasks`` for one run; yields the path of its
    ``cgroup.procs`` file (None where no cgroup can be made here), removed afterwards.

    :param max_tasks: processes and threads the program may run at once (>= 1).
    """
    parent = cgroup_parent()
    if parent is None:
        yield None
        return
    path = os.path.join(parent, f"dare-sandbox-{os.getpid()}-{secrets.token_hex(6)}")
    try:
        os.mkdir(path, 0o755)
        with open(os.path.join(path, "pids.max"), "w") as f:
            f.write(str(max(int(max_tasks), 1)))
    except OSError:
        _remove(path)
        yield None
        return
    try:
        yield os.path.join(path, "cgroup.procs")
    finally:
        _remove(path)
