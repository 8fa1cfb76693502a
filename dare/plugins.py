"""Plugin manager and component registry.

Discovery: every installed distribution's entry points in the group ``dare`` are imported and
registered with a pluggy ``PluginManager``; DARE's own built-ins (``DEFAULT_PLUGINS``) are loaded by
dotted module path. A plugin that fails to import is recorded (name, distribution, error) and the
rest still load. ``pm.check_pending()`` then fails loudly on misspelt hook implementations.

Environment switches:

* ``DARE_LOAD_PLUGINS``: comma-separated entry-point names to load (empty string: none); unset means
  all installed plugins.
* ``DARE_TRACE_PLUGINS=1``: print every hook call (pluggy hook-call monitoring).

Components are collected by calling each plugin's ``register_*`` hook with a ``register`` callback
that stamps the plugin's distribution and version. Two components with the same kind and name (or
alias) raise :class:`~dare.errors.PluginError` naming both distributions.
"""

from __future__ import annotations

import difflib
import importlib
import os
import sys
import traceback
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

import pluggy

from dare import hookspecs
from dare.components import KINDS, Component
from dare.errors import PluginError

__all__ = [
    "DEFAULT_PLUGINS",
    "FIRST_PARTY",
    "Entry",
    "LoadFailure",
    "Registry",
    "get_plugin_manager",
    "get_registry",
    "reset",
]

#: DARE's built-in plugins (part of the ``dare-dllm`` distribution), loaded by module path.
DEFAULT_PLUGINS = ("dare.builtins.rewards", "dare.builtins.benchmarks", "dare.builtins.estimators")

#: Distributions whose components the committed ``schemas/run-spec.schema.json`` covers: the core and
#: the plugins under ``plugins/`` in this repository (``dare schema --first-party``).
FIRST_PARTY = (
    "dare-dllm", "dare-plugin-dpo", "dare-plugin-dream", "dare-plugin-grpo", "dare-plugin-llada",
    "dare-plugin-llada2", "dare-plugin-sdar", "dare-plugin-sft",
)

_HOOK_FOR_KIND = {
    "model_family": "register_model_families",
    "sampler": "register_samplers",
    "objective": "register_objectives",
    "estimator": "register_estimators",
    "evaluator": "register_evaluators",
    "reward": "register_rewards",
}


@dataclass(frozen=True)
class Entry:
    """A registered component: its class and where it came from."""

    kind: str
    name: str
    cls: type[Component]
    distribution: str
    version: str
    plugin: str

    def create(self, params: Any = None) -> Component:
        """Instantiate with validated params (a ``Params`` instance or a dict)."""
        return self.cls(params)


@dataclass(frozen=True)
class LoadFailure:
    """A plugin that could not be imported or whose ``register_*`` hook raised."""

    plugin: str
    distribution: str
    error: str
    detail: str = ""


@dataclass
class Registry:
    """Components by kind and name, plus plugin load failures."""

    entries: dict[str, dict[str, Entry]] = field(default_factory=lambda: {k: {} for k in KINDS})
    aliases: dict[str, dict[str, str]] = field(default_factory=lambda: {k: {} for k in KINDS})
    failures: list[LoadFailure] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    plugins: dict[str, tuple[str, str]] = field(default_factory=dict)  # plugin -> (dist, version)

    def names(self, kind: str) -> list[str]:
        return sorted(self.entries[kind])

    def all(self) -> list[Entry]:
        return [e for kind in KINDS for e in sorted(self.entries[kind].values(), key=lambda e: e.name)]

    def find(self, kind: str, name: str) -> Entry | None:
        name = self.aliases[kind].get(name, name)
        return self.entries[kind].get(name)

    def get(self, kind: str, name: str) -> Entry:
        """The entry for ``name``.

        :raises PluginError: unknown name; the message lists installed names and a close match.
        """
        entry = self.find(kind, name)
        if entry is None:
            raise PluginError(self.unknown_message(kind, name))
        return entry

    def unknown_message(self, kind: str, name: str) -> str:
        installed = self.names(kind)
        label = kind.replace("_", " ")
        msg = f"unknown {label} {name!r}; installed: {', '.join(installed) or '(none)'}"
        close = difflib.get_close_matches(name, installed + list(self.aliases[kind]), n=1)
        if close:
            msg += f" (did you mean {close[0]!r}?)"
        failed = [f.plugin for f in self.failures]
        if failed:
            msg += f"; plugins that failed to load: {', '.join(failed)} (run `dare plugins`)"
        return msg

    def restricted(self, distributions) -> "Registry":
        """A copy holding only the components of ``distributions`` (names of installed distributions)."""
        keep = set(distributions)
        out = Registry(failures=list(self.failures), conflicts=list(self.conflicts))
        for kind in KINDS:
            out.entries[kind] = {n: e for n, e in self.entries[kind].items() if e.distribution in keep}
            out.aliases[kind] = {a: n for a, n in self.aliases[kind].items() if n in out.entries[kind]}
        out.plugins = {p: dv for p, dv in self.plugins.items() if dv[0] in keep}
        return out

    def family_for_model_type(self, model_type: str) -> Entry | None:
        for entry in self.entries["model_family"].values():
            if model_type in getattr(entry.cls, "model_types", ()):
                return entry
        return None


_pm: pluggy.PluginManager | None = None
_registry: Registry | None = None


def _new_pm() -> pluggy.PluginManager:
    pm = pluggy.PluginManager("dare")
    pm.add_hookspecs(hookspecs)
    return pm


def get_plugin_manager() -> pluggy.PluginManager:
    """The process-wide plugin manager with all plugins loaded (see module docstring)."""
    global _pm
    if _pm is None:
        _pm, _ = _load()
    return _pm


def get_registry() -> Registry:
    """The process-wide component registry.

    :raises PluginError: when two plugins register the same kind and name.
    """
    global _registry
    if _registry is None:
        get_plugin_manager()
    assert _registry is not None
    if _registry.conflicts:
        raise PluginError("; ".join(_registry.conflicts))
    return _registry


def reset() -> None:
    """Forget the loaded plugins (tests; after installing a plugin in-process)."""
    global _pm, _registry
    _pm = None
    _registry = None


def _dist_of(module_name: str) -> tuple[str, str]:
    top = module_name.split(".")[0]
    for dist in metadata.packages_distributions().get(top, []):
        try:
            return dist, metadata.version(dist)
        except metadata.PackageNotFoundError:  # pragma: no cover
            continue
    return "unknown", "0"


def _load() -> tuple[pluggy.PluginManager, Registry]:
    global _registry
    pm = _new_pm()
    reg = Registry()
    allow = os.environ.get("DARE_LOAD_PLUGINS")
    allowed = None if allow is None else {s.strip() for s in allow.split(",") if s.strip()}

    for mod_name in DEFAULT_PLUGINS:
        try:
            mod = importlib.import_module(mod_name)
        except Exception as exc:  # pragma: no cover - a broken install
            reg.failures.append(LoadFailure(mod_name, "dare-dllm", f"{type(exc).__name__}: {exc}", traceback.format_exc()))
            continue
        pm.register(mod, name=mod_name)
        reg.plugins[mod_name] = _dist_of("dare")

    eps = metadata.entry_points(group="dare")
    for ep in sorted(eps, key=lambda e: e.name):
        if allowed is not None and ep.name not in allowed:
            continue
        dist = ep.dist.name if ep.dist is not None else "unknown"
        version = ep.dist.version if ep.dist is not None else "0"
        if pm.get_plugin(ep.name) is not None:
            other = reg.plugins.get(ep.name, ("?", "?"))[0]
            reg.conflicts.append(f"two plugins use the entry-point name {ep.name!r}: {other} and {dist}")
            continue
        try:
            mod = ep.load()
        except Exception as exc:
            reg.failures.append(LoadFailure(ep.name, dist, f"{type(exc).__name__}: {exc}", traceback.format_exc()))
            continue
        try:
            pm.register(mod, name=ep.name)
        except Exception as exc:
            reg.failures.append(LoadFailure(ep.name, dist, f"{type(exc).__name__}: {exc}", traceback.format_exc()))
            continue
        reg.plugins[ep.name] = (dist, version)

    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        raise PluginError(f"a plugin implements a hook that does not exist: {exc}") from None

    if os.environ.get("DARE_TRACE_PLUGINS"):
        pm.trace.root.setwriter(lambda s: sys.stderr.write(s))
        pm.enable_tracing()

    for kind, hook_name in _HOOK_FOR_KIND.items():
        for impl in getattr(pm.hook, hook_name).get_hookimpls():
            plugin_name = impl.plugin_name
            dist, version = reg.plugins.get(plugin_name, ("unknown", "0"))
            register = _make_register(reg, kind, plugin_name, dist, version)
            try:
                impl.function(register=register)
            except Exception as exc:
                reg.failures.append(
                    LoadFailure(plugin_name, dist, f"{hook_name} raised {type(exc).__name__}: {exc}", traceback.format_exc())
                )
    _registry = reg
    return pm, reg


def _make_register(reg: Registry, kind: str, plugin: str, dist: str, version: str):
    base = KINDS[kind]

    def register(cls: type[Component]) -> None:
        if not (isinstance(cls, type) and issubclass(cls, base)):
            raise TypeError(f"{plugin}: register() for {kind} takes a {base.__name__} subclass, got {cls!r}")
        if not cls.name:
            raise TypeError(f"{plugin}: {cls.__name__} has no name")
        for key in (cls.name, *cls.aliases):
            existing = reg.find(kind, key)
            if existing is not None:
                reg.conflicts.append(
                    f"two plugins register a {kind.replace('_', ' ')} named {key!r}: "
                    f"{existing.distribution} ({existing.plugin}) and {dist} ({plugin}); uninstall one of them"
                )
                return
        reg.entries[kind][cls.name] = Entry(kind, cls.name, cls, dist, version, plugin)
        for alias in cls.aliases:
            reg.aliases[kind][alias] = cls.name

    return register
