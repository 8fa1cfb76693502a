"""DARE plugin: online RL for diffusion LMs.

* :class:`~dare_grpo.trainer.GRPOTrainer` / :class:`~dare_grpo.config.GRPOConfig`: rollout, rewards,
  group advantages, inner iterations, reference policy, metrics, checkpointed generators;
* objectives (:mod:`dare_grpo.objectives`): ``d1``, ``coupled-grpo``, ``mdpo``, ``cj-grpo``,
  ``spg``, ``bgpo``, ``ebpo``, ``d-treerpo``, ``justgrpo``, ``espo``, ``tracerl``, built from the core's estimators (:mod:`dare.diffusion.estimators`)
  and RL pieces (:mod:`dare.rl`).

``GRPOConfig``/``GRPOTrainer`` are imported on first access (PEP 562), so loading the plugin entry point
(:mod:`dare_grpo.plugin`) does not import the trainer stack.
"""

import importlib

__all__ = ["GRPOConfig", "GRPOTrainer"]

_MODULE = {"GRPOConfig": "config", "GRPOTrainer": "trainer"}


def __getattr__(name):
    if name in _MODULE:
        return getattr(importlib.import_module(f"dare_grpo.{_MODULE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
