"""How strongly the sandbox can isolate here, and a private uid for each run in uid mode.

Independently of the mode, the run starts inside bubblewrap (:mod:`.bwrap`: mount, PID, network,
IPC and UTS namespaces, a size-limited ``/tmp``) where ``bwrap`` is installed and works here, else
with the native layers only (:attr:`Isolation.bwrap`). Two modes:

* ``uid`` (Linux, root with ``CAP_SETUID``/``CAP_SETGID``): the program runs as a uid/gid of its
  own, leased for the run from ``UID_BASE .. UID_BASE + UID_COUNT - 1``, with no supplementary
  groups and (best effort, needs ``CAP_SYS_ADMIN``) in an empty network namespace. The kernel then
  enforces ``RLIMIT_NPROC`` exactly (the count is per uid and nobody else uses it), file permissions
  keep it out of everything it does not own, and it cannot signal other users' processes. When the
  interpreter's files are not readable by other users (e.g. a pyenv under ``/root``), the run keeps
  one capability, ``CAP_DAC_READ_SEARCH``, so it can import them; reads are then unconfined.
* ``process``: the program runs as the calling user. As non-root, ``RLIMIT_NPROC`` is the user's
  current task count plus ``max_processes``; as root (where the kernel ignores ``RLIMIT_NPROC``),
  ``os.fork`` is refused by the in-interpreter guard.

``auto`` picks ``uid`` where it is possible, else ``process``. Leases are held as abstract Unix
socket names (``\\0dare-sandbox-uid-<uid>``), which the kernel frees when the holder exits, so two
runs, in one process or in many, never share a uid. A uid that any live process uses is skipped;
that ``/proc`` scan runs once per uid and process (each process tries uids from its own random
start, so it keeps reusing the few it has checked: a finished run leaves no process behind).
"""

from __future__ import annotations

import functools
import os
import platform
import secrets
import socket
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

from dare_code.sandbox import bwrap, procfs
from dare_code.sandbox.errors import SandboxError
from dare_code.sandbox.taskcap import cgroup_parent
from dare_code.sandbox.view import DEFAULT_PACKAGES, view

__all__ = [
    "UID_BASE",
    "UID_COUNT",
    "Isolation",
    "resolve_isolation",
    "uid_mode_problem",
    "bwrap_problem",
    "active_layers",
    "lease_uid",
]

UID_BASE = 0x5DA50000
UID_COUNT = 4096
_CAP_DAC_READ_SEARCH, _CAP_SETGID, _CAP_SETUID = 2, 6, 7


@dataclass(frozen=True)
class Isolation:
    """A resolved mode. ``read_all``: native uid mode keeps ``CAP_DAC_READ_SEARCH`` (see the module
    docstring; Landlock's read rules still apply); ``bwrap``: the run starts inside bubblewrap."""

    mode: Literal["uid", "process"]
    read_all: bool = False
    bwrap: bool = False


def _effective_caps() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except OSError:
        pass
    return 0


def _range_mapped(map_file: str) -> bool:
    """Whether ``UID_BASE .. UID_BASE + UID_COUNT`` lies inside one line of a uid_map/gid_map."""
    try:
        with open(map_file) as f:
            rows = [tuple(int(x) for x in line.split()) for line in f if line.strip()]
    except OSError:
        return False
    return any(inside <= UID_BASE and UID_BASE + UID_COUNT <= inside + count for inside, _, count in rows)


def _readable_by_others(path: str) -> bool:
    """Whether a user with no special rights can read ``path`` (every ancestor searchable)."""
    path = os.path.realpath(path)
    parts = path.split(os.sep)
    for i in range(1, len(parts)):
        ancestor = os.sep.join(parts[:i]) or os.sep
        if not os.stat(ancestor).st_mode & stat.S_IXOTH:
            return False
    mode = os.stat(path).st_mode
    need = stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(mode) else 0)
    return mode & need == need


def _interpreter_readable() -> bool:
    """Whether every existing ``sys.path`` entry is readable by other users."""
    return all(_readable_by_others(p) for p in sys.path if p and os.path.exists(p))


@functools.lru_cache(maxsize=1)
def _probe() -> tuple[str | None, bool]:
    """``(why uid mode is impossible or None, whether it needs CAP_DAC_READ_SEARCH)``; cached."""
    if not sys.platform.startswith("linux") or not procfs.available():
        return "it needs Linux with /proc", False
    if os.geteuid() != 0:
        return f"it needs root (this process runs as uid {os.geteuid()})", False
    caps = _effective_caps()
    if caps & (1 << _CAP_SETUID | 1 << _CAP_SETGID) != (1 << _CAP_SETUID | 1 << _CAP_SETGID):
        return "it needs the CAP_SETUID and CAP_SETGID capabilities", False
    if not (_range_mapped("/proc/self/uid_map") and _range_mapped("/proc/self/gid_map")):
        return f"uids {UID_BASE}..{UID_BASE + UID_COUNT - 1} are not mapped in this user namespace", False
    if _interpreter_readable():
        return None, False
    if not caps & (1 << _CAP_DAC_READ_SEARCH):
        return "the interpreter's files are not readable by other users and CAP_DAC_READ_SEARCH is missing", False
    return None, True


def uid_mode_problem() -> str | None:
    """Why uid mode cannot run in this process, or None when it can."""
    return _probe()[0]


def bwrap_problem(packages: tuple[str, ...] = DEFAULT_PACKAGES) -> str | None:
    """Why the bubblewrap layer cannot be used here, or None when it can (cached probe)."""
    if not sys.platform.startswith("linux"):
        return "bubblewrap needs Linux"
    return bwrap.problem(view(packages), os.geteuid() == 0)


def resolve_isolation(requested: str, packages: tuple[str, ...] = DEFAULT_PACKAGES) -> Isolation:
    """The mode to use for ``requested`` (``auto``, ``uid`` or ``process``), with bubblewrap where
    it works here.

    :raises SandboxError: ``uid`` was requested but is impossible here, or the name is unknown.
    """
    if requested not in ("auto", "uid", "process"):
        raise SandboxError(f"isolation must be 'auto', 'uid' or 'process', not {requested!r}")
    use_bwrap = bwrap_problem(packages) is None
    if requested == "process":
        return Isolation("process", bwrap=use_bwrap)
    problem, read_all = _probe()
    if problem is None:
        return Isolation("uid", read_all, use_bwrap)
    if requested == "uid":
        raise SandboxError(f"isolation 'uid' is unavailable: {problem}; use isolation 'auto' or 'process'")
    return Isolation("process", bwrap=use_bwrap)


_START = secrets.randbelow(UID_COUNT)
_verified: set[int] = set()  # uids this process found unused


@contextmanager
def lease_uid() -> Iterator[int]:
    """Hold a free sandbox uid for the duration of the ``with`` block.

    :raises SandboxError: all ``UID_COUNT`` uids are leased or in use.
    """
    for i in range(UID_COUNT):
        uid = UID_BASE + (_START + i) % UID_COUNT
        lock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            lock.bind(f"\0dare-sandbox-uid-{uid}")
        except OSError:
            lock.close()
            continue
        if uid not in _verified and procfs.owned_by(uid):
            lock.close()
            continue
        _verified.add(uid)
        try:
            yield uid
        except BaseException:  # the run may not have cleaned up: check the uid again next time
            _verified.discard(uid)
            raise
        finally:
            lock.close()
        return
    raise SandboxError(f"all {UID_COUNT} sandbox uids from {UID_BASE} are in use; run fewer sandboxes at once")


def _user_namespaces() -> bool:
    """Whether a child of this process can create a user namespace (``unshare(CLONE_NEWUSER)``)."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    pid = os.fork()
    if pid == 0:
        try:
            ok = ctypes.CDLL(None, use_errno=True).unshare(0x10000000) == 0
        finally:
            os._exit(0 if ok else 1)
    return os.waitpid(pid, 0)[1] == 0


def _cgroup_v2_memory() -> str:
    """Whether this process's cgroup v2 could hold a memory-limited child group (reported only: the
    sandbox bounds memory with its own watchdog, see :mod:`.runner`)."""
    try:
        with open("/proc/self/cgroup") as f:
            path = next((line.strip()[3:] for line in f if line.startswith("0::")), None)
        with open("/proc/self/mountinfo") as f:
            mount = next((line.split()[4] for line in f if " - cgroup2 " in line), None)
    except OSError:
        return "no (no /proc)"
    if path is None or mount is None:
        return "no (no cgroup v2 hierarchy)"
    here = os.path.join(mount, path.lstrip("/"))
    try:
        with open(os.path.join(here, "cgroup.controllers")) as f:
            controllers = f.read().split()
    except OSError:
        return f"no ({here} is unreadable)"
    if "memory" not in controllers:
        return f"no (memory controller not enabled in {here}; controllers: {' '.join(controllers) or 'none'})"
    return "yes" if os.access(here, os.W_OK) else f"no ({here} is not writable)"


@functools.lru_cache(maxsize=4)
def active_layers(requested: str = "auto", packages: tuple[str, ...] = DEFAULT_PACKAGES) -> dict[str, object]:
    """Which confinement layers a run with ``isolation=requested`` gets on this machine (cached).

    Keys: ``kernel``, ``mode``, ``bwrap`` (True, or why not), ``user_namespaces``, ``landlock_abi``,
    ``cgroup_v2_memory`` (reported, not used), ``network``, ``reads``, ``writes``, ``disk_quota``,
    ``memory_limit``, ``processes``, ``tasks`` (the cap on processes and threads), ``tests``, ``native_code``,
    ``ipc_keyring_processes`` (each a short description of what enforces it).

    :raises SandboxError: as :func:`resolve_isolation`.
    """
    from dare_code.sandbox import landlock

    iso = resolve_isolation(requested, packages)
    abi = landlock.abi_version()
    problem = bwrap_problem(packages)
    reads = "mount namespace with the view only" if iso.bwrap else "unconfined"
    if abi >= 1:
        reads += " + Landlock read rules (the view)"
    if iso.bwrap:
        writes, network = "size-limited tmpfs /tmp only", "empty network namespace (bwrap)"
    else:
        writes = "the run's directory: Landlock" if abi >= 1 else "Python guard only"
        network = "empty network namespace (uid mode)" if iso.mode == "uid" else (
            "Landlock TCP rules" if abi >= 4 else "Python guard only"
        )
    if platform.system() == "Linux" and platform.machine().lower() in ("x86_64", "aarch64"):
        network += " + seccomp: no socket() of any family"
    return {
        "kernel": os.uname().release,
        "mode": iso.mode,
        "read_all": iso.read_all and not iso.bwrap,
        "bwrap": True if problem is None else problem,
        "user_namespaces": _user_namespaces(),
        "landlock_abi": abi,
        "cgroup_v2_memory": _cgroup_v2_memory(),
        "network": network,
        "reads": reads,
        "writes": writes,
        "disk_quota": "tmpfs size (bwrap) + RLIMIT_FSIZE" if iso.bwrap else "watchdog (10 ms) + RLIMIT_FSIZE",
        "memory_limit": "whole tree: supervisor watchdog (RssAnon + RssShmem + memfd, 10 ms); RLIMIT_AS per process",
        "processes": "RLIMIT_NPROC (private uid)" if iso.mode == "uid" else "RLIMIT_NPROC or fork refused (root)",
        "tasks": ("pids cgroup (pids.max = max_processes, threads included) + watchdog" if cgroup_parent() is not None
                  else "watchdog: Threads: of the program's processes above max_processes kill the tree (10 ms)"),
        "tests": "separate process, plain data only",
        "native_code": "no executable mapping of what it wrote: noexec directory (a tmpfs in a mount namespace, "
                       "or bwrap's /tmp remounted; root or unprivileged user namespaces: the run's layers say "
                       "'noexec') + seccomp (no memfd, no W+X or anonymous executable memory, no mprotect to exec)",
        "ipc_keyring_processes": "seccomp: no SysV IPC or POSIX queues, no keyring (new empty session keyring), "
                                 "prlimit on itself only, no socket() of any family"
                                 + (", no fork (root in process mode)" if iso.mode == "process" and os.geteuid() == 0 else ""),
    }
