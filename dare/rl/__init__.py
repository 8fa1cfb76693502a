"""Algorithm-independent pieces of online RL, shared by every RL objective: the RL step and its hooks, rollouts,
advantages, losses, KL, reward guards and the GRPO trainer.

* :mod:`dare.rl.advantages`: group advantages (GRPO mean/std, Dr.GRPO, RLOO);
* :mod:`dare.rl.policy_loss`: the clipped surrogate with dual clip;
* :mod:`dare.rl.kl`: KL estimators k1/k2/k3 against a reference policy;
* :mod:`dare.rl.aggregation`: token-mean / sequence-mean reduction;
* ``token_entropy``: predictive entropy (metric; :mod:`dare.diffusion.likelihood`).

The public base of RL objectives, which any plugin may derive from (``dare new-plugin NAME --kind
rl-objective`` renders one):

* :mod:`dare.rl.objective`: :class:`OnlineRLObjective` (the training skeleton's RL pieces);
* :mod:`dare.rl.losses`: :class:`RLParams`, the loss inputs/outputs and :func:`clipped_token_loss`;
* :mod:`dare.rl.step`: the public, pure RL step (rollout batch and draws -> passes -> old/reference scores ->
  loss and backwards), one function per stage, which the trainer and the parity tests run;
* :mod:`dare.rl.hooks`: :class:`~dare.rl.hooks.RLStepHooks`, the one list of what an objective's trainer may override;
* :mod:`dare.rl.trainer`: :class:`~dare.rl.trainer.GRPOTrainer`, the adapter over the step (rollout, rewards,
  inner iterations, reference policy; imported on use, it loads the trainer stack);
* :mod:`dare.rl.rollout`, :mod:`dare.rl.prompts`: sampling and scoring a rollout batch, prompt datasets.

Likelihood estimators (how a completion is scored by a diffusion LM) live in
:mod:`dare.diffusion.estimators`; the objectives live in plugins.
"""

from dare.rl.advantages import AdvantageKind, group_advantages
from dare.rl.aggregation import Aggregation, aggregate
from dare.diffusion.likelihood import token_entropy
from dare.rl.kl import KLEstimator, kl_estimate
from dare.rl.losses import LossTerms, PassLossInput, RLParams, SequenceLossInput, clipped_token_loss
from dare.rl.objective import OnlineRLObjective
from dare.rl.policy_loss import ClippedLoss, clipped_policy_loss, ratio_from_log

__all__ = [
    "AdvantageKind",
    "group_advantages",
    "Aggregation",
    "aggregate",
    "token_entropy",
    "KLEstimator",
    "kl_estimate",
    "ClippedLoss",
    "clipped_policy_loss",
    "ratio_from_log",
    "OnlineRLObjective",
    "RLParams",
    "PassLossInput",
    "SequenceLossInput",
    "LossTerms",
    "clipped_token_loss",
]
