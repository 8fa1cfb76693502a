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

Uniform-noise families (``ModelFamily.forward_process == "uniform"``, DiffusionGemma): NeMo AutoModel's
DiffusionGemma SFT (``recipes/dllm/train_ft.py`` ``DiffusionGemmaSFTRecipe``, ``components/loss/dllm_loss.py``):
per example ``t = (1 - eps) u + eps``, each response token is replaced with probability ``t`` by a uniformly random
token (:func:`dare.diffusion.uniform_noise`); the decoder canvas is the response window (response token ``j`` at
canvas position ``j``), one canvas block per example is drawn uniformly and scored;
``loss = Σ_{scored canvas} CE / N_canvas + w Σ_{valid pairs} CE_AR / N_AR`` (``BlockDiffusionCrossEntropyLoss``: every
response token of the drawn block, corrupted or not, no ``1/t``; ``encoder_ar_loss``: next-token CE of the encoder over
the clean sequence; ``w = encoder_loss_weight``), with two-pass self-conditioning (probability
``self_conditioning_p`` per example). The forward is the family's ``training_logits``. Draws per row after ``t``
and the corruption: one uniform for the block, one for the self-conditioning coin.

Randomness (:mod:`dare.randomness`): example ``i`` (its dataset index) at optimizer step ``s`` draws its
``t`` and its masks from a generator keyed by ``(seed, "sft", s, i)``, so the loss of a step does not
depend on the process count or on how the global batch is split into micro-batches, and a resumed run
recomputes the same masks.
"""

from __future__ import annotations

import torch

from dare.diffusion import (
    apply_mask,
    bernoulli_mask,
    blockwise_mask,
    masked_diffusion_loss,
    sample_mask_ratio,
    uniform_noise,
)
from dare.randomness import RowGenerators, rand
from dare.trainers.base import DareTrainer

__all__ = ["SFTTrainer", "canvas_sft_loss"]


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
        if getattr(self.family, "forward_process", "mask") == "uniform":
            loss, logits, masked = canvas_sft_loss(self.family, model, ids, loss_mask, attn, t, gens,
                                                   self.objective.params)
            if model.training:
                self.record(mask_ratio=float(t.mean()), masked_tokens=float(masked.sum()) / ids.shape[0])
            return (loss, {"logits": logits}) if return_outputs else loss
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


def canvas_sft_loss(family, model, ids: torch.Tensor, loss_mask: torch.Tensor, attention_mask: torch.Tensor,
                    t: torch.Tensor, generator, params) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """NeMo AutoModel's DiffusionGemma SFT loss (module docstring) of right-padded rows ``ids`` ``[B, S]``.

    :param loss_mask: ``[B, S]`` bool response positions (one contiguous run per row). :param attention_mask:
        ``[B, S]`` real tokens. :param t: ``[B]`` corruption levels. :param generator: the rows' generators (drawn
        after ``t``). :param params: :class:`dare_sft.objective.SFTParams`.
    :returns: ``(loss, canvas logits [B, R, V], corrupted [B, S] bool)``.
    """
    B, S = ids.shape
    device = ids.device
    config = model.config
    vocab = int(config.get_text_config().vocab_size)
    block = int(config.canvas_length)
    corrupted = bernoulli_mask(t, loss_mask, generator=generator)
    noisy = uniform_noise(ids, corrupted, vocab, generator)
    has = loss_mask.any(dim=1)
    prefix = torch.where(has, loss_mask.int().argmax(dim=1), torch.full((B,), S, device=device)).long()
    response = (attention_mask.long().sum(dim=1) - prefix).clamp(min=0)
    R = max(int(response.max()), 1)
    offsets = torch.arange(R, device=device)[None, :]
    index = (prefix[:, None] + offsets).clamp(max=S - 1)
    valid = offsets < response[:, None]
    canvas = torch.gather(noisy, 1, index)
    target = torch.gather(ids, 1, index)
    scored = torch.gather(loss_mask, 1, index) & valid
    num_blocks = ((response - 1).clamp(min=0) // block + 1).clamp(min=1)
    chosen = torch.floor(rand((B,), generator, device=device) * num_blocks.float()).long()
    scored = scored & (offsets // block == chosen[:, None])
    coin = rand((B,), generator, device=device) < params.self_conditioning_p
    logits, encoder_logits = family.training_logits(model, ids, attention_mask, prefix, canvas, coin)
    nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1),
                                            reduction="none").reshape(target.shape)
    weight = scored.to(nll.dtype)
    loss = (nll * weight).sum() / max(int(weight.sum()), 1)
    if params.encoder_loss_weight > 0:
        ar = torch.nn.functional.cross_entropy(encoder_logits[:, :-1].reshape(-1, encoder_logits.shape[-1]),
                                               ids[:, 1:].reshape(-1), reduction="none").reshape(B, S - 1)
        pairs = (attention_mask[:, :-1].bool() & attention_mask[:, 1:].bool()).to(ar.dtype)
        loss = loss + params.encoder_loss_weight * (ar * pairs).sum() / max(int(pairs.sum()), 1)
    return loss, logits, corrupted
