"""LightningRL (arXiv 2603.13319): objective (``LightningRL``, ``LightningRLParams``) and trainer
(``LightningRLTrainer``: reward shaping and parallelism-aware dynamic sampling)."""

from dare_grpo.objectives.lightningrl.objective import LightningRL, LightningRLParams

__all__ = ["LightningRL", "LightningRLParams"]
