"""Preference trainer for diffusion LMs (TRL style): ``DPOConfig`` + ``DPOTrainer``.

A diffusion LM has no tractable sequence log-likelihood, so each sequence is scored by a Monte-Carlo
ELBO estimate (``dare.diffusion.elbo``) and the DPO loss (:func:`dare_dpo.loss.dpo_loss`) compares
policy and reference scores of the chosen and rejected responses. The estimator knobs are the
config's:

* ``mc_num`` corruptions per sequence (``n``, forward passes per sequence per model);
* ``mask_scheme``: ``bernoulli`` (i.i.d. ``t``, the plain ELBO), ``uniform`` or ``stratified`` mask
  counts (VRPO: the budget spread evenly over timesteps, one mask per timestep);
* ``share_corruptions``: score the reference with the *same* corruptions as the policy (VRPO's
  antithetic sampling: the policy/reference difference then has far less variance);
* ``elbo_normalizer``: ``length`` divides by the response length (DARE's ``/R``), ``none`` keeps nats.

Logits come from ``family.denoiser_logits`` (full attention, Dream's shift, or the block-diffusion
``[x_t ; x_0]`` forward), and which tokens count as response follows ``family.pad_in_response``,
so this file never names a family. The reference policy is
:class:`dare.modeling.lora.ReferencePolicy` (adapters disabled under LoRA, else a frozen copy).
Corruptions draw from torch's global RNG, which ``transformers.Trainer`` checkpoints, so a resumed
run redraws the same masks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from dare.diffusion.elbo import Corruptions, elbo_estimate, elbo_terms, sample_corruptions
from dare.modeling.lora import ReferencePolicy
from dare.trainers import DareConfig, DareTrainer
from dare_dpo.loss import DPOLossOutput, dpo_loss

__all__ = ["DPOConfig", "DPOTrainer"]


@dataclass
class DPOConfig(DareConfig):
    """``DareConfig`` plus the preference-optimisation knobs (defaults: plain ELBO-DPO)."""

    beta: float = field(default=0.1, metadata={"help": "KL coefficient beta of the DPO loss."})
    mc_num: int = field(default=1, metadata={"help": "Monte-Carlo corruptions per sequence (ELBO budget n)."})
    mask_scheme: str = field(default="bernoulli", metadata={"help": "bernoulli, uniform or stratified (VRPO) masks."})
    share_corruptions: bool = field(default=False, metadata={"help": "Score the reference with the policy's corruptions."})
    elbo_normalizer: str = field(default="length", metadata={"help": "length (divide by |y|) or none (nats)."})
    mask_eps: float = field(default=1e-3, metadata={"help": "Smallest Bernoulli mask ratio t."})

    def __post_init__(self):
        super().__post_init__()
        if self.beta <= 0:
            raise ValueError(f"beta must be positive, got {self.beta}")
        if self.mc_num < 1:
            raise ValueError(f"mc_num must be >= 1, got {self.mc_num}")
        if self.mask_scheme not in ("bernoulli", "uniform", "stratified"):
            raise ValueError(f"mask_scheme must be bernoulli, uniform or stratified, got {self.mask_scheme!r}")
        if self.elbo_normalizer not in ("length", "none"):
            raise ValueError(f"elbo_normalizer must be length or none, got {self.elbo_normalizer!r}")


class DPOTrainer(DareTrainer):
    """Trains on :class:`dare_dpo.data.PairCollator` batches with the ELBO-DPO loss.

    :param eval_pairs: optional held-out ``PairExample`` list; its preference metrics
        (:meth:`preference_metrics`) are logged every ``eval_steps`` beside ``eval_fn``'s.
    :param eval_seed: seed of the generator that draws the held-out corruptions (the same every time).

    Other arguments as :class:`dare.trainers.DareTrainer` (``family`` and ``tokens`` required). The
    reference policy (:class:`dare.modeling.lora.ReferencePolicy`) is taken from the model at
    construction, i.e. before a resumed checkpoint is loaded: it stays the initial policy.
    """

    def __init__(self, *args, eval_pairs: list | None = None, eval_seed: int = 0, **kwargs):
        bench = kwargs.pop("eval_fn", None)
        self.eval_pairs = eval_pairs
        self.eval_seed = eval_seed

        def eval_fn(model) -> dict[str, float]:
            out = self.preference_metrics(self.eval_pairs) if self.eval_pairs else {}
            return out | (bench(model) if bench is not None else {})

        super().__init__(*args, eval_fn=eval_fn if (eval_pairs or bench) else None, **kwargs)
        self.reference = ReferencePolicy(self.model)

    # ------------------------------------------------------------------ scores
    def corruptions(self, inputs: dict[str, Any], generator: torch.Generator | None = None) -> Corruptions:
        """``mc_num`` corruptions of every response in the batch (``loss_mask`` positions)."""
        a = self.args
        return sample_corruptions(inputs["loss_mask"], a.mc_num, a.mask_scheme, generator=generator, eps=a.mask_eps)

    def sequence_scores(self, model, inputs: dict[str, Any], corruptions: Corruptions) -> torch.Tensor:
        """ELBO estimate of every sequence of the batch under ``model``: ``[2B]`` float32."""
        ids = inputs["input_ids"]
        attn = inputs["attention_mask"]
        model_attn = None if bool(attn.all()) else attn

        def denoise(noisy: torch.Tensor) -> torch.Tensor:
            return self.family.denoiser_logits(model, noisy, ids, model_attn)

        terms = elbo_terms(denoise, ids, corruptions, self.tokens.mask_id)
        return elbo_estimate(terms, corruptions.lengths, self.args.elbo_normalizer)

    def pair_loss(self, model, inputs: dict[str, Any], generator: torch.Generator | None = None) -> tuple[DPOLossOutput, torch.Tensor]:
        """The DPO loss of a batch and the policy scores ``[2B]`` (chosen first)."""
        corr = self.corruptions(inputs, generator)
        policy = self.sequence_scores(model, inputs, corr)
        ref_corr = corr if self.args.share_corruptions else self.corruptions(inputs, generator)
        with torch.no_grad(), self.reference.model() as ref_model:
            ref = self.sequence_scores(ref_model, inputs, ref_corr)
        B = policy.shape[0] // 2
        return dpo_loss(policy[:B], policy[B:], ref[:B], ref[B:], self.args.beta), policy

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        out, policy = self.pair_loss(model, inputs)
        if model.training:
            B = policy.shape[0] // 2
            self.record(**{
                "rewards/chosen": float(out.chosen_rewards.detach().mean()),
                "rewards/rejected": float(out.rejected_rewards.detach().mean()),
                "rewards/margins": float(out.margins.detach().mean()),
                "rewards/accuracies": float(out.accuracy),
                "elbo/chosen": float(policy[:B].detach().mean()),
                "elbo/rejected": float(policy[B:].detach().mean()),
            })
        return (out.loss, {"chosen_rewards": out.chosen_rewards, "rejected_rewards": out.rejected_rewards}) if return_outputs else out.loss

    # ------------------------------------------------------------------ held-out metrics
    @torch.no_grad()
    def preference_metrics(self, pairs: list) -> dict[str, float]:
        """Held-out preference metrics with corruptions drawn from a generator seeded ``eval_seed``.

        :returns: ``loss``, ``rewards/accuracies`` (implicit reward of chosen > rejected),
            ``rewards/margins``, ``elbo/accuracy`` (the policy's own ELBO prefers chosen), means over pairs.
        """
        model = self.model
        was_training = model.training
        model.eval()
        gen = torch.Generator().manual_seed(self.eval_seed)
        bs = self.args.per_device_eval_batch_size
        sums = {"loss": 0.0, "rewards/accuracies": 0.0, "rewards/margins": 0.0, "elbo/accuracy": 0.0}
        try:
            for i in range(0, len(pairs), bs):
                chunk = pairs[i : i + bs]
                inputs = self._prepare_inputs(self.data_collator(chunk))
                out, policy = self.pair_loss(model, inputs, gen)
                B = len(chunk)
                sums["loss"] += float(out.losses.sum())
                sums["rewards/accuracies"] += float((out.chosen_rewards > out.rejected_rewards).float().sum())
                sums["rewards/margins"] += float(out.margins.sum())
                sums["elbo/accuracy"] += float((policy[:B] > policy[B:]).float().sum())
        finally:
            model.train(was_training)
        return {k: v / len(pairs) for k, v in sums.items()}
