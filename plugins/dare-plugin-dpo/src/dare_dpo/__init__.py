"""DARE plugin: preference optimisation of diffusion LMs.

Two objectives over (prompt, chosen, rejected) pairs, for every model family:

* ``dpo``: DPO (arXiv 2305.18290) with sequence log-likelihoods replaced by Monte-Carlo ELBO estimates
  (a sequence-level :class:`dare.components.Estimator`, ``mc-elbo`` by default);
* ``vrpo``: LLaDA 1.5's variance-reduced preference optimisation (arXiv 2505.19223): stratified mask
  counts, the whole budget on timesteps (one mask each), corruptions shared by policy and reference.
"""

from dare_dpo.loss import DPOLossOutput, dpo_loss

__all__ = ["DPOTrainer", "dpo_loss", "DPOLossOutput"]


def __getattr__(name):
    if name == "DPOTrainer":  # the trainer stack loads only when used
        from dare_dpo.trainer import DPOTrainer

        return DPOTrainer
    raise AttributeError(name)
