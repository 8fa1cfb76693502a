"""In-interpreter guard for untrusted code: a PEP 578 audit hook plus exit interception (stdlib only).

:func:`install` is called by the sandbox runner right before the untrusted program runs. From then
on, in this interpreter and in every process it forks:

* network: every ``socket.*`` event (creating a socket, ``connect``, ``bind``, name lookups) raises
  ``PermissionError``;
* other programs: ``subprocess.Popen``, ``os.system``, ``os.exec*``, ``os.posix_spawn*``,
  ``os.spawn*``, ``os.forkpty`` and ``pty.spawn`` are refused, and ``_posixsubprocess.fork_exec``
  (which raises no audit event) is replaced by a refusing function and cannot be re-imported;
  ``os.fork`` too when ``block_fork`` (used where the kernel does not enforce ``RLIMIT_NPROC``, i.e.
  when running as root);
* signals and limits: ``os.kill``, ``os.killpg``, ``resource.setrlimit`` and ``resource.prlimit``
  are refused;
* files: opening for writing/appending/creating/truncating, and ``os.remove``, ``rmdir``,
  ``mkdir``, ``rename``, ``link``, ``symlink``, ``chmod``, ``chown``, ``truncate``, ``utime``,
  ``setxattr``, ``removexattr``, ``sqlite3.connect`` and ``dbm.open`` are refused unless every path
  involved resolves (symlinks followed) beneath the sandbox directory; ``/dev/null`` may be written;
* ``ctypes``: every event but ``ctypes.dlopen`` (so libraries that import ctypes still load, but
  no foreign function can be called or memory read by address);
* tampering: replacing the hook's own ``__code__``, ``__defaults__`` or ``__kwdefaults__`` is
  refused (it keeps its configuration and helpers in its defaults);
* subinterpreters and C test modules: importing ``_xxsubinterpreters``, ``_interpreters``,
  ``_xxinterpchannels`` (a subinterpreter starts without this hook), ``_testcapi`` or
  ``_testinternalcapi`` (raw memory and interpreter internals), by name or by spec through
  ``_imp.create_dynamic``, and the ``cpython.PyInterpreterState_New`` event (any new interpreter);
* exits: ``os._exit`` raises ``SystemExit`` instead, so an early exit counts as a failure.

This is a *Python-level* guard: it stops accidents and ordinary attempts, not a determined attacker
with introspection (e.g. ``dir_fd``-relative calls, monkeypatching ``posixpath``, interpreter
bugs). It is one layer, not the boundary: the kernel layers of the sandbox (rlimits, uid,
namespaces, Landlock, seccomp, the task cap) are the boundary, and they also hold for code that runs
without this hook (native code, a subinterpreter, a re-executed interpreter); see
:mod:`dare_code.sandbox`. Event names: the CPython audit events table
(https://docs.python.org/3/library/audit_events.html).
"""

from __future__ import annotations

import _imp
import _posixsubprocess
import os
import posix
import sys
import types

__all__ = ["install"]

_DENIED = frozenset(
    {
        "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.forkpty", "pty.spawn",
        "os.kill", "os.killpg", "resource.setrlimit", "resource.prlimit", "os.startfile", "webbrowser.open",
    }
)
_DENIED_PREFIXES = ("socket.", "ctypes.")
#: subinterpreters (they start without this interpreter's audit hooks) and CPython's C test modules
#: (raw memory access and interpreter internals); 3.11 to 3.13 names
_DENIED_MODULES = frozenset(
    {"_xxsubinterpreters", "_interpreters", "_xxinterpchannels", "_interpchannels", "_interpqueues",
     "_testcapi", "_testinternalcapi", "_testmultiphase", "_testsinglephase", "_testclinic", "_testimportmultiple"}
)
_ALLOWED = frozenset({"ctypes.dlopen"})
_FIRST_PATH = frozenset(
    {
        "os.remove", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.chflags", "os.lchflags", "os.truncate",
        "os.utime", "os.setxattr", "os.removexattr", "sqlite3.connect", "dbm.open",
    }
)
_BOTH_PATHS = frozenset({"os.rename", "os.link"})
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _paths_of(event: str, args: tuple) -> tuple:
    """The paths an event modifies (empty when it modifies none or only by file descriptor)."""
    if event == "open":
        path, mode, flags = args
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & _WRITE_FLAGS
        )
        return (path,) if writing else ()
    if event in _FIRST_PATH:
        return () if event == "sqlite3.connect" and args[0] in (":memory:", "") else (args[0],)
    if event in _BOTH_PATHS:
        return (args[0], args[1])
    if event == "os.symlink":
        return (args[1],)
    return ()


def _make_hook(root: str, block_fork: bool):
    """The audit hook; all state and helpers are bound as defaults so later monkeypatching cannot
    reach them, and it refuses changes to a function that runs its own (immutable) code object."""
    own_code = next(c for c in _make_hook.__code__.co_consts if isinstance(c, types.CodeType) and c.co_name == "hook")

    def hook(
        event,
        args,
        _root=root.rstrip("/") + "/",
        _block_fork=block_fork,
        _denied=_DENIED,
        _prefixes=_DENIED_PREFIXES,
        _allowed=_ALLOWED,
        _modules=_DENIED_MODULES,
        _paths_of=_paths_of,
        _realpath=os.path.realpath,
        _fsdecode=os.fsdecode,
        _isinstance=isinstance,
        _function=types.FunctionType,
        _own_code=own_code,
        _error=PermissionError,
    ):
        if event in _allowed:
            return
        if event in _denied or event.startswith(_prefixes) or (_block_fork and event == "os.fork"):
            raise _error(f"sandbox: {event} is not allowed")
        if event == "import" and args[0] == "_posixsubprocess":
            raise _error("sandbox: re-importing _posixsubprocess is not allowed")
        if event == "import" and str(args[0]).split(".")[0] in _modules:
            raise _error(f"sandbox: importing {args[0]} is not allowed")
        if event == "cpython.PyInterpreterState_New":
            raise _error("sandbox: creating a subinterpreter is not allowed")
        if event == "object.__setattr__" and _isinstance(args[0], _function) and args[0].__code__ is _own_code:
            raise _error("sandbox: changing the guard is not allowed")
        for path in _paths_of(event, args):
            if _isinstance(path, int):
                continue
            real = _realpath(_fsdecode(path))
            if real != "/dev/null" and not (real + "/").startswith(_root):
                raise _error(f"sandbox: {event} outside the sandbox directory ({real}) is not allowed")

    return hook


def _refuse_exit(status=0):
    raise SystemExit(f"sandbox: os._exit({status}) is not allowed")


def _refuse_fork_exec(*args, **kwargs):
    raise PermissionError("sandbox: starting programs is not allowed")


def _guard_extension_loader(create_dynamic):
    """``_imp.create_dynamic`` that refuses the :data:`_DENIED_MODULES` (loading an extension module by
    spec raises no ``import`` event)."""

    def create(spec, *args, _create=create_dynamic, _denied=_DENIED_MODULES, _error=PermissionError):
        if str(getattr(spec, "name", "")).split(".")[0] in _denied:
            raise _error(f"sandbox: importing {spec.name} is not allowed")
        return _create(spec, *args)

    return create


def install(root: str, block_fork: bool) -> None:
    """Install the guard for this interpreter (irreversible).

    :param root: the sandbox directory (writes are allowed beneath it).
    :param block_fork: also refuse ``os.fork``.
    """
    sys.addaudithook(_make_hook(os.path.realpath(root), block_fork))
    os._exit = posix._exit = _refuse_exit
    _posixsubprocess.fork_exec = _refuse_fork_exec
    _imp.create_dynamic = _guard_extension_loader(_imp.create_dynamic)
    for name in _DENIED_MODULES:  # already loaded by the interpreter before the hook: not reachable by name
        sys.modules.pop(name, None)
