"""SPG (arXiv 2510.09541): objective (``SPG``, ``SPGParams``), loss (the ELBO/EUBO sandwich surrogates) and
trainer (``SPGTrainer``: the joint update over the Monte-Carlo copies)."""

from dare_grpo.objectives.spg.objective import SPG, SPGParams

__all__ = ["SPG", "SPGParams"]
