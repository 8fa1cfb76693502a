"""A POSIX sandbox for untrusted Python (model-written programs) and the tests that judge them.

:func:`run_python` runs source units in a fresh process tree and returns a :class:`SandboxResult`;
a program that fails, hangs, forks, allocates or attacks yields a failed result, never an exception.
:func:`active_layers` says which of the layers below this machine gives a run (docs/sandbox.md
records them per machine).

Layers, outermost first (see docs/sandbox.md for what each stops)
  * **bubblewrap** (:mod:`.bwrap`, where ``bwrap`` is installed and works): the run sees only the
    :mod:`.view` (interpreter, standard library, numpy, system libraries) read-only and a
    size-limited tmpfs ``/tmp`` (the disk quota) as its directory; its own PID, network, IPC and UTS
    namespaces; an empty environment. Without it, the *native* layers below do all the work.
  * **identity** (:mod:`.isolation`): as root, a private uid per run (``RLIMIT_NPROC`` exact,
    nothing of other users reachable), an empty network namespace natively; otherwise the caller's
    uid (root then drops every capability and may not fork).
  * **resource limits**: ``RLIMIT_CPU``, ``RLIMIT_AS``, ``RLIMIT_FSIZE``, ``RLIMIT_NOFILE``,
    ``RLIMIT_CORE = 0``, ``RLIMIT_NPROC``; and the supervisor's watchdog (every 10 ms): the whole
    process tree's resident anonymous + shared memory + open memfd files against ``memory_mb``,
    the directory's size and entry count against ``max_disk_mb``, the ``Threads:`` of its processes
    against ``max_processes``; the wall clock.
  * **task cap** (:mod:`.taskcap`, root with a pids controller): a pids cgroup per run with
    ``pids.max = max_processes`` that the program joins, so threads count too and root is capped
    (``RLIMIT_NPROC`` does not bind root); elsewhere the watchdog's ``Threads:`` count.
  * **no_new_privs** and **Landlock** (:mod:`.landlock`, Linux >= 5.13): writes only beneath the
    run's directory (and ``/dev/null``), reads only in the view, no TCP (ABI 4+), no signals or
    abstract sockets outside (ABI 6+), no ptrace outside, no mounts.
  * **noexec directory** (root, or unprivileged user namespaces): the run's directory is a ``noexec`` mount (a private tmpfs natively,
    a remount under bubblewrap), so no file the program writes can be mapped executable.
  * **seccomp** (:mod:`.seccomp`, Linux x86-64/arm64) and a new empty **session keyring**: no memfd,
    no writable or anonymous executable memory, no SysV IPC, no keyring, no ``prlimit`` of other
    processes, no ``socket()`` of any address family, no namespaces or mounts (root in process mode: no fork).
  * the in-interpreter **guard** (:mod:`.guard`): no sockets, subprocesses, kill, ``setrlimit``,
    ctypes calls, writes outside, subinterpreters or C test modules; a Python-level layer, not the
    boundary (code without its hook meets the kernel layers above alone).
  * **separate tests** (:mod:`.remote`): with ``tests``, the tests run in another process that gets
    only plain data from the program; its exit status is the verdict. Neither the units nor the
    tests are written to disk, and the tests are never in the program's memory.
  * **cleanup**: a supervisor that is a subreaper (and PID 1 of the namespace under bubblewrap)
    SIGKILLs and reaps every descendant at the end, so no process and no zombie outlives the call.

Honest limits
  * Without bubblewrap and without Landlock, reads are not confined and a program that gets past
    the Python guard can write wherever its uid may (process mode: the caller's files).
  * The memory watchdog polls: a tree can exceed ``memory_mb`` by what it allocates in 10 ms
    (each process is also capped by ``RLIMIT_AS``). Kernel memory (page tables, inodes: bounded by
    the entry count) and pipe buffers are not counted.
  * The tests take from the program only the names the caller declares (``bound_names``) and run
    the task's own helpers (``test_setup``); without a declaration every name the tests use that
    the setup does not define is the program's, so a helper of the program's could see the expected
    answer. The tests cannot be fooled by what the program's objects do, only by what they return.
    Non-Linux POSIX systems get rlimits, the session kill, the guard and the separate tests only.
"""

from dare_code.sandbox.errors import SandboxError
from dare_code.sandbox.isolation import (
    Isolation,
    active_layers,
    bwrap_problem,
    resolve_isolation,
    uid_mode_problem,
)
from dare_code.sandbox.launch import SandboxLimits, SandboxResult, run_python
from dare_code.sandbox.view import DEFAULT_PACKAGES

__all__ = [
    "DEFAULT_PACKAGES",
    "SandboxError",
    "SandboxLimits",
    "SandboxResult",
    "Isolation",
    "active_layers",
    "bwrap_problem",
    "resolve_isolation",
    "uid_mode_problem",
    "run_python",
]
