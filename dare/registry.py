"""The component registry: what the plugins registered, by kind and name.

An :class:`Entry` is one component: its kind, name, aliases, one-line description (and a model family's
``model_types``), the plugin and distribution that registered it, and its class, imported on first
use of :attr:`Entry.cls` when the plugin registered a lazy ``"module:Class"`` reference. A
:class:`Registrar` is the ``register`` callback one plugin's ``register_*`` hook receives
(:mod:`dare.hookspecs`); :mod:`dare.plugins` discovers the plugins and calls their hooks.
"""

from __future__ import annotations

import difflib
import importlib
import re
import traceback
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dare.errors import PluginError

if TYPE_CHECKING:  # pragma: no cover
    from dare.components import Component

__all__ = ["HOOK_FOR_KIND", "PROVIDERS", "Entry", "LoadFailure", "Registry", "Registrar"]

#: Component kind -> the hook that registers it (the kinds of :data:`dare.components.KINDS`, same order).
HOOK_FOR_KIND = {
    "model_family": "register_model_families",
    "sampler": "register_samplers",
    "objective": "register_objectives",
    "estimator": "register_estimators",
    "evaluator": "register_evaluators",
    "reward": "register_rewards",
}

#: Well-known components of DARE's first-party plugins: ``(kind, name) -> distribution``. When a spec names
#: one that is not installed, the unknown-name error says which distribution brings it back.
PROVIDERS: dict[tuple[str, str], str] = {
    **{("reward", n): "dare-plugin-code" for n in ("code",)},
    **{("evaluator", n): "dare-plugin-code" for n in ("humaneval", "humanevalplus", "humaneval+", "mbpp")},
    **{(k, n): f"dare-plugin-{n}" for k in ("model_family", "sampler") for n in ("llada", "dream", "llada2", "sdar", "diffusiongemma")},
    **{("objective", n): "dare-plugin-grpo" for n in (
        "d1", "coupled-grpo", "bgpo", "espo", "cj-grpo", "tracerl", "mdpo", "spg", "ebpo", "d-treerpo", "justgrpo",
        "gdpo", "dipo", "lightningrl")},
    **{("objective", n): "dare-plugin-dpo" for n in ("dpo", "vrpo")},
    ("objective", "sft"): "dare-plugin-sft",
}

_TARGET = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


def _label(kind: str) -> str:
    return kind.replace("_", " ")


def _kind_base(kind: str) -> type[Component]:
    """The base class of ``kind``. :mod:`dare.components` (pydantic) is imported only once a component
    class is registered or loaded, so listing lazy plugins does not pay for it."""
    from dare.components import KINDS

    return KINDS[kind]


@dataclass(eq=False)
class Entry:
    """A registered component: what it is, where it came from, and its class (imported on first use).

    ``target`` is the class's ``"module:QualName"``. A lazily registered component is known by the
    metadata its plugin declared (``aliases``, one-line ``description``, a family's ``model_types``;
    ``None`` = not declared, read from the class) until :attr:`cls` imports it.
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
                f"reinstall or fix {self.distribution}, or uninstall it (`dare plugins --check` lists every such failure)"
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
                    f"{key} {_show(found[key])}; make the plugin's register() call and the class agree"
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
        installed = self.names(kind)
        msg = f"unknown {_label(kind)} {name!r}; installed: {', '.join(installed) or '(none)'}"
        dist = PROVIDERS.get((kind, name))
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
        out = Registry(failures=list(self.failures), conflicts=list(self.conflicts))
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
    :mod:`dare.hookspecs`): records components of ``kind`` attributed to ``plugin``/``dist``."""

    def __init__(self, reg: Registry, kind: str, plugin: str, dist: str, version: str):
        self.reg, self.kind, self.plugin, self.dist, self.version = reg, kind, plugin, dist, version

    def __repr__(self) -> str:  # shown by DARE_TRACE_PLUGINS=1
        return f"<register {_label(self.kind)} for plugin {self.plugin} ({self.dist} {self.version})>"

    def __call__(self, component, /, *, name: str | None = None, description: str = "",
                 aliases=(), model_types=None) -> None:
        """Register ``component``: a component class, or its ``"module:Class"`` path with the metadata.

        :raises TypeError: a class that is not a subclass of the kind's base or has no name; a path
            that is not ``"module:Class"``, without ``name``, or with metadata the kind has not.
        """
        where = f"{self.plugin}: register() for {_label(self.kind)}"
        if isinstance(component, str):
            if not _TARGET.fullmatch(component):
                raise TypeError(f"{where} takes a class or a 'package.module:ClassName' string, got {component!r}")
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
