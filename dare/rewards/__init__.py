"""Verifiable reward functions (pure text -> score) and the weighted sum used by trainers/evaluators.

Each scorer cites the rule it implements (reference: DARE ``dllm_rm`` / d1 reward functions). The
``Reward`` components wrapping them are registered by :mod:`dare.builtins.rewards`.
"""

from dare.rewards.combine import RewardFn, WeightedReward
from dare.rewards.extract import last_answer_tag, last_boxed

__all__ = ["WeightedReward", "RewardFn", "last_boxed", "last_answer_tag"]
