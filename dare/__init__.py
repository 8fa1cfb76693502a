"""DARE: the dLLM Alignment and Reinforcement Executor.

One framework to post-train and evaluate diffusion LLMs. The core defines the plugin surface
(:mod:`dare.hookspecs`), the component kinds (:mod:`dare.components`), the run spec
(:mod:`dare.spec`), the forward process and likelihood estimators (:mod:`dare.diffusion`), shared
decoding pieces (:mod:`dare.sampling`), trainers (:mod:`dare.trainers`) and evaluation
(:mod:`dare.eval`). Model families, samplers and objectives come from plugins.
"""

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
from dare.errors import CheckpointError, DareError, DataError, PluginError, SpecError
from dare.hookspecs import hookimpl

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
