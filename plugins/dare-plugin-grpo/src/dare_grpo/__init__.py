"""DARE plugin: online RL for diffusion LMs.

* :class:`~dare_grpo.trainer.GRPOTrainer` / :class:`~dare_grpo.config.GRPOConfig`: rollout, rewards,
  group advantages, inner iterations, reference policy, metrics, checkpointed generators;
* objectives (:mod:`dare_grpo.objectives`): ``d1``, ``coupled-grpo``, ``mdpo``, ``cj-grpo``,
  ``spg``, ``bgpo``, ``ebpo``, ``d-treerpo``, ``justgrpo``, ``espo``, ``tracerl``, built from the core's estimators (:mod:`dare.diffusion.estimators`)
  and RL pieces (:mod:`dare.rl`).
"""

from dare_grpo.config import GRPOConfig
from dare_grpo.trainer import GRPOTrainer

__all__ = ["GRPOConfig", "GRPOTrainer"]
