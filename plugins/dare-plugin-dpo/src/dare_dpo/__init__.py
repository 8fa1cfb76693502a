"""DARE plugin: preference optimisation of diffusion LMs.

Two objectives over (prompt, chosen, rejected) pairs, for every model family:

* ``dpo``: DPO (arXiv 2305.18290) with sequence log-likelihoods replaced by Monte-Carlo ELBO estimates
  (``dare.diffusion.elbo``);
* ``vrpo``: LLaDA 1.5's variance-reduced preference optimisation (arXiv 2505.19223): stratified mask
  counts, the whole budget on timesteps (one mask each), corruptions shared by policy and reference.
"""

from dare_dpo.loss import DPOLossOutput, dpo_loss
from dare_dpo.trainer import DPOConfig, DPOTrainer

__all__ = ["DPOConfig", "DPOTrainer", "dpo_loss", "DPOLossOutput"]
