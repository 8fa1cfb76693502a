"""Process identity for the sandbox: subreaper, network namespace, unprivileged uid (stdlib only).

Thin wrappers over Linux system calls reached through the C library with :mod:`ctypes`; the
constants are those of ``<linux/prctl.h>``, ``<sched.h>`` and ``<linux/capability.h>`` (see
prctl(2), unshare(2), capset(2), setuid(2)). On other systems the optional steps report False and
:func:`drop_privileges` raises ``OSError``.
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys

__all__ = [
    "become_subreaper",
    "new_network_namespace",
    "forbid_new_privileges",
    "drop_privileges",
    "drop_capabilities",
    "forbid_inspection",
]

_PR_SET_DUMPABLE = 4
_PR_SET_KEEPCAPS = 8
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_NO_NEW_PRIVS = 38
_CLONE_NEWNET = 0x40000000
_CAP_DAC_READ_SEARCH = 2
_CAPABILITY_VERSION_3 = 0x20080522

_LINUX = sys.platform.startswith("linux")


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (``PR_SET_CHILD_SUBREAPER``).

    Afterwards no descendant can leave this process's subtree (a double fork or ``setsid`` does not
    help), so :func:`~procfs.descendants` finds every one of them. Returns False where unsupported.
    """
    return _LINUX and _libc().prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def new_network_namespace() -> bool:
    """Move this process into a fresh network namespace (only a loopback device, which is down).

    Needs ``CAP_SYS_ADMIN``. Returns False when that fails (no capability, seccomp, not Linux); the
    caller then relies on the other network layers.
    """
    return _LINUX and _libc().unshare(_CLONE_NEWNET) == 0


def forbid_new_privileges() -> bool:
    """Set ``no_new_privs``: no later ``execve`` can gain privileges (setuid bits, file capabilities).

    Landlock requires it of unprivileged callers. Returns False where unsupported (not Linux).
    :raises OSError: Linux refused.
    """
    if not _LINUX:
        return False
    _check(_libc().prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    return True


def drop_privileges(uid: int, gid: int, keep_read_all: bool) -> None:
    """Become ``uid``/``gid`` with no supplementary groups (from root).

    With ``keep_read_all`` the process keeps exactly one capability, ``CAP_DAC_READ_SEARCH`` (read any
    file, search any directory), so it can import an interpreter installed under a private directory
    such as ``/root``. Writing, signalling and ``RLIMIT_NPROC`` still follow ``uid``'s permissions.

    :raises OSError: a system call failed (e.g. no ``CAP_SETUID``).
    """
    libc = _libc()
    if keep_read_all:
        _check(libc.prctl(_PR_SET_KEEPCAPS, 1, 0, 0, 0), "prctl(PR_SET_KEEPCAPS)")
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    if keep_read_all:
        keep = 1 << _CAP_DAC_READ_SEARCH
        header = ctypes.create_string_buffer(struct.pack("Ii", _CAPABILITY_VERSION_3, 0))
        data = ctypes.create_string_buffer(struct.pack("6I", keep, keep, 0, 0, 0, 0))
        _check(libc.capset(header, data), "capset(CAP_DAC_READ_SEARCH)")
        _check(libc.prctl(_PR_SET_KEEPCAPS, 0, 0, 0, 0), "prctl(PR_SET_KEEPCAPS)")
    if os.getuid() != uid or os.geteuid() != uid:
        raise OSError(f"still uid {os.getuid()}/{os.geteuid()} after setuid({uid})")


def drop_capabilities() -> bool:
    """Clear every capability of this process (permitted, effective, inheritable; ambient follow),
    keeping its uid: e.g. root without ``CAP_SYS_RESOURCE`` cannot raise a hard rlimit again.
    Returns False where unsupported (not Linux).

    :raises OSError: ``capset`` failed.
    """
    if not _LINUX:
        return False
    libc = _libc()
    header = ctypes.create_string_buffer(struct.pack("Ii", _CAPABILITY_VERSION_3, 0))
    data = ctypes.create_string_buffer(struct.pack("6I", 0, 0, 0, 0, 0, 0))
    _check(libc.capset(header, data), "capset(none)")
    return True


def forbid_inspection() -> bool:
    """Mark this process not dumpable (``PR_SET_DUMPABLE`` 0): processes of the same uid without
    ``CAP_SYS_PTRACE`` can then neither ``ptrace`` it nor read its ``/proc/<pid>/mem``, ``environ``
    or file descriptors. Returns False where unsupported (not Linux)."""
    return _LINUX and _libc().prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
