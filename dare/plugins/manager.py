"""Plugin manager: discovery and hook calls; the components land in a :class:`~dare.plugins.registry.Registry`.

Discovery: every installed distribution's entry points in the group ``dare`` are imported and
registered with a pluggy ``PluginManager``; DARE's own built-ins (``DEFAULT_PLUGINS``) are loaded by
dotted module path. A plugin that fails to import is recorded (name, distribution, error) and the
rest still load. ``pm.check_pending()`` then fails loudly on misspelt hook implementations.

Registration runs through pluggy: for every plugin that implements a ``register_*`` hook, the host
calls that hook (``pm.subset_hook_caller``: the hook with only this plugin's implementation) with a
``register`` callback (:class:`~dare.plugins.registry.Registrar`) bound to the plugin, its distribution and
version. So each component is attributed to the plugin that registered it, a plugin whose hook raises
is recorded as a load failure while the others still register, and ``DARE_TRACE_PLUGINS=1`` shows every
call. Two components with the same kind and name (or alias) raise :class:`~dare.errors.PluginError`
naming both distributions.

Components are imported lazily: a plugin registers a ``"module:Class"`` reference, the registry reads
the name, aliases, model types and description from the class's source (written once, in the class), and
:attr:`Entry.cls <dare.plugins.registry.Entry.cls>` imports the module on first use; a plugin may also register the
class itself. The core lists no plugin: an unknown name's error asks the plugins that are not loaded or not
installed (:func:`provider_of`), and the first-party distributions are the checkout's (:func:`first_party`).
So listing plugins, ``dare --help`` and validating a spec import only the plugin modules (which import
nothing but ``dare.hookimpl``) and the components a spec names. Families' transformers classes are
registered with the Auto classes only when :func:`register_auto_classes` runs (before a checkpoint is read
or created).

Environment switches:

* ``DARE_LOAD_PLUGINS``: comma-separated entry-point or distribution names to load (``myplugin`` or
  ``dare-plugin-myplugin``; empty string: none); unset means all installed plugins.
* ``DARE_TRACE_PLUGINS=1``: print every hook call (pluggy hook-call monitoring) to stderr.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import traceback
from importlib import metadata
from pathlib import Path

import pluggy

from dare.plugins import hookspecs, registry
from dare.errors import PluginError
from dare.plugins.registry import HOOK_FOR_KIND, Entry, LoadFailure, Registrar, Registry

__all__ = [
    "CHECKOUT_PLUGINS",
    "DEFAULT_PLUGINS",
    "HOOK_FOR_KIND",
    "Entry",
    "LoadFailure",
    "Registry",
    "get_plugin_manager",
    "checkout_plugins",
    "first_party",
    "get_registry",
    "provider_of",
    "register_auto_classes",
    "reset",
]

#: DARE's built-in plugins (part of the ``dare-dllm`` distribution), loaded by module path.
DEFAULT_PLUGINS = ("dare.builtins",)

#: Where the plugins shipped with DARE live in a source checkout (beside the ``dare`` package).
CHECKOUT_PLUGINS = Path(__file__).resolve().parents[2] / "plugins"


def checkout_plugins() -> list[tuple[str, Path, dict[str, str]]]:
    """The plugins shipped in the DARE checkout this core runs from, from their own packaging metadata:
    ``(distribution, folder, {entry-point name: plugin module})`` per ``plugins/*/pyproject.toml``
    (``[project] name`` and ``[project.entry-points.dare]``), sorted by folder; ``[]`` outside a checkout
    (an installed wheel) or on Python 3.10 (no ``tomllib``)."""
    try:
        import tomllib
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        return []
    out = []
    for pyproject in sorted(CHECKOUT_PLUGINS.glob("*/pyproject.toml")):
        try:
            project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
        except (OSError, tomllib.TOMLDecodeError):
            continue
        if isinstance(project.get("name"), str):
            eps = project.get("entry-points", {}).get("dare", {})
            out.append((project["name"], pyproject.parent, {k: v.split(":")[0] for k, v in eps.items()}))
    return out


def first_party() -> tuple[str, ...]:
    """The distributions whose components the committed ``schemas/run-spec.schema.json`` covers (``dare
    schema --first-party``): the core (``dare-dllm``) and the plugins of this checkout (:func:`checkout_plugins`)."""
    return ("dare-dllm", *(dist for dist, _, _ in checkout_plugins()))


_pm: pluggy.PluginManager | None = None
_registry: Registry | None = None
_auto_registered: pluggy.PluginManager | None = None  # the manager whose register_auto_classes ran


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
    global _pm, _registry, _auto_registered
    registry.clear_caches()
    _pm = None
    _registry = None
    _auto_registered = None


def register_auto_classes() -> None:
    """Let every plugin register its transformers classes with transformers' Auto classes (the
    ``register_auto_classes`` hook), once per loaded plugin manager.

    Call it before reading or creating a checkpoint through ``AutoConfig``/``AutoModel``/
    ``AutoTokenizer`` (``dare.modeling`` and the spec's model checks do). Each plugin's hook runs on its
    own; one that raises is recorded in the registry's ``failures`` (``dare plugins`` lists it) and the
    others still register.
    """
    global _auto_registered
    pm = get_plugin_manager()
    if _auto_registered is pm:
        return
    _auto_registered = pm
    assert _registry is not None
    _call_each(pm, _registry, "register_auto_classes")


def _core_distribution() -> tuple[str, str]:
    try:
        return "dare-dllm", metadata.version("dare-dllm")
    except metadata.PackageNotFoundError:  # pragma: no cover - a source tree on sys.path, not installed
        from dare import __version__

        return "dare-dllm", __version__


def _failure(reg: Registry, plugin: str, dist: str, error: str) -> None:
    reg.failures.append(LoadFailure(plugin, dist, error, traceback.format_exc()))


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
            _failure(reg, mod_name, "dare-dllm", f"{type(exc).__name__}: {exc}")
            continue
        pm.register(mod, name=mod_name)
        reg.plugins[mod_name] = _core_distribution()

    eps = metadata.entry_points(group="dare")
    for ep in sorted(eps, key=lambda e: e.name):
        dist = ep.dist.name if ep.dist is not None else "unknown"
        # an entry-point name (myplugin) or its distribution's (dare-plugin-myplugin, as DARE's errors name plugins)
        if allowed is not None and ep.name not in allowed and dist not in allowed:
            continue
        version = ep.dist.version if ep.dist is not None else "0"
        if pm.get_plugin(ep.name) is not None:
            other = reg.plugins.get(ep.name, ("?", "?"))[0]
            reg.conflicts.append(f"two plugins use the entry-point name {ep.name!r}: {other} and {dist}")
            continue
        try:
            mod = ep.load()
            pm.register(mod, name=ep.name)
        except Exception as exc:
            _failure(reg, ep.name, dist, f"{type(exc).__name__}: {exc}")
            continue
        reg.plugins[ep.name] = (dist, version)

    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        raise PluginError(f"a plugin implements a hook that does not exist: {exc}") from None

    if os.environ.get("DARE_TRACE_PLUGINS"):
        pm.trace.root.setwriter(lambda s: sys.stderr.write(s))  # the current stderr at each write
        pm.enable_tracing()

    for kind, hook_name in HOOK_FOR_KIND.items():
        _call_each(pm, reg, hook_name,
                   lambda plugin, dist, version, kind=kind: {"register": Registrar(reg, kind, plugin, dist, version)})
    reg.provider = lambda kind, name: provider_of(reg, kind, name)
    _registry = reg
    return pm, reg


def _declared(module, plugin: str, dist: str, version: str, roots=()) -> Registry:
    """What one plugin module registers, in a registry of its own (nothing is imported but the module)."""
    reg = Registry()
    for kind, hook_name in HOOK_FOR_KIND.items():
        hook = getattr(module, hook_name, None)
        if callable(hook):
            hook(register=Registrar(reg, kind, plugin, dist, version, roots))
    return reg


def provider_of(reg: Registry, kind: str, name: str) -> str | None:
    """The distribution whose plugin registers the ``kind`` named ``name`` but is not in ``reg``: an installed
    plugin that was not loaded (``DARE_LOAD_PLUGINS``), else a plugin of this checkout that is not installed,
    both asked through their own ``register_*`` hooks (their plugin modules import only ``dare``); ``None``
    when none does. Only the unknown-name error asks it."""
    installed = set()
    for ep in metadata.entry_points(group="dare"):
        dist = ep.dist.name if ep.dist is not None else "unknown"
        installed.add(dist)
        if ep.name in reg.plugins:
            continue
        try:
            found = _declared(ep.load(), ep.name, dist, ep.dist.version if ep.dist is not None else "0")
        except Exception:  # noqa: BLE001 - a broken plugin is reported by `dare plugins`, not here
            continue
        if found.find(kind, name) is not None:
            return dist
    for dist, folder, modules in checkout_plugins():
        if dist in installed:
            continue
        roots = (folder / "src", folder)
        for plugin, module_name in modules.items():
            files = [r.joinpath(*module_name.split(".")).with_suffix(".py") for r in roots]
            path = next((f for f in files if f.is_file()), None)
            try:
                spec = importlib.util.spec_from_file_location(f"_dare_unloaded_{plugin}", path) if path else None
                if spec is None or spec.loader is None:
                    continue
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                found = _declared(module, plugin, dist, "0", roots)
            except Exception:  # noqa: BLE001 - a plugin of the checkout that does not load names nothing
                continue
            if found.find(kind, name) is not None:
                return dist
    return None


def _call_each(pm: pluggy.PluginManager, reg: Registry, hook_name: str,
               kwargs=lambda plugin, dist, version: {}) -> None:
    """Call ``hook_name`` through pluggy once per implementing plugin (``pm.subset_hook_caller``: the
    hook with only that plugin's implementation), in registration order (built-ins first), with
    ``kwargs(plugin, dist, version)``. A plugin whose hook raises is recorded as a load failure and the
    others still run."""
    impls = getattr(pm.hook, hook_name).get_hookimpls()
    for impl in impls:
        dist, version = reg.plugins.get(impl.plugin_name, ("unknown", "0"))
        others = [other.plugin for other in impls if other.plugin is not impl.plugin]
        call = pm.subset_hook_caller(hook_name, remove_plugins=others)
        try:
            call(**kwargs(impl.plugin_name, dist, version))
        except Exception as exc:
            _failure(reg, impl.plugin_name, dist, f"{hook_name} raised {type(exc).__name__}: {exc}")
