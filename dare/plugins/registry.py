"""The component registry: what the plugins registered, by kind and name.

An :class:`Entry` is one component: its kind, name, aliases, one-line description (and a model family's
``model_types``), the plugin and distribution that registered it, and its class, imported on first
use of :attr:`Entry.cls` when the plugin registered a lazy ``"module:Class"`` reference (the metadata
then read from the class's source by :func:`declared_in_source`, so it is written once, in the class). A
:class:`Registrar` is the ``register`` callback one plugin's ``register_*`` hook receives
(:mod:`dare.plugins.hookspecs`); :mod:`dare.plugins.manager` discovers the plugins and calls their hooks.
"""

from __future__ import annotations

import ast
import difflib
import functools
import importlib
import importlib.util
import os
import re
import sys
import traceback
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dare.errors import PluginError

if TYPE_CHECKING:  # pragma: no cover
    from dare.components import Component

__all__ = ["HOOK_FOR_KIND", "Entry", "LoadFailure", "Registry", "Registrar", "clear_caches", "declared_in_source"]

#: Component kind -> the hook that registers it (the kinds of :data:`dare.components.KINDS`, same order).
HOOK_FOR_KIND = {
    "model_family": "register_model_families",
    "sampler": "register_samplers",
    "objective": "register_objectives",
    "estimator": "register_estimators",
    "evaluator": "register_evaluators",
    "reward": "register_rewards",
}

_TARGET = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


def _label(kind: str) -> str:
    return kind.replace("_", " ")


def _kind_base(kind: str) -> type[Component]:
    """The base class of ``kind``. :mod:`dare.components` (pydantic) is imported only once a component
    class is registered or loaded, so listing lazy plugins does not pay for it."""
    from dare.components import KINDS

    return KINDS[kind]


_CLASS_ATTRS = ("name", "aliases", "model_types")


def _module_file(module: str, roots=()) -> str | None:
    """The source file of ``module`` without importing it or its parent packages: under one of ``roots``
    (source folders of a plugin that is not installed), or under its top-level package's folder."""
    loaded = sys.modules.get(module)
    if loaded is not None and getattr(loaded, "__file__", None):
        return loaded.__file__
    parts = module.split(".")
    for base in tuple(map(str, roots)) or _package_parents(parts[0]):
        stem = os.path.join(base, *parts)
        for path in (stem + ".py", os.path.join(stem, "__init__.py")):
            if os.path.isfile(path):
                return path
    return None


@functools.lru_cache(maxsize=None)
def _package_parents(top: str) -> tuple[str, ...]:
    """The folders holding the top-level package or module ``top`` (found, not imported; cached per process)."""
    try:
        spec = importlib.util.find_spec(top)  # a top-level name: finds, imports nothing
    except (ImportError, ValueError):
        return ()
    if spec is None:
        return ()
    if spec.submodule_search_locations is None:
        return (os.path.dirname(spec.origin),) if spec.origin else ()
    return tuple(os.path.dirname(d) for d in spec.submodule_search_locations)


@functools.lru_cache(maxsize=128)
def _source(path: str, mtime_ns: int) -> str:
    """A module's source text (cached per process while the file is unchanged: modules hold several classes)."""
    with open(path, encoding="utf-8") as f:
        return f.read()


def clear_caches() -> None:
    """Forget where packages were found (after installing a plugin in-process; :func:`dare.plugins.manager.reset`)."""
    _package_parents.cache_clear()


_BLOCK_END = re.compile(r"^[^\s#)\]}]", re.M)  # a top-level statement: the class block ended
_FIRST_METHOD = re.compile(r"^[ \t]+(?:@|def |async def |class )", re.M)  # the attributes precede it


def _class_node(text: str, cls: str) -> ast.ClassDef | None:
    """The top-level ``class cls`` of a module's source. Only the block's head (up to its first method) is
    parsed, then, if that does not parse or assigns no ``name``, the block, then the module: a few lines
    per class, so listing every component stays quick."""
    at = next((i + 1 for i in (text.find(f"\nclass {cls}{c}") for c in "(:") if i >= 0), -1)
    if text.startswith((f"class {cls}(", f"class {cls}:")):
        at = 0
    if at < 0:
        return None
    end = _BLOCK_END.search(text, text.find("\n", at) + 1 or len(text))
    block = text[at: end.start() if end else len(text)]
    first_method = _FIRST_METHOD.search(block)
    for source in (block[: first_method.start()] if first_method else None, block, text):
        if source is None:
            continue
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls), None)
        if node is not None and (source is text or "name" in _assignments(node)):
            return node
    return None


def _assignments(node: ast.ClassDef) -> dict[str, ast.expr]:
    """``attribute -> value expression`` of the plain assignments in a class body (``x = ...``, ``x: T = ...``)."""
    out = {}
    for stmt in node.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            out[stmt.targets[0].id] = stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            out[stmt.target.id] = stmt.value
    return out


def declared_in_source(target: str, roots=()) -> dict[str, Any]:
    """A component's ``name``, ``aliases``, ``model_types`` and one-line ``description`` read from its class's
    source, without importing the module: the literals the class body assigns and its docstring's first line
    (what :attr:`Component.name <dare.components.Component.name>` and ``Component.description()`` give once
    imported). ``model_types`` is ``None`` when the body assigns none; ``aliases`` then ``()``.

    :param target: ``"package.module:ClassName"`` of a class defined at module level.
    :param roots: source folders to look in first (a plugin that is not installed).
    :raises TypeError: the module or class is not found, or the body assigns no literal ``name``; the
        message says to write ``name = "..."`` in the class body.
    """
    module, _, cls = target.partition(":")
    path = _module_file(module, roots)
    node = _class_node(_source(path, os.stat(path).st_mtime_ns), cls) if path is not None else None
    if node is None:
        raise TypeError(f"{target}: no module-level class {cls} found in the source of {module} "
                        f"({path or 'module not found'}); check the 'module:Class' path")
    values: dict[str, Any] = {}
    for key, value in _assignments(node).items():
        if key in _CLASS_ATTRS:
            try:
                values[key] = ast.literal_eval(value)
            except (ValueError, TypeError, SyntaxError):
                raise TypeError(f"{target}: {key} must be a literal in the class body (it is read without "
                                "importing the module)") from None
    if not (isinstance(values.get("name"), str) and values["name"]):
        raise TypeError(f"{target}: the class body assigns no name; write name = \"...\" in class {cls} "
                        "(its spec name, read without importing the module)")
    doc = ast.get_docstring(node) or ""
    types = values.get("model_types")
    return {"name": values["name"], "aliases": tuple(values.get("aliases", ())),
            "description": doc.strip().split("\n")[0] if doc.strip() else "",
            "model_types": None if types is None else tuple(types)}


@dataclass(eq=False)
class Entry:
    """A registered component: what it is, where it came from, and its class (imported on first use).

    ``target`` is the class's ``"module:QualName"``. A lazily registered component is known by the
    metadata read from its class's source (:func:`declared_in_source`) or given in the register call
    (``aliases``, one-line ``description``, a family's ``model_types``; ``None`` = not declared, read from
    the class) until :attr:`cls` imports it.
    """

    kind: str
    name: str
    distribution: str
    version: str
    plugin: str
    target: str
    aliases: tuple[str, ...] = ()
    description: str = ""
    model_types: tuple[str, ...] | None = None
    _cls: type[Component] | None = field(default=None, repr=False)
    _error: PluginError | None = field(default=None, repr=False)

    @property
    def loaded(self) -> bool:
        """Whether the component class has been imported."""
        return self._cls is not None

    @property
    def cls(self) -> type[Component]:
        """The component class, imported from ``target`` on first access and checked against what the
        plugin declared (kind, name, aliases, model types).

        :raises PluginError: the module does not import, has no such class, or the class disagrees
            with its registration; the message names the plugin and its distribution.
        """
        if self._cls is None:
            if self._error is not None:
                raise self._error
            try:
                self._cls = self._import()
            except PluginError as exc:
                self._error = exc
                raise
        return self._cls

    def create(self, params: Any = None) -> Component:
        """Instantiate with validated params (a ``Params`` instance or a dict).

        :raises PluginError: the class cannot be imported (see :attr:`cls`).
        """
        return self.cls(params)

    def _where(self) -> str:
        return f"the {_label(self.kind)} {self.name!r} of plugin {self.plugin} ({self.distribution} {self.version})"

    def _import(self) -> type[Component]:
        module_name, _, qualname = self.target.partition(":")
        try:
            obj: Any = importlib.import_module(module_name)
            for part in qualname.split("."):
                obj = getattr(obj, part)
        except Exception as exc:  # noqa: BLE001 - any import-time error of a plugin's module
            raise PluginError(
                f"could not import {self._where()} from {self.target}: {type(exc).__name__}: {exc}; "
                f"reinstall or fix {self.distribution}, or uninstall it "
                "(`dare plugins --check` lists every such failure)"
            ) from exc
        base = _kind_base(self.kind)
        if not (isinstance(obj, type) and issubclass(obj, base)):
            raise PluginError(f"{self._where()} names {self.target}, which is not a {base.__name__} subclass")
        declared = {"name": self.name, "aliases": set(self.aliases)}
        found = {"name": obj.name, "aliases": set(obj.aliases)}
        if self.model_types is not None:
            declared["model_types"] = set(self.model_types)
            found["model_types"] = set(getattr(obj, "model_types", ()))
        for key, want in declared.items():
            if found[key] != want:
                raise PluginError(
                    f"{self._where()} is registered with {key} {_show(want)} but its class {self.target} has "
                    f"{key} {_show(found[key])}; write {key} as a literal in the class body (read without importing "
                    "it), or make the plugin's register() call and the class agree"
                )
        return obj


def _show(value) -> str:
    return repr(sorted(value)) if isinstance(value, set) else repr(value)


@dataclass(frozen=True)
class LoadFailure:
    """A plugin that could not be imported, whose ``register_*`` hook raised, or (``component`` set,
    as ``"kind name"``) one of whose lazily registered components could not be imported."""

    plugin: str
    distribution: str
    error: str
    detail: str = ""
    component: str = ""


@dataclass
class Registry:
    """Components by kind and name, plus plugin load failures."""

    entries: dict[str, dict[str, Entry]] = field(default_factory=lambda: {k: {} for k in HOOK_FOR_KIND})
    aliases: dict[str, dict[str, str]] = field(default_factory=lambda: {k: {} for k in HOOK_FOR_KIND})
    failures: list[LoadFailure] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    plugins: dict[str, tuple[str, str]] = field(default_factory=dict)  # plugin -> (dist, version)
    #: ``(kind, name) -> distribution`` of a plugin that would register ``name`` but is not loaded, or ``None``
    #: (:func:`dare.plugins.manager.provider_of`); asked only for the unknown-name error.
    provider: Callable[[str, str], str | None] | None = field(default=None, repr=False)

    def names(self, kind: str) -> list[str]:
        return sorted(self.entries[kind])

    def all(self) -> list[Entry]:
        return [e for kind in HOOK_FOR_KIND for e in sorted(self.entries[kind].values(), key=lambda e: e.name)]

    def find(self, kind: str, name: str) -> Entry | None:
        name = self.aliases[kind].get(name, name)
        return self.entries[kind].get(name)

    def get(self, kind: str, name: str) -> Entry:
        """The entry for ``name`` (its class is not imported yet).

        :raises PluginError: unknown name; the message lists installed names and a close match.
        """
        entry = self.find(kind, name)
        if entry is None:
            raise PluginError(self.unknown_message(kind, name))
        return entry

    def unknown_message(self, kind: str, name: str) -> str:
        """The error for a ``kind`` named ``name`` that no loaded plugin registers: the plugin that brings it
        (asked of :attr:`provider`: a plugin installed but not loaded, or one of the DARE checkout's plugins),
        else the installed names, a close match and the plugins that failed to load."""
        installed = self.names(kind)
        msg = f"unknown {_label(kind)} {name!r}; installed: {', '.join(installed) or '(none)'}"
        dist = self.provider(kind, name) if self.provider is not None else None
        if dist is not None:
            return (f"{_label(kind)} {name!r} is provided by the plugin {dist}, which is not installed or not loaded: "
                    f"`pip install {dist}` (in a DARE checkout: `pip install -e plugins/{dist}`; `make install` "
                    f"installs every first-party plugin), and check DARE_LOAD_PLUGINS; {msg}")
        close = difflib.get_close_matches(name, installed + list(self.aliases[kind]), n=1)
        if close:
            msg += f" (did you mean {close[0]!r}?)"
        failed = [f.plugin for f in self.failures]
        if failed:
            msg += f"; plugins that failed to load: {', '.join(dict.fromkeys(failed))} (run `dare plugins`)"
        return msg

    def restricted(self, distributions) -> Registry:
        """A copy holding only the components of ``distributions`` (names of installed distributions)."""
        keep = set(distributions)
        out = Registry(failures=list(self.failures), conflicts=list(self.conflicts), provider=self.provider)
        for kind in HOOK_FOR_KIND:
            out.entries[kind] = {n: e for n, e in self.entries[kind].items() if e.distribution in keep}
            out.aliases[kind] = {a: n for a, n in self.aliases[kind].items() if n in out.entries[kind]}
        out.plugins = {p: dv for p, dv in self.plugins.items() if dv[0] in keep}
        return out

    def family_for_model_type(self, model_type: str) -> Entry | None:
        """The model family that loads ``model_type``: by the declared ``model_types``, importing only
        families that declared none."""
        for entry in self.entries["model_family"].values():
            types = entry.model_types if entry.model_types is not None else getattr(entry.cls, "model_types", ())
            if model_type in types:
                return entry
        return None

    def load_all(self, kind: str | None = None) -> list[LoadFailure]:
        """Import every component (of ``kind``) now; components that fail to import are added to
        :attr:`failures` (once each) and returned, the others stay usable."""
        new = []
        for k in [kind] if kind else list(HOOK_FOR_KIND):
            for entry in sorted(self.entries[k].values(), key=lambda e: e.name):
                try:
                    entry.cls
                except PluginError as exc:
                    failure = LoadFailure(entry.plugin, entry.distribution, str(exc),
                                          "".join(traceback.format_exception(exc)), f"{k} {entry.name}")
                    if failure.component not in {f.component for f in self.failures}:
                        self.failures.append(failure)
                        new.append(failure)
        return new


class Registrar:
    """The ``register`` callback that one plugin's ``register_<kind>`` hook receives (see
    :mod:`dare.plugins.hookspecs`): records components of ``kind`` attributed to ``plugin``/``dist``."""

    def __init__(self, reg: Registry, kind: str, plugin: str, dist: str, version: str, source_roots=()):
        self.reg, self.kind, self.plugin, self.dist, self.version = reg, kind, plugin, dist, version
        self.source_roots = tuple(source_roots)  # where a plugin that is not installed keeps its modules

    def __repr__(self) -> str:  # shown by DARE_TRACE_PLUGINS=1
        return f"<register {_label(self.kind)} for plugin {self.plugin} ({self.dist} {self.version})>"

    def __call__(self, component, /, *, name: str | None = None, description: str = "",
                 aliases=(), model_types=None) -> None:
        """Register ``component``: a component class, or its ``"module:Class"`` path.

        A path alone is the usual form: the name, aliases, model types and description are read from the
        class's source (:func:`declared_in_source`), so they are written once, in the class. A class whose
        metadata is not literal in its body may give it here instead (``name=`` with ``description=``,
        ``aliases=``, ``model_types=``); the class must agree when imported.

        :raises TypeError: a class that is not a subclass of the kind's base or has no name; a path
            that is not ``"module:Class"``, whose class body assigns no literal name (and no ``name=``),
            or with metadata the kind has not.
        """
        where = f"{self.plugin}: register() for {_label(self.kind)}"
        if isinstance(component, str):
            if not _TARGET.fullmatch(component):
                raise TypeError(f"{where} takes a class or a 'package.module:ClassName' string, got {component!r}")
            if name is None:
                if description or aliases or model_types is not None:
                    raise TypeError(f"{where} {component!r}: give name= with the other metadata, or none of it "
                                    "(then all of it is read from the class)")
                try:
                    meta = declared_in_source(component, self.source_roots)
                except TypeError as exc:
                    raise TypeError(f"{where} {exc}") from None
                name, aliases, description = meta["name"], meta["aliases"], meta["description"]
                model_types = meta["model_types"] if self.kind == "model_family" else None
            if not (isinstance(name, str) and name):
                raise TypeError(f"{where} {component!r}: give the component's name=")
            if isinstance(aliases, str) or not all(isinstance(a, str) for a in aliases):
                raise TypeError(f"{where} {component!r}: aliases= takes a tuple of names")
            if model_types is not None:
                if self.kind != "model_family":
                    raise TypeError(f"{where} {component!r}: model_types= is for model families only")
                if isinstance(model_types, str) or not all(isinstance(t, str) for t in model_types):
                    raise TypeError(f"{where} {component!r}: model_types= takes a tuple of model_type names")
                model_types = tuple(model_types)
            entry = Entry(self.kind, name, self.dist, self.version, self.plugin, component, tuple(aliases),
                          (description or "").strip().split("\n")[0], model_types)
        else:
            if name is not None or description or aliases or model_types is not None:
                raise TypeError(f"{where} {component!r}: a registered class carries its own name and metadata; "
                                "pass only the class (or a 'module:Class' string with the metadata)")
            base = _kind_base(self.kind)
            if not (isinstance(component, type) and issubclass(component, base)):
                raise TypeError(f"{where} takes a {base.__name__} subclass, got {component!r}")
            if not component.name:
                raise TypeError(f"{self.plugin}: {component.__name__} has no name")
            types = tuple(component.model_types) if self.kind == "model_family" else None
            entry = Entry(self.kind, component.name, self.dist, self.version, self.plugin,
                          f"{component.__module__}:{component.__qualname__}", tuple(component.aliases),
                          component.description(), types, _cls=component)
        self._add(entry)

    def _add(self, entry: Entry) -> None:
        reg, kind = self.reg, self.kind
        for key in (entry.name, *entry.aliases):
            existing = reg.find(kind, key)
            if existing is not None:
                reg.conflicts.append(
                    f"two plugins register a {_label(kind)} named {key!r}: "
                    f"{existing.distribution} ({existing.plugin}) and {entry.distribution} ({entry.plugin}); "
                    "uninstall one of them"
                )
                return
        reg.entries[kind][entry.name] = entry
        for alias in entry.aliases:
            reg.aliases[kind][alias] = entry.name
