"""d-TreeRPO (arXiv 2512.09675): objective (``DTreeRPO``, ``DTreeRPOParams``), rollout (the tree of partly
decoded states, values, local advantages), loss (edge loss inputs, sibling self-distillation) and trainer
(``DTreeRPOTrainer``)."""

from dare_grpo.objectives.dtreerpo.objective import DTreeRPO, DTreeRPOParams

__all__ = ["DTreeRPO", "DTreeRPOParams"]
