"""Kernel-enforced write and network confinement with Landlock (Linux >= 5.13, stdlib only).

:func:`restrict` confines the calling process and all its future children, unprivileged and
irrevocably:

* file system (ABI >= 1): every *modifying* access right (write, truncate, create, remove, rename,
  link, device ioctl) is denied except beneath the given directories and on the given files. With
  ``readable`` given, reading, listing and executing are denied too, except beneath those paths
  (and reading and listing beneath the writable ones: ``execve`` of a file there is refused; an
  executable *mapping* is not a Landlock right, the ``noexec`` mount and :mod:`.seccomp` stop
  those); without it they are not restricted.
* network (ABI >= 4): TCP ``bind`` and ``connect`` are denied on every port (UDP, raw and Unix
  sockets are not covered by Landlock).
* scopes (ABI >= 6): no signals to processes outside the sandbox, no connections to abstract Unix
  sockets created outside it.

Source of the constants and structures: the kernel's ``include/uapi/linux/landlock.h`` and
Documentation/userspace-api/landlock.rst. The system call numbers 444-446 are the same on every
architecture (they were added after the syscall tables were unified).
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys

__all__ = ["abi_version", "restrict"]

_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1

# access rights (bit positions from landlock.h) and the ABI that introduced them
_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_REFER, _TRUNCATE, _IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_V1_RIGHTS = (1 << 13) - 1  # execute .. make_sym
_UNRESTRICTED = _EXECUTE | _READ_FILE | _READ_DIR
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1 << 0, 1 << 1


def _syscall():
    fn = ctypes.CDLL(None, use_errno=True).syscall
    fn.restype = ctypes.c_long
    return fn


def abi_version() -> int:
    """The kernel's Landlock ABI version; 0 when Landlock is missing or disabled."""
    if not sys.platform.startswith("linux"):
        return 0
    return max(int(_syscall()(_CREATE_RULESET, None, 0, _CREATE_RULESET_VERSION)), 0)


def _handled_fs(abi: int) -> int:
    rights = _V1_RIGHTS | (_REFER if abi >= 2 else 0) | (_TRUNCATE if abi >= 3 else 0) | (_IOCTL_DEV if abi >= 5 else 0)
    return rights & ~_UNRESTRICTED


def _ruleset_attr(abi: int, fs: int) -> bytes:
    """``struct landlock_ruleset_attr``, truncated to the fields the running ABI knows."""
    net = _NET_BIND_TCP | _NET_CONNECT_TCP if abi >= 4 else 0
    scoped = _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL if abi >= 6 else 0
    full = struct.pack("QQQ", fs, net, scoped)
    return full[: 8 if abi < 4 else 16 if abi < 6 else 24]


def _allow(call, ruleset: int, path: str, rights: int) -> None:
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        rule = ctypes.create_string_buffer(struct.pack("=Qi", rights, fd), 12)  # packed path_beneath_attr
        if call(_ADD_RULE, ruleset, _RULE_PATH_BENEATH, rule, 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"landlock_add_rule({path!r}): {os.strerror(err)}")
    finally:
        os.close(fd)


def restrict(
    writable_dirs: list[str],
    writable_files: list[str],
    readable: list[str] | None = None,
    listable: tuple[str, ...] | list[str] = (),
) -> int:
    """Confine this process (see the module docstring); the caller must have set ``no_new_privs``.

    :param writable_dirs: directories beneath which files may be created, written and removed.
    :param writable_files: single files that may be written (e.g. ``/dev/null``).
    :param readable: directories and files that may be read (and executed); None leaves reading
        unrestricted. Paths that do not exist are skipped.
    :param listable: directories whose entries may be listed (not read), with ``readable``.
    :returns: the ABI version applied, or 0 when Landlock is unavailable (nothing was restricted).
    :raises OSError: Landlock is available but a rule could not be added or enforced.
    """
    abi = abi_version()
    if abi < 1:
        return 0
    call = _syscall()
    fs = _handled_fs(abi) | (_UNRESTRICTED if readable is not None else 0)
    file_rights = _WRITE_FILE | _TRUNCATE | _IOCTL_DEV | _READ_FILE | _EXECUTE
    attr = _ruleset_attr(abi, fs)
    buf = ctypes.create_string_buffer(attr, len(attr))
    ruleset = int(call(_CREATE_RULESET, buf, len(attr), 0))
    if ruleset < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"landlock_create_ruleset: {os.strerror(err)}")
    try:
        for path in writable_dirs:  # never executable: a program may not run what it wrote
            _allow(call, ruleset, path, fs & ~_EXECUTE)
        for path in writable_files:
            _allow(call, ruleset, path, fs & file_rights)
        for path in readable or ():
            if os.path.exists(path):
                rights = _UNRESTRICTED if os.path.isdir(path) else _READ_FILE | _EXECUTE
                _allow(call, ruleset, path, fs & rights)
        if readable is not None:
            for path in listable:
                if os.path.isdir(path):
                    _allow(call, ruleset, path, fs & _READ_DIR)
        if call(_RESTRICT_SELF, ruleset, 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"landlock_restrict_self: {os.strerror(err)}")
    finally:
        os.close(ruleset)
    return abi
