"""Masked-diffusion SFT trainer (TRL style): ``SFTTrainer``, configured by :class:`dare.trainers.DareConfig`.

Loss (LLaDA, arXiv 2502.09992, Algorithm 2 and eq. (5)): per example draw ``t = (1 - eps) u + eps``;
mask every response token independently with probability ``t`` (prompt tokens never);
``loss = (1 / L') Σ_{masked} CE / t`` with ``L'`` the response length (the paper's normaliser, not the
masked count); mean over the batch. Which tokens are "response" (EOS padding or not) and how logits
are obtained (full attention, Dream's shift, block diffusion's ``[x_t ; x_0]`` input) come from the
model family, so this file never names a family.

Blockwise SFT (``block_length`` set; Sun et al., arXiv 2508.19529 §3, :func:`dare.diffusion.blockwise_mask`):
the response is cut into blocks of ``block_length`` tokens, one block per example is drawn uniformly and
masked with probability ``t``, earlier blocks stay clean and later ones are masked but not scored, so
training sees the states semi-autoregressive decoding visits. ``loss = (1 / |block|) Σ_{masked in block}
CE / t`` (the same ELBO weighting on the active block; the official ``train_blockwise.py`` averages the
plain CE over the masked tokens instead). ``padding_block_weight`` < 1 draws blocks made only of EOS/EOT
padding less often (:func:`dare.diffusion.blockwise_mask`).

Randomness (:mod:`dare.randomness`): example ``i`` (its dataset index) at optimizer step ``s`` draws its
``t`` and its masks from a generator keyed by ``(seed, "sft", s, i)``, so the loss of a step does not
depend on the process count or on how the global batch is split into micro-batches, and a resumed run
recomputes the same masks.
"""

from __future__ import annotations

import torch

from dare.diffusion import apply_mask, bernoulli_mask, blockwise_mask, masked_diffusion_loss, sample_mask_ratio
from dare.randomness import RowGenerators
from dare.trainers.base import DareTrainer

__all__ = ["SFTTrainer"]


class SFTTrainer(DareTrainer):
    """Trains on batches from ``dare.data.SupervisedCollator`` with the masked-diffusion SFT loss.

    Expects ``family``, ``tokens`` and ``objective`` (an :class:`dare_sft.objective.SFT`, whose ``mask_eps`` it
    reads; see :class:`dare.trainers.DareTrainer`).
    """

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        ids = inputs["input_ids"]
        loss_mask = inputs["loss_mask"]
        attn = inputs["attention_mask"]
        gens = RowGenerators.keyed(self.args.seed, "sft", self.state.global_step, inputs["index"])
        t = sample_mask_ratio(ids.shape[0], self.objective.params.mask_eps, generator=gens, device=ids.device)
        block_length = self.objective.params.block_length
        if block_length is None:
            masked = bernoulli_mask(t, loss_mask, generator=gens)
            noisy, normaliser = apply_mask(ids, masked, self.tokens.mask_id), inputs["response_length"]
        else:
            weight = self.objective.params.padding_block_weight
            padding = None if weight == 1.0 else torch.isin(ids, torch.tensor(self.tokens.stop_ids, device=ids.device))
            masked, hidden, normaliser = blockwise_mask(t, loss_mask, block_length, generator=gens, padding=padding,
                                                        padding_block_weight=weight)
            noisy = apply_mask(ids, masked | hidden, self.tokens.mask_id)
        model_attn = None if bool(attn.all()) else attn
        logits = self.denoiser_logits(model, noisy, ids, model_attn)
        loss, _ = masked_diffusion_loss(logits, ids, masked, t, normaliser)
        if model.training:
            self.record(mask_ratio=float(t.mean()), masked_tokens=float(masked.sum()) / ids.shape[0])  # per example
        return (loss, {"logits": logits}) if return_outputs else loss
