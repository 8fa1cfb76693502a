"""Algorithm-independent pieces of online RL, shared by every RL objective.

* :mod:`dare.rl.advantages`: group advantages (GRPO mean/std, Dr.GRPO, RLOO);
* :mod:`dare.rl.policy_loss`: the clipped surrogate with dual clip;
* :mod:`dare.rl.kl`: KL estimators k1/k2/k3 against a reference policy;
* :mod:`dare.rl.aggregation`: token-mean / sequence-mean reduction;
* :mod:`dare.rl.entropy`: predictive entropy (metric).

Likelihood estimators (how a completion is scored by a diffusion LM) live in
:mod:`dare.diffusion.estimators`; trainers and objectives live in the ``dare-plugin-grpo`` plugin.
"""

from dare.rl.advantages import AdvantageKind, group_advantages
from dare.rl.aggregation import Aggregation, aggregate
from dare.rl.entropy import token_entropy
from dare.rl.kl import KLEstimator, kl_estimate
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
]
