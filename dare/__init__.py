"""DARE, the dLLM Alignment and Reinforcement Executor: the core every plugin builds on, one framework to post-train
and evaluate diffusion LLMs.

The core defines the plugin system (``dare/plugins/``: the hook surface, discovery, the registry), the component
kinds (:mod:`dare.components`), the run spec (:mod:`dare.runspec`), the run and its directory (:mod:`dare.run`), the
forward process and likelihood estimators (:mod:`dare.diffusion`), shared decoding pieces (:mod:`dare.sampling`),
trainers (:mod:`dare.trainers`), online RL (:mod:`dare.rl`), evaluation (:mod:`dare.eval`), reports
(:mod:`dare.report`), processes and threads (:mod:`dare.scaling`) and operations outside a run (:mod:`dare.ops`);
docs/architecture.md draws the layout. Model families, samplers and objectives come from plugins.

``import dare`` is light: it imports pluggy (``dare.hookimpl``) and the error classes; the component
base classes (pydantic) load on first access of ``dare.ModelFamily``, ``dare.Params``, ... (PEP 562),
so a plugin module that imports only ``dare.hookimpl`` does not pay for them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dare.errors import CheckpointError, DareError, DataError, PluginError, SpecError
from dare.plugins.hookspecs import hookimpl

if TYPE_CHECKING:  # pragma: no cover
    from dare.components import (
        Evaluator,
        ModelFamily,
        NoParams,
        Objective,
        Params,
        Reward,
        Sampler,
        SamplerOutput,
        SpecialTokens,
    )

__version__ = "0.1.0"

__all__ = [
    "hookimpl",
    "ModelFamily",
    "Sampler",
    "SamplerOutput",
    "Objective",
    "Evaluator",
    "Reward",
    "Params",
    "NoParams",
    "SpecialTokens",
    "DareError",
    "SpecError",
    "PluginError",
    "CheckpointError",
    "DataError",
    "__version__",
]

_FROM_COMPONENTS = frozenset(
    {"ModelFamily", "Sampler", "SamplerOutput", "Objective", "Evaluator", "Reward", "Params", "NoParams",
     "SpecialTokens"}
)


def __getattr__(name: str):
    if name in _FROM_COMPONENTS:
        from dare import components

        return getattr(components, name)
    raise AttributeError(f"module 'dare' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _FROM_COMPONENTS)
