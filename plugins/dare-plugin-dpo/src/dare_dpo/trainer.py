"""Preference trainer for diffusion LMs (TRL style): ``DPOTrainer``, configured by :class:`dare.trainers.DareConfig`.

A diffusion LM has no tractable sequence log-likelihood, so each sequence is scored by a Monte-Carlo
ELBO estimate and the DPO loss (:func:`dare_dpo.loss.dpo_loss`) compares policy and reference scores of
the chosen and rejected responses. The estimate is the objective's sequence-level likelihood estimator
(:class:`dare.components.Estimator`, e.g. ``mc-elbo``): its passes corrupt the response tokens of each
sequence, :func:`dare.diffusion.estimators.score_pass` scores them from the family's aligned logits,
and a sequence's ELBO is the mean of its passes' sequence scores, divided by the response length with
``elbo_normalizer: length`` (DARE's ``/R``). With ``share_corruptions`` the reference policy is scored
on the *same* passes (VRPO's antithetic sampling: the policy/reference difference has far less
variance); otherwise it gets its own draw.

Logits come from ``family.denoiser_logits`` (full attention, Dream's shift, or the block-diffusion
``[x_t ; x_0]`` forward), and which tokens count as response follows ``family.pad_in_response``,
so this file never names a family. The reference policy is
:class:`dare.modeling.lora.ReferencePolicy` (adapters disabled under LoRA, else a frozen copy).
Randomness (:mod:`dare.randomness`): the passes of response ``k`` (``2 i`` chosen / ``2 i + 1`` rejected of
pair ``i``) at step ``s`` come from a generator keyed by ``(seed, "preference", s, k)`` (the reference's own
draw, when not shared, from ``"preference-ref"``), so the loss does not depend on the process count or the
batch split, and a resumed run redraws the same masks.
"""

from __future__ import annotations

from typing import Any

import torch

from dare.scaling import distributed, sharding
from dare.diffusion.estimators import Pass, ScoringBatch, score_pass
from dare.errors import DareError
from dare.modeling.lora import ReferencePolicy
from dare.randomness import RowGenerators
from dare.trainers.base import DareTrainer
from dare_dpo.loss import DPOLossOutput, dpo_loss

__all__ = ["DPOTrainer", "pair_scoring_batch"]


def pair_scoring_batch(inputs: dict[str, Any], mask_id: int) -> ScoringBatch:
    """A :class:`~dare.diffusion.estimators.ScoringBatch` over the whole ``[prompt ; response ; padding]`` rows of
    a :class:`~dare_dpo.data.PairCollator` batch: ``prompt_length`` 0 and the response tokens (``loss_mask``)
    as the completion, so estimators corrupt and score response tokens only.
    """
    return ScoringBatch(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
                        completion_mask=inputs["loss_mask"].bool(), prompt_length=0, mask_id=mask_id)


class DPOTrainer(DareTrainer):
    """Trains on :class:`dare_dpo.data.PairCollator` batches with the ELBO-DPO loss.

    :param estimator: the objective's sequence-level likelihood estimator (``DPO.make_estimator``).
    :param eval_pairs: optional held-out ``PairExample`` list; its preference metrics
        (:meth:`preference_metrics`) are logged every ``eval_steps`` beside ``eval_fn``'s.
    :param eval_seed: seed of the generator that draws the held-out corruptions (the same every time).

    Other arguments as :class:`dare.trainers.DareTrainer` (``family``, ``tokens`` and ``objective``
    required; the loss reads ``beta``, ``share_corruptions`` and ``elbo_normalizer`` from
    ``objective.params``). The reference policy (:class:`dare.modeling.lora.ReferencePolicy`) is taken from
    the model at construction, i.e. before a resumed checkpoint is loaded: it stays the initial policy.
    """

    def __init__(self, *args, estimator, eval_pairs: list | None = None, eval_seed: int = 0, **kwargs):
        bench = kwargs.pop("eval_fn", None)
        self.estimator = estimator
        self.eval_pairs = eval_pairs
        self.eval_seed = eval_seed

        def eval_fn(model) -> dict[str, float]:
            out = self.preference_metrics(self.eval_pairs) if self.eval_pairs else {}
            return out | (bench(model) if bench is not None else {})

        super().__init__(*args, eval_fn=eval_fn if (eval_pairs or bench) else None, **kwargs)
        self.reference = ReferencePolicy(self.model, self.accelerator, self.args.reference_placement)

    # ------------------------------------------------------------------ scores
    def draw_passes(self, batch: ScoringBatch, generator=None) -> list[Pass]:
        """The estimator's passes over every response of the batch (``generator``: per-row generators)."""
        return self.estimator.draw(batch, generator)

    def sequence_scores(self, model, batch: ScoringBatch, passes: list[Pass]) -> torch.Tensor:
        """ELBO estimate of every sequence of the batch under ``model``: ``[2B]`` float32 (mean over passes,
        per response token with ``elbo_normalizer: length``)."""
        def logits_fn(noisy, clean, attn):
            return self.denoiser_logits(model, noisy, clean, attn)

        if len(passes) > 1 and getattr(model, "find_unused_parameters", False) and torch.is_grad_enabled():
            raise DareError(
                f"this estimator runs {len(passes)} forwards of the model before one backward, which DDP cannot "
                "combine with its search for unused parameters (on for mixture-of-experts models such as LLaDA2, "
                "whose unrouted experts get no gradient): on several processes use one corruption pass per step "
                "(algorithm.params.estimator.params.mc_num: 1, i.e. DPO rather than VRPO's multi-sample ELBO), or "
                "train on one process")
        score = torch.stack([score_pass(logits_fn, batch, pas).sequence for pas in passes]).mean(dim=0)
        if self.objective.params.elbo_normalizer == "length":
            score = score / batch.response_lengths.clamp(min=1).to(score.dtype)
        return score

    def pair_loss(self, model, inputs: dict[str, Any], seed: int | None = None, step: int | None = None
                  ) -> tuple[DPOLossOutput, torch.Tensor]:
        """The DPO loss of a batch and the policy scores ``[2B]`` (chosen first).

        :param seed: key of the corruption draws (default ``args.seed``). :param step: default the current
            optimizer step.
        """
        p = self.objective.params
        seed = self.args.seed if seed is None else seed
        step = self.state.global_step if step is None else step
        batch = pair_scoring_batch(inputs, self.tokens.mask_id)
        passes = self.draw_passes(batch, RowGenerators.keyed(seed, "preference", step, inputs["index"]))
        policy = self.sequence_scores(model, batch, passes)
        ref_passes = passes if p.share_corruptions else self.draw_passes(
            batch, RowGenerators.keyed(seed, "preference-ref", step, inputs["index"]))
        with torch.no_grad(), self.reference.model() as ref_model:
            ref = self.sequence_scores(ref_model, batch, ref_passes)
        B = policy.shape[0] // 2
        return dpo_loss(policy[:B], policy[B:], ref[:B], ref[B:], p.beta), policy

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
        """Held-out preference metrics, the corruptions keyed by ``eval_seed`` and each pair's index (the same
        every time); each process scores its slice of the pairs and the sums are gathered. A sharded policy (FSDP2,
        ZeRO-3) scores as many batches on every process (:func:`dare.scaling.sharding.padded_shard`).

        :returns: ``loss``, ``rewards/accuracies`` (implicit reward of chosen > rejected),
            ``rewards/margins``, ``elbo/accuracy`` (the policy's own ELBO prefers chosen), means over pairs.
        """
        model = self.model
        was_training = model.training
        model.eval()
        bs = self.args.per_device_eval_batch_size
        sums = {"loss": 0.0, "rewards/accuracies": 0.0, "rewards/margins": 0.0, "elbo/accuracy": 0.0}
        if sharding.is_sharded(model):  # the same batches on every process (padding pairs dropped from the sums)
            mine, real = sharding.padded_shard(len(pairs))
        else:
            mine = list(distributed.shard(len(pairs)))
            real = len(mine)
        try:
            for i in range(0, len(mine), bs):
                chunk = [pairs[j] for j in mine[i : i + bs]]
                inputs = self._prepare_inputs(self.data_collator(chunk))
                out, policy = self.pair_loss(model, inputs, seed=self.eval_seed, step=0)
                B, k = len(chunk), max(min(real - i, len(chunk)), 0)  # k: this batch's own pairs
                sums["loss"] += float(out.losses[:k].sum())
                sums["rewards/accuracies"] += float((out.chosen_rewards[:k] > out.rejected_rewards[:k]).float().sum())
                sums["rewards/margins"] += float(out.margins[:k].sum())
                sums["elbo/accuracy"] += float((policy[:k] > policy[B : B + k]).float().sum())
        finally:
            model.train(was_training)
        parts = distributed.gather(sums)
        return {k: sum(part[k] for part in parts) / len(pairs) for k in sums}
