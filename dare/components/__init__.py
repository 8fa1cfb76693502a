"""Base classes of the component kinds: ModelFamily, Sampler, Objective, Estimator, Evaluator, Reward.

DARE keeps three axes apart (see docs/architecture.md): a *model family* knows checkpoints, special ids,
attention kind and logit alignment; a *likelihood estimator* knows how to corrupt a sequence and score
it; an *objective* turns scores into a loss. Samplers decode with any family; evaluators and rewards
score text and never see a model.

Each component class carries

* ``name`` (the spec's ``name:``) and optional ``aliases``;
* ``Params``: a pydantic model with ``extra="forbid"`` that validates the spec's ``params:`` block;
* ``check(ctx, loc)``: cross-field checks that need other parts of the spec (e.g. a sampler's
  ``gen_length`` against a block family's block size). They run in ``dare validate`` before any
  weights are loaded.

One module per kind: ``base`` (Params, Component), ``family``, ``sampler``, ``objective``,
``estimator``, ``reward``, ``evaluator``.
"""

from __future__ import annotations

from dare.components.base import Component, NoParams, Params
from dare.components.estimator import Estimator
from dare.components.evaluator import Evaluator
from dare.components.family import ModelFamily, SpecialTokens
from dare.components.objective import Objective
from dare.components.reward import Reward
from dare.components.sampler import ResolvedSampler, Sampler, SamplerOutput

__all__ = [
    "Params",
    "NoParams",
    "Component",
    "SpecialTokens",
    "ModelFamily",
    "SamplerOutput",
    "Sampler",
    "ResolvedSampler",
    "Objective",
    "Estimator",
    "Evaluator",
    "Reward",
    "KINDS",
]

#: Component kind -> base class (the registry's kinds, in ``dare plugins`` order).
KINDS: dict[str, type[Component]] = {
    "model_family": ModelFamily,
    "sampler": Sampler,
    "objective": Objective,
    "estimator": Estimator,
    "evaluator": Evaluator,
    "reward": Reward,
}
