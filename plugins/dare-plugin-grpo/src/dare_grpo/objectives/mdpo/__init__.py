"""MDPO (arXiv 2508.13148): objective (``MDPO``, ``MDPOParams``), rollout (``mdpo_decode``, the recorded
intermediate predictions), loss (step scores, step advantages, top-K steps) and trainer (``MDPOTrainer``)."""

from dare_grpo.objectives.mdpo.objective import MDPO, MDPOParams

__all__ = ["MDPO", "MDPOParams"]
