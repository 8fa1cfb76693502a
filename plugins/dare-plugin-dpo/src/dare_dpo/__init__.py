"""DARE plugin: preference optimisation of diffusion LMs.

Two objectives over (prompt, chosen, rejected) pairs, for every model family:

* ``dpo``: DPO (arXiv 2305.18290) with sequence log-likelihoods replaced by Monte-Carlo ELBO estimates
  (a sequence-level :class:`dare.components.Estimator`, ``mc-elbo`` by default);
* ``vrpo``: LLaDA 1.5's variance-reduced preference optimisation (arXiv 2505.19223): stratified mask
  counts, the whole budget on timesteps (one mask each), corruptions shared by policy and reference.

The names below are imported on first access (PEP 562), so loading the plugin entry point
(:mod:`dare_dpo.plugin`) imports neither torch nor the trainer stack.
"""

import importlib

__all__ = ["DPOTrainer", "dpo_loss", "DPOLossOutput"]

_MODULE = {"DPOTrainer": "trainer", "dpo_loss": "loss", "DPOLossOutput": "loss"}


def __getattr__(name):
    if name in _MODULE:
        return getattr(importlib.import_module(f"dare_dpo.{_MODULE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
