"""The masked-diffusion forward process and likelihood pieces: corruption, per-token likelihoods and ELBOs,
block-diffusion attention masks, padding-free packing and the likelihood estimators.

* :mod:`dare.diffusion.forward`: mask ratios ``t`` and corruption masks (Bernoulli-``t`` i.i.d.).
* :mod:`dare.diffusion.likelihood`: per-token log-probabilities of the clean tokens under a noisy
  input, and the masked-diffusion ELBO/SFT loss.

Likelihood *estimators* (one-step, coupled, stratified ELBO-MC, trajectory replay, ...) build on
these; they receive aligned logits from the model family and never see a family name.
"""

from dare.diffusion.forward import apply_mask, bernoulli_mask, blockwise_mask, sample_mask_ratio, uniform_noise
from dare.diffusion.likelihood import masked_diffusion_loss, token_logprobs

__all__ = ["sample_mask_ratio", "bernoulli_mask", "blockwise_mask", "apply_mask", "uniform_noise", "token_logprobs",
           "masked_diffusion_loss"]
