"""Tests in one process, the program in another: the program cannot see, skip or forge its tests.

The sandbox runs a program that has tests in two processes (see :mod:`.runner`):

* the **program process** runs the program's units, then :func:`serve`: it answers the tests'
  requests (call this function, read this attribute, iterate this object) with plain data
  (:mod:`.wire`);
* the **test process** runs the setup units (the reward's standard-library prelude) and then the
  tests (:func:`run_tests`). Every name the tests use that the program defined (or redefined)
  is bound to a :class:`Remote` (functions, classes, other objects), to a copy of its value (plain
  data), or to the same standard-library module imported here.

A name that shadows a built-in or a setup name (``abs``, ``set``, ``math``) is taken from the
program only when it is an entry point (the function under test). Helpers the tests call (HumanEval/38's
``encode_cyclic``, /32's ``poly``) are trusted code of the task, run here (a setup unit only this
process runs); with a declared list of names (``bound``) nothing else is taken from the program, so
the expected answer never reaches a function of the program's making. An exception a program's
function raises fails the test: ``StopIteration``/``StopAsyncIteration`` arrive as ``RuntimeError``
(PEP 479 style), so they cannot end the test's own ``map``/``filter`` loop early. The test process never receives
anything but plain data, so the verdict (its exit status, read by
the supervisor) depends only on what the program's functions return: exiting early, raising
``SystemExit``, patching ``builtins``, walking frames to the runner or the tests, or returning an
object whose ``__eq__`` is always true cannot make a test pass. The tests are never in the program
process's memory or files. Semantics that change compared with running both in one namespace:
arguments are copies (a function that mutates its argument is not seen to), and the tests see the
program's globals as they were when the tests started. A :class:`Remote` compares equal only to
itself. Standard library only (loaded by file path by the runner).
"""

from __future__ import annotations

import ast
import builtins
import importlib
import sys
import traceback
import types

__all__ = ["serve", "run_tests", "Remote", "ProgramGone", "RemoteError", "EXIT_TESTS_FAILED", "EXIT_NO_PROGRAM"]

#: exit status of the test process when a test failed (raised)
EXIT_TESTS_FAILED = 1
#: exit status of the test process when the program never became ready (it raised, exited or hung)
EXIT_NO_PROGRAM = 3
#: modules the tests never get by name from the program's namespace (they open windows or browsers,
#: or print on import); others only if they are standard-library or allowed packages
_NEVER_IMPORT = frozenset({"antigravity", "this", "webbrowser", "turtle", "turtledemo", "tkinter", "idlelib", "pydoc"})


def _wire():
    """The sibling :mod:`.wire` module, however this module was loaded (package or file path)."""
    return sys.modules.get("_dare_sandbox_wire") or importlib.import_module("dare_code.sandbox.wire")


_WIRE = _wire()


# -------------------------------------------------------------------------------- program side
def serve(namespace: dict, baseline: dict[str, int], request_fd: int, reply_fd: int) -> None:
    """Answer the test process's requests until it closes its end (runs in the program process).

    :param namespace: the program's globals.
    :param baseline: ``{name: id(object)}`` of ``namespace`` before the program ran (after the
        setup units): names whose object is unchanged are the test process's own.
    """
    wire = _WIRE
    table: dict[int, object] = {}
    ids: dict[int, int] = {}

    def refer(obj) -> int:
        key = id(obj)
        if key in ids and table[ids[key]] is obj:
            return ids[key]
        n = len(table) + 1
        table[n] = obj
        ids[key] = n
        return n

    def resolve(n, _type_name):
        return table[n]

    while True:
        message = wire.receive(request_fd)
        if message is None:
            return
        try:
            reply = ["ok", _perform(message, namespace, baseline, resolve, refer, wire)]
        except BaseException as exc:  # noqa: BLE001 - the program's failures go back to the tests
            try:
                reply = ["x", type(exc).__name__[:100], str(exc)[:2000]]
            except BaseException:  # noqa: BLE001 - e.g. a __str__ that raises
                reply = ["x", "Exception", "(unprintable exception)"]
        try:
            wire.send(reply_fd, reply)
        except wire.WireError as exc:
            wire.send(reply_fd, ["x", "ValueError", str(exc)])


def _exports(names, namespace: dict, baseline: dict[str, int], refer, wire) -> dict:
    out = {}
    for name in names:
        if type(name) is not str or name not in namespace or baseline.get(name) == id(namespace[name]):
            continue
        value = namespace[name]
        if isinstance(value, types.ModuleType):
            out[name] = ["m", str(value.__name__)]
        else:
            out[name] = ["v", wire.encode(value, refer)]
    return out


def _perform(message, namespace, baseline, resolve, refer, wire):
    op = message[0]
    if op == "names":
        return _exports(message[1], namespace, baseline, refer, wire)
    target = resolve(message[1], "")
    if op == "call":
        args = [wire.decode(a, resolve) for a in message[2]]
        kwargs = {k: wire.decode(v, resolve) for k, v in message[3].items()}
        value = target(*args, **kwargs)
    elif op == "getattr":
        value = getattr(target, message[2])
    elif op == "iter":
        value = iter(target)
    elif op == "next":
        value = next(target)
    elif op == "len":
        value = len(target)
    elif op == "getitem":
        value = target[wire.decode(message[2], resolve)]
    elif op == "contains":
        value = wire.decode(message[2], resolve) in target
    elif op == "bool":
        value = bool(target)
    elif op == "str":
        value = str(target)
    else:
        raise ValueError(f"unknown request {op!r}")
    return wire.encode(value, refer)


# ----------------------------------------------------------------------------------- test side
#: exceptions that end an iteration in the test process: from the program they fail the test instead
_ITERATION_ENDS = (StopIteration, StopAsyncIteration)


class ProgramGone(Exception):
    """The program's process ended or sent something that is not a well-formed reply."""


class RemoteError(Exception):
    """The program raised an exception that is not a built-in exception type."""


class _Link:
    def __init__(self, request_fd: int, reply_fd: int):
        self.request_fd, self.reply_fd = request_fd, reply_fd
        self.wire = _WIRE

    def _refer(self, obj) -> int:
        if isinstance(obj, Remote):
            return object.__getattribute__(obj, "_id")
        raise TypeError(f"a {type(obj).__name__} cannot be passed to the program (plain data only)")

    def encode(self, value):
        return self.wire.encode(value, self._refer)

    def decode(self, value):
        return self.wire.decode(value, lambda n, type_name: Remote(self, n, type_name))

    def request(self, message):
        try:
            self.wire.send(self.request_fd, message)
            reply = self.wire.receive(self.reply_fd)
        except (OSError, self.wire.WireError) as exc:
            raise ProgramGone(f"the program's process failed to answer: {exc}") from None
        if reply is None:
            raise ProgramGone("the program's process ended")
        if type(reply) is list and len(reply) == 2 and reply[0] == "ok":
            try:
                return reply[1] if message[0] == "names" else self.decode(reply[1])
            except self.wire.WireError as exc:
                raise ProgramGone(str(exc)) from None
        if type(reply) is list and len(reply) == 3 and reply[0] == "x" and all(type(p) is str for p in reply[1:]):
            cls = getattr(builtins, reply[1], None)
            if cls in _ITERATION_ENDS and message[0] != "next":
                # PEP 479 style: a StopIteration out of the program's function would end the test's
                # own map()/filter()/next() loop early (all([]) is True); it fails the test instead
                raise RuntimeError(f"the program raised {reply[1]}: {reply[2]}")
            if isinstance(cls, type) and issubclass(cls, Exception) and cls is not ProgramGone:
                raise cls(reply[2])
            raise RemoteError(f"{reply[1]}: {reply[2]}")
        raise ProgramGone("the program's process sent a malformed reply")


class Remote:
    """An object that lives in the program's process (a function, class, instance, iterator).

    Calls, attribute reads (not dunder names), iteration, ``len``, indexing, ``in``, ``bool`` and
    ``str`` are forwarded and answered with plain data or further remotes; it is equal and hashes
    only as itself (so the program cannot make it compare equal to an expected value).
    """

    __slots__ = ("_link", "_id", "_type")

    def __init__(self, link: _Link, n: int, type_name: str):
        object.__setattr__(self, "_link", link)
        object.__setattr__(self, "_id", n)
        object.__setattr__(self, "_type", type_name)

    def _ask(self, op: str, *rest):
        return self._link.request([op, self._id, *rest])

    def __call__(self, *args, **kwargs):
        link = self._link
        return self._ask("call", [link.encode(a) for a in args], {str(k): link.encode(v) for k, v in kwargs.items()})

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return self._ask("getattr", name)

    def __iter__(self):
        iterator = self._ask("iter")
        if not isinstance(iterator, Remote):
            yield from iter(iterator)
            return
        while True:
            try:
                item = iterator._ask("next")
            except StopIteration:
                return
            yield item

    def __len__(self) -> int:
        n = self._ask("len")
        if type(n) is not int or n < 0:
            raise TypeError("len() of a program object returned a non-integer")
        return n

    def __getitem__(self, key):
        return self._ask("getitem", self._link.encode(key))

    def __contains__(self, item) -> bool:
        return self._ask("contains", self._link.encode(item)) is True

    def __bool__(self) -> bool:
        return self._ask("bool") is True

    def __str__(self) -> str:
        text = self._ask("str")
        return text if type(text) is str else repr(self)

    def __repr__(self) -> str:
        return f"<program {self._type} object #{self._id}>"

    def __eq__(self, other) -> bool:
        return self is other

    def __ne__(self, other) -> bool:
        return self is not other

    def __hash__(self) -> int:
        return hash((Remote, self._id))


def _module(name: str, packages: frozenset):
    top = name.split(".")[0]
    if top in _NEVER_IMPORT or not (top in sys.stdlib_module_names or top in packages):
        raise ImportError(f"module {name!r} is not available to the tests")
    return importlib.import_module(name)


def _bindable(tree: ast.AST, namespace: dict, entry_points: frozenset, bound: frozenset | None = None) -> list[str]:
    """The names the tests use that the program may provide: not dunder names, and not built-in or
    setup names unless they are entry points (so a program cannot replace ``abs`` or ``set`` under
    its tests, while a task whose function is called ``sum`` still works); with ``bound``, only
    those (the task's declared names: a helper the tests call is never the program's)."""
    names = []
    for name in sorted({n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}):
        if name.startswith("__") or (bound is not None and name not in bound):
            continue
        if name in entry_points or not (hasattr(builtins, name) or name in namespace):
            names.append(name)
    return names


def run_tests(
    setup: list[tuple[str, str]],
    tests: tuple[str, str],
    request_fd: int,
    reply_fd: int,
    entry_points: frozenset = frozenset(),
    packages: frozenset = frozenset(),
    bound: frozenset | None = None,
) -> int:
    """Run the setup units and the tests against the program (runs in the test process).

    :param setup: ``(file name, source)`` units run first: the shared setup (the program runs it
        too), then trusted code of the task that only this process runs (the helpers its tests call,
        e.g. HumanEval/38's ``encode_cyclic`` from the prompt): names they define are never the program's.
    :param tests: ``(file name, source)`` of the tests.
    :param entry_points: names the program may provide even where they shadow a built-in or a
        setup name (the function under test, e.g. MBPP's ``sum``).
    :param packages: third-party top-level modules the tests may receive from the program's
        namespace (besides the standard library).
    :param bound: the only names the program provides (the task's entry points and declared
        names); None: every name the tests use that neither a built-in nor the setup defines.
    :returns: the exit status: 0 every test ran to completion, :data:`EXIT_TESTS_FAILED` one raised
        (its traceback is on stderr), :data:`EXIT_NO_PROGRAM` the program never became ready.
    """
    link = _Link(request_fd, reply_fd)
    namespace = {"__name__": "__tests__", "__builtins__": builtins}
    for name, source in setup:
        exec(compile(source, name, "exec"), namespace)
    tree = compile(tests[1], tests[0], "exec", ast.PyCF_ONLY_AST)
    code = compile(tree, tests[0], "exec")
    wanted = _bindable(tree, namespace, frozenset(entry_points), None if bound is None else frozenset(bound))
    try:
        ready = link.wire.receive(reply_fd)
    except (OSError, link.wire.WireError):
        ready = None
    if ready != ["ready"]:
        return EXIT_NO_PROGRAM
    try:
        exports = link.request(["names", wanted])
        if type(exports) is not dict:
            raise ProgramGone("the program's process sent a malformed name list")
        for name in wanted:
            if name in exports:
                kind, value = exports[name]
                namespace[name] = _module(value, frozenset(packages)) if kind == "m" else link.decode(value)
        exec(code, namespace)
    except BaseException:  # noqa: BLE001 - any failure is a failed test
        try:
            traceback.print_exc(limit=-6)
        except BaseException:  # noqa: BLE001
            pass
        return EXIT_TESTS_FAILED
    return 0
