"""Register ``lm_eval.models`` entry points with lm-eval versions that do not discover them.

lm-eval resolves ``--model NAME`` against its model registry. Up to 0.4.13 (the newest release) that
registry holds only lm-eval's own models (``lm_eval/models/__init__.py``, ``MODEL_MAPPING``) plus whatever
an imported module registers with ``@register_model``; it reads no entry points, so an installed
package cannot add a model the ``lm_eval`` command sees. lm-eval's main branch added the
``lm_eval.models`` entry-point group (EleutherAI/lm-evaluation-harness PR #4013, after 0.4.13), and
``dare-plugin-lmeval`` declares ``dare = "dare_lmeval.model:DareLM"`` there.

For installed versions without that discovery, ``dare_lmeval.pth`` (Python's standard start-up hook:
the ``site`` module executes ``import`` lines of ``.pth`` files in site-packages) imports this module,
which only puts a finder at the front of ``sys.meta_path`` (standard library only, no lm-eval or torch import).
When a process imports ``lm_eval.models`` (lm-eval does so on its first model lookup), the finder runs
that module as usual and then registers every ``lm_eval.models`` entry point whose name lm-eval does not
already know, as a lazy ``"module:attr"`` placeholder, the form lm-eval's own ``MODEL_MAPPING`` uses:
nothing of DARE is imported until ``--model dare`` is asked for. Built-in names always win. With an
lm-eval that discovers the group itself (``lm_eval.api.registry.load_plugins``), this does nothing.
"""

from __future__ import annotations

import sys

_TARGET = "lm_eval.models"
_GROUP = "lm_eval.models"


def register_entry_points() -> list[str]:
    """Register the ``lm_eval.models`` entry points lm-eval does not know yet; returns their names."""
    from importlib.metadata import entry_points

    import lm_eval.api.registry as reg

    if hasattr(reg, "load_plugins"):  # this lm-eval discovers the group itself
        return []
    registry = getattr(reg, "model_registry", None)
    added = []
    for ep in entry_points(group=_GROUP):
        if registry is not None and hasattr(registry, "register"):
            if ep.name in registry:
                continue
            registry.register(ep.name, target=f"{ep.module}:{ep.attr}")
        else:  # an eager registry (older lm-eval): importing the module runs its @register_model
            ep.load()
        added.append(ep.name)
    return added


def _after_import() -> None:
    try:
        register_entry_points()
    except Exception as exc:  # noqa: BLE001 - never break lm-eval itself; say why --model dare is missing
        import warnings

        warnings.warn(f"dare-plugin-lmeval could not register its lm-eval model: {exc!r}", RuntimeWarning, stacklevel=2)


class _PostImportFinder:
    """Finds nothing itself; wraps the real loader of ``lm_eval.models`` to register afterwards."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != _TARGET:
            return None
        sys.meta_path.remove(self)  # once per process
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module

        def exec_module(module):
            try:
                original(module)
            finally:
                try:
                    del loader.exec_module  # back to the class's method
                except AttributeError:
                    pass
            _after_import()

        loader.exec_module = exec_module
        return spec


def install() -> None:
    """Add the finder (idempotent); run from ``dare_lmeval.pth`` at interpreter start."""
    if _TARGET in sys.modules:  # lm-eval already loaded its models: register now
        _after_import()
        return
    if not any(isinstance(f, _PostImportFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _PostImportFinder())  # before the path finder that would load it


install()
