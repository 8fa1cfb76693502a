"""A seccomp-bpf system call filter against native code and leftovers (Linux x86-64 and arm64; stdlib only).

:func:`restrict` installs, for the calling process and every process it forks, irrevocably (it
needs ``no_new_privs``), a classic-BPF filter that makes these calls fail with ``EPERM``:

* code it wrote: ``memfd_create`` and ``memfd_secret``; ``mmap`` asking for ``PROT_EXEC`` together
  with ``PROT_WRITE`` or ``MAP_ANONYMOUS`` (a writable or anonymous executable mapping);
  ``mprotect``/``pkey_mprotect`` adding ``PROT_EXEC``; ``personality`` other than the query (its
  ``READ_IMPLIES_EXEC`` would add ``PROT_EXEC`` behind the filter's back); ``ptrace``,
  ``process_vm_writev``/``readv`` (they write through page protections). Executable mappings of
  *files* stay allowed (the interpreter loads its extension modules so): the program's writable
  directory is a ``noexec`` mount (:mod:`.runner`) where the kernel refuses them.
* leftovers and shared state: System V IPC (``shm*``, ``msg*``, ``sem*``) and POSIX message
  queues (``mq_open``); the keyring (``keyctl``, ``add_key``, ``request_key``; the child joined a
  new empty session keyring first);
* other processes: ``prlimit64`` on any pid but its own (``0``); with ``block_fork``, ``fork``,
  ``vfork`` and ``clone`` without ``CLONE_THREAD`` (threads still start; ``clone3`` answers
  ``ENOSYS`` so the C library falls back to ``clone``);
* the network and the host: ``socket()`` for every address family (``AF_INET``/``AF_INET6`` datagrams
  to the host's loopback, ``AF_NETLINK`` queries of the host's sockets, ``AF_UNIX`` socket files, raw
  and packet sockets: process mode shares the host's network namespace; ``socketpair`` stays);
  namespaces and mounts (``unshare``, ``setns``, ``mount``, ``umount2``, ``pivot_root``); kernel
  interfaces that bypass the filter or widen the attack surface (``io_uring_*``, ``userfaultfd``,
  ``bpf``, ``perf_event_open``, module and kexec loading).

A hand-written filter rather than libseccomp's bindings: the runner loads only the standard
library inside the sandbox's view (``ctypes.util.find_library``, which the bindings use, starts
``ldconfig``). Layout of ``struct seccomp_data`` and the BPF opcodes: ``<linux/seccomp.h>``,
``<linux/filter.h>``, seccomp(2); system call numbers: the kernel's ``syscall_64.tbl`` (x86-64) and
the generic table (arm64).
"""

from __future__ import annotations

import ctypes
import errno
import platform
import struct

__all__ = ["ARCHES", "restrict"]

_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
_LD_W_ABS, _JEQ_K, _JGE_K, _JSET_K, _RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
_PROT_WRITE, _PROT_EXEC, _MAP_ANONYMOUS, _CLONE_THREAD = 0x2, 0x4, 0x20, 0x10000
_OFF_NR, _OFF_ARCH = 0, 4

#: (AUDIT_ARCH, system call numbers) per machine; ``None`` where the call does not exist there
ARCHES = {
    "x86_64": (0xC000003E, {
        "mmap": 9, "mprotect": 10, "pkey_mprotect": 329, "memfd_create": 319, "memfd_secret": 447,
        "personality": 135, "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
        "shmget": 29, "shmat": 30, "shmctl": 31, "semget": 64, "semop": 65, "semctl": 66, "semtimedop": 220,
        "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71, "mq_open": 240,
        "keyctl": 250, "add_key": 248, "request_key": 249, "prlimit64": 302,
        "fork": 57, "vfork": 58, "clone": 56, "clone3": 435, "socket": 41,
        "unshare": 272, "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155,
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "userfaultfd": 323, "bpf": 321,
        "perf_event_open": 298, "init_module": 175, "finit_module": 313, "kexec_load": 246,
        "kexec_file_load": 320, "remap_file_pages": 216,
    }),
    "aarch64": (0xC00000B7, {
        "mmap": 222, "mprotect": 226, "pkey_mprotect": 288, "memfd_create": 279, "memfd_secret": 447,
        "personality": 92, "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271,
        "shmget": 194, "shmat": 196, "shmctl": 195, "semget": 190, "semop": 193, "semctl": 191, "semtimedop": 192,
        "msgget": 186, "msgsnd": 189, "msgrcv": 188, "msgctl": 187, "mq_open": 180,
        "keyctl": 219, "add_key": 217, "request_key": 218, "prlimit64": 261,
        "fork": None, "vfork": None, "clone": 220, "clone3": 435, "socket": 198,
        "unshare": 97, "setns": 268, "mount": 40, "umount2": 39, "pivot_root": 41,
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "userfaultfd": 282, "bpf": 280,
        "perf_event_open": 241, "init_module": 105, "finit_module": 273, "kexec_load": 104,
        "kexec_file_load": 294, "remap_file_pages": 234,
    }),
}
_DENIED = (
    "memfd_create", "memfd_secret", "ptrace", "process_vm_readv", "process_vm_writev", "shmget", "shmat", "shmctl",
    "semget", "semop", "semctl", "semtimedop", "msgget", "msgsnd", "msgrcv", "msgctl", "mq_open", "keyctl",
    "add_key", "request_key", "socket", "unshare", "setns", "mount", "umount2", "pivot_root", "io_uring_setup",
    "io_uring_enter", "io_uring_register", "userfaultfd", "bpf", "perf_event_open", "init_module", "finit_module",
    "kexec_load", "kexec_file_load", "remap_file_pages",
)


def _arg(i: int) -> int:
    """Offset of the low 32 bits of argument ``i`` in ``struct seccomp_data`` (little-endian)."""
    return 16 + 8 * i


class _Program:
    """Classic BPF with symbolic labels: ``(code, jt, jf, k)`` where jt/jf may name a label."""

    def __init__(self):
        self.ops: list[tuple[int, int | str, int | str, int]] = []
        self.labels: dict[str, int] = {}

    def op(self, code: int, k: int = 0, jt: int | str = 0, jf: int | str = 0) -> None:
        self.ops.append((code, jt, jf, k))

    def label(self, name: str) -> None:
        self.labels[name] = len(self.ops)

    def assemble(self) -> bytes:
        out = b""
        for i, (code, jt, jf, k) in enumerate(self.ops):
            jt = self.labels[jt] - i - 1 if isinstance(jt, str) else jt
            jf = self.labels[jf] - i - 1 if isinstance(jf, str) else jf
            if not (0 <= jt < 256 and 0 <= jf < 256):
                raise ValueError("seccomp filter jump out of range")
            out += struct.pack("=HBBI", code, jt, jf, k & 0xFFFFFFFF)
        return out


def _filter(audit_arch: int, nr: dict, block_fork: bool) -> bytes:
    p = _Program()
    deny = _RET_ERRNO | errno.EPERM
    p.op(_LD_W_ABS, _OFF_ARCH)
    p.op(_JEQ_K, audit_arch, 1, 0)
    p.op(_RET_K, deny)  # another ABI (e.g. 32-bit calls on x86-64): refused
    p.op(_LD_W_ABS, _OFF_NR)
    p.op(_JGE_K, 0x40000000, "deny", 0)  # x32 system calls
    for name in _DENIED:
        if nr.get(name) is not None:
            p.op(_JEQ_K, nr[name], "deny", 0)
    checks = [("mmap", "mmap"), ("mprotect", "mprotect"), ("pkey_mprotect", "mprotect"), ("personality", "personality"),
              ("prlimit64", "prlimit")]
    if block_fork:
        checks += [("clone", "clone"), ("fork", "deny"), ("vfork", "deny")]
    for name, where in checks:
        if nr.get(name) is not None:
            p.op(_JEQ_K, nr[name], where, 0)
    p.op(_JEQ_K, nr["clone3"], "nosys", 0)
    p.op(_RET_K, _RET_ALLOW)
    p.label("mmap")  # PROT_EXEC with PROT_WRITE or MAP_ANONYMOUS
    p.op(_LD_W_ABS, _arg(2))
    p.op(_JSET_K, _PROT_EXEC, 0, "allow")
    p.op(_JSET_K, _PROT_WRITE, "deny", 0)
    p.op(_LD_W_ABS, _arg(3))
    p.op(_JSET_K, _MAP_ANONYMOUS, "deny", "allow")
    p.label("mprotect")
    p.op(_LD_W_ABS, _arg(2))
    p.op(_JSET_K, _PROT_EXEC, "deny", "allow")
    p.label("personality")  # only the query personality(0xffffffff)
    p.op(_LD_W_ABS, _arg(0))
    p.op(_JEQ_K, 0xFFFFFFFF, "allow", "deny")
    p.label("prlimit")  # pid 0 (itself) only; both halves of the 64-bit pid_t argument
    p.op(_LD_W_ABS, _arg(0))
    p.op(_JEQ_K, 0, 0, "deny")
    p.op(_LD_W_ABS, _arg(0) + 4)
    p.op(_JEQ_K, 0, "allow", "deny")
    p.label("clone")  # x86-64 and arm64: flags are the first argument
    p.op(_LD_W_ABS, _arg(0))
    p.op(_JSET_K, _CLONE_THREAD, "allow", "deny")
    p.label("nosys")
    p.op(_RET_K, _RET_ERRNO | errno.ENOSYS)
    p.label("allow")
    p.op(_RET_K, _RET_ALLOW)
    p.label("deny")
    p.op(_RET_K, deny)
    return p.assemble()


def restrict(block_fork: bool) -> bool:
    """Install the filter (see the module docstring) on this process and its future children.

    :param block_fork: also refuse new processes (threads stay allowed).
    :returns: False when this machine is not Linux x86-64/arm64 (nothing installed).
    :raises OSError: the kernel refused the filter (e.g. ``no_new_privs`` not set).
    """
    machine = platform.machine().lower()
    if platform.system() != "Linux" or machine not in ARCHES:
        return False
    audit_arch, nr = ARCHES[machine]
    code = _filter(audit_arch, nr, block_fork)
    buf = ctypes.create_string_buffer(code, len(code))

    class _Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = _Prog(len(code) // 8, ctypes.cast(buf, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_SECCOMP): {errno.errorcode.get(err, err)}")
    return True
