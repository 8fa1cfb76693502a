"""A POSIX sandbox for untrusted Python (model-written programs), standard library only.

:func:`run_python` runs source units in a fresh process tree and returns a :class:`SandboxResult`;
a program that fails, hangs, forks, allocates or attacks yields a failed result, never an exception.

What every run gets
  * a fresh temporary directory (cwd, ``HOME``, ``TMPDIR``), deleted afterwards;
  * ``python -I -B -X utf8`` (isolated: no ``PYTHON*`` variables, no user site, no script dir on
    ``sys.path``) with a minimal environment (``PATH``, ``HOME``, ``TMPDIR``, ``LANG``, one BLAS thread);
  * stdin ``/dev/null``, stdout/stderr to files (their last 4 KiB are returned), no other descriptors;
  * a new session, under a supervisor that is a *subreaper*: at the wall-clock limit (or when the
    program ends) it SIGKILLs and reaps every descendant, including ones that called ``setsid`` or
    double-forked, so no process and no zombie outlives the call;
  * ``RLIMIT_CPU``, ``RLIMIT_AS``, ``RLIMIT_FSIZE``, ``RLIMIT_CORE = 0`` and a process cap (below);
  * ``no_new_privs`` (no setuid/file-capability gain through ``exec``);
  * Landlock where the kernel has it: writes only beneath the directory (and to ``/dev/null``),
    no TCP connect/bind (ABI 4+), no signals or abstract-socket connections outside (ABI 6+);
  * the in-interpreter guard (:mod:`.guard`): no sockets, no subprocesses/exec, no kill, no
    writes outside the directory, no ctypes calls, no ``setrlimit``; early ``os._exit`` fails.

Isolation modes (:mod:`.isolation`), ``auto`` by default
  * ``uid`` (root on Linux): a private uid/gid per run, no groups, a new network namespace (no usable
    interface; best effort, needs ``CAP_SYS_ADMIN``). ``RLIMIT_NPROC`` is then exact and kernel
    enforced, file permissions apply, other users' processes cannot be signalled. If the interpreter
    is installed where other users cannot read it, the run keeps ``CAP_DAC_READ_SEARCH`` (reads
    anywhere).
  * ``process``: the caller's uid. Non-root: ``RLIMIT_NPROC`` = the user's task count + the cap.
    Root: the kernel ignores ``RLIMIT_NPROC``, so ``os.fork`` is refused by the guard.

Honest limits
  * Reading files is not confined (only writes are). Landlock covers TCP only; UDP, raw and
    path-named Unix sockets are stopped by the network namespace (uid mode with CAP_SYS_ADMIN), by
    uid permissions, and otherwise only by the Python-level guard.
  * Without Landlock, a process-mode program that gets past the Python guard could write wherever
    the calling user can; in uid mode it could still write to world-writable places (``/tmp``).
  * The Python guard is not a boundary against a determined attacker (introspection can reach the
    runner's objects); it cannot stop a program from fooling ``assert``-based tests from inside
    (e.g. returning an object whose ``__eq__`` is always true).
  * Memory is limited as address space per process, not as resident memory of the tree; CPU per
    process. Files written to world-writable places by a uid-mode program that got past the guard
    are not cleaned up. Non-Linux POSIX systems get rlimits, the session kill and the Python guard
    only (no subreaper, namespaces or Landlock).
"""

from dare.rewards.sandbox.errors import SandboxError
from dare.rewards.sandbox.isolation import Isolation, resolve_isolation, uid_mode_problem
from dare.rewards.sandbox.launch import SandboxLimits, SandboxResult, run_python

__all__ = [
    "SandboxError",
    "SandboxLimits",
    "SandboxResult",
    "Isolation",
    "resolve_isolation",
    "uid_mode_problem",
    "run_python",
]
