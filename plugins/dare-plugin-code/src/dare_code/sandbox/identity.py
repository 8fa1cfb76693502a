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
    "noexec_workdir",
    "new_session_keyring",
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
_CLONE_NEWNS, _CLONE_NEWIPC, _CLONE_NEWUSER = 0x00020000, 0x08000000, 0x10000000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 2, 4, 8, 32, 4096, 16384, 1 << 18
_KEYCTL_JOIN_SESSION_KEYRING = 1
_KEYCTL_NR = {"x86_64": 250, "aarch64": 219}
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


def _mount(source, target: str, fstype, flags: int, data) -> None:
    enc = (lambda v: None if v is None else v.encode())
    _check(_libc().mount(enc(source), target.encode(), enc(fstype), flags, enc(data)), f"mount({target})")


def _own_user_namespace() -> None:
    """Enter a new user namespace that maps only this process's uid and gid onto themselves
    (user_namespaces(7): ``setgroups`` denied, then ``uid_map``/``gid_map``), so an unprivileged
    process gets ``CAP_SYS_ADMIN`` over the mount and IPC namespaces it creates next."""
    uid, gid = os.getuid(), os.getgid()
    _check(_libc().unshare(_CLONE_NEWUSER), "unshare(user)")
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)


def noexec_workdir(workdir: str, inside_bwrap: bool, disk_mb: int, owner: int | None) -> bool:
    """Make the program's directory a ``noexec`` mount, so the kernel refuses to map or execute any
    file the program writes there (a shared object for ``ctypes``, an ELF binary). Returns False
    when the kernel refuses (no ``CAP_SYS_ADMIN`` and no unprivileged user namespaces).

    Inside bubblewrap as root: a bind remount of its ``/tmp`` tmpfs with ``noexec,nosuid,nodev``.
    Otherwise a new mount and IPC namespace for this process (the supervisor) and its children
    (natively and not root: inside a new user namespace of its own uid first; in bubblewrap's user
    namespace, bwrap gave the supervisor ``CAP_SYS_ADMIN``), mounts made private, then a
    ``noexec,nosuid,nodev`` tmpfs of ``disk_mb`` MiB on ``workdir`` (owned by ``owner``, mode 0700)
    and natively a 1 MiB one on ``/dev/shm``; they vanish with the namespace. Source: mount(2),
    unshare(2), mount_namespaces(7), user_namespaces(7).
    """
    if not _LINUX:
        return False
    flags = _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
    if inside_bwrap and os.geteuid() == 0:
        try:
            _mount(None, workdir, None, _MS_REMOUNT | _MS_BIND | flags, None)
            return True
        except OSError:
            pass
    try:
        if not inside_bwrap and os.geteuid() != 0:
            _own_user_namespace()
        _check(_libc().unshare(_CLONE_NEWNS | (0 if inside_bwrap else _CLONE_NEWIPC)), "unshare(mount, IPC)")
        _mount(None, "/", None, _MS_REC | _MS_PRIVATE, None)
        _mount("tmpfs", workdir, "tmpfs", flags, f"size={int(disk_mb)}m,mode=0700")
        if owner is not None:
            os.chown(workdir, owner, owner)
        if not inside_bwrap and os.path.isdir("/dev/shm"):
            _mount("tmpfs", "/dev/shm", "tmpfs", flags, "size=1m,mode=1777")
    except OSError:
        return False
    return True


def new_session_keyring() -> bool:
    """Join a new, empty, anonymous session keyring (``keyctl(KEYCTL_JOIN_SESSION_KEYRING, NULL)``,
    keyctl(2)), so no key of the caller's session keyring is reachable; the seccomp filter then
    refuses every keyring call. Returns False where unsupported.
    """
    nr = _KEYCTL_NR.get(os.uname().machine) if _LINUX else None
    if nr is None:
        return False
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    return libc.syscall(nr, _KEYCTL_JOIN_SESSION_KEYRING, None) >= 0


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
