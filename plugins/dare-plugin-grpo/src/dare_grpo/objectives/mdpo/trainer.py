"""The MDPO trainer: trajectory rollout, step-wise rewards and advantages, top-K step rows, weighted PPO.

(MDPO, arXiv 2508.13148; DARE ``dllm_ray_trainer.py`` mdpo branch; docs/algorithms.md §3.4.) One rollout batch:

1. :func:`~dare_grpo.objectives.mdpo.rollout.mdpo_decode` on ``G`` copies of each prompt (the rollout generator);
2. the final completions are scored (the logged ``reward``) and every step's prediction ``y^(s)``
   (``r_s``, ``T`` reward calls per completion); :func:`~dare_grpo.objectives.mdpo.step_scores`,
   per-step group advantages, the top-K steps;
3. the ``K x N`` selected (step, completion) rows become a :class:`~dare.diffusion.estimators.ScoringBatch`
   whose clean sequence is ``[prompt ; y^(s)]`` and one :class:`~dare.diffusion.estimators.Pass` masking the
   positions masked in ``x^(s)`` (so the scored input is exactly ``x^(s)``); old (``num_iterations > 1``)
   and reference (``beta > 0``) log-probs are taken once with that pass.

The update (every inner iteration) replays the pass per row chunk with gradient and backpropagates
:meth:`~dare_grpo.objectives.mdpo.MDPO.step_loss`.

On N processes each process decodes its prompts' groups with per-completion generators (keyed by the step and
the completion's global index, as every DARE rollout: the samples do not depend on the batch split), the top-K
steps are chosen by ``sum_b |A_{b,s}|`` over every process's completions, and the loss normaliser ``sum mask``
is the whole batch's with each process's loss multiplied by N (DDP averages the gradients): N processes train
and log what one does (``tests/test_distributed.py``). Logged besides the base metrics: ``mdpo/mean_step_reward``,
``mdpo/final_step_reward``, ``mdpo/num_train_steps``.

The update is the public function :func:`mdpo_update`, which :class:`MDPOTrainer`'s ``update`` hook
(:class:`dare.rl.hooks.RLStepHooks`) and the parity test (``tests/parity/test_mdpo.py``) call alike.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from dare.diffusion.estimators import Pass, ScoringBatch, score_pass
from dare.rl import step
from dare.sampling import completion_mask as family_completion_mask
from dare.sampling.options import DecodeOptions
from dare.sampling.text import encode_prompts
from dare_grpo.objectives.mdpo.loss import StepLossInput, select_steps, step_advantages, step_scores
from dare.rl.batch_totals import whole_batch_metrics, whole_batch_sums, whole_batch_values
from dare.rl.rollout import Rollout, score_completions
from dare_grpo.objectives.mdpo.rollout import MDPOTrajectory, mdpo_decode
from dare.rl.trainer import GRPOTrainer

__all__ = ["MDPORollout", "MDPOTrainer", "step_rows", "mdpo_update"]


@dataclass
class MDPORollout(Rollout):
    """A :class:`~dare.rl.rollout.Rollout` plus the selected step rows (``R = K x N``).

    * ``steps``: ``[K]`` selected step indices; ``step_batch``: ``R`` rows ``[prompt ; y^(s)]``;
    * ``step_pass``: the pass masking ``x^(s)``'s masks; ``step_mask``: ``[R, G]`` bool scored positions;
    * ``step_advantages``: ``[R]``; ``confidence``: ``[R, G]`` float32;
    * ``step_old`` / ``step_ref``: ``[R, G]`` float32 or None.
    """

    steps: torch.Tensor | None = None
    step_batch: ScoringBatch | None = None
    step_pass: Pass | None = None
    step_mask: torch.Tensor | None = None
    step_advantages: torch.Tensor | None = None
    confidence: torch.Tensor | None = None
    step_old: torch.Tensor | None = None
    step_ref: torch.Tensor | None = None


def step_rows(traj: MDPOTrajectory, prompt_ids: torch.Tensor, prompt_attn: torch.Tensor, steps: torch.Tensor,
              response: torch.Tensor, mask_id: int) -> tuple[ScoringBatch, Pass, torch.Tensor, torch.Tensor]:
    """The selected steps as scoring rows, step-major (row ``k N + b`` = step ``steps[k]`` of completion ``b``).

    :param response: ``[N, G]`` bool, positions of the final response (the family's convention).
    :returns: ``(batch, pass, mask [R, G] bool, confidence [R, G] float32)``.
    """
    N, _, G = traj.inputs.shape
    K = steps.numel()
    inputs = traj.inputs[:, steps].transpose(0, 1).reshape(K * N, G)
    preds = traj.predictions[:, steps].transpose(0, 1).reshape(K * N, G)
    conf = traj.confidence[:, steps].transpose(0, 1).reshape(K * N, G)
    mask = (inputs == mask_id) & response.repeat(K, 1)
    prompts, attn = prompt_ids.repeat(K, 1), prompt_attn.repeat(K, 1)
    P = prompts.shape[1]
    batch = ScoringBatch(
        input_ids=torch.cat([prompts, preds], 1),
        attention_mask=torch.cat([attn.long(), torch.ones_like(preds)], 1),
        completion_mask=torch.ones_like(mask),
        prompt_length=P,
        mask_id=mask_id,
    )
    pas = Pass(mask=torch.cat([torch.zeros_like(prompts, dtype=torch.bool), mask], 1)[None], weight=mask.float()[None])
    return batch, pas, mask, conf


class MDPOTrainer(GRPOTrainer):
    """GRPO trainer with MDPO's rollout and update (module docstring)."""

    own_decoder_draws_per_row = True  # mdpo_decode draws per row, whatever the sampler

    # ------------------------------------------------------------------ rollout
    def _decode(self, model, prompt_ids, attn) -> MDPOTrajectory:
        settings = self.objective.rollout_settings(self.sampler)
        size = self.params.rollout_batch_size or prompt_ids.shape[0]
        family, gen = self.family, self.rollout_generator
        parts = [mdpo_decode(lambda ids, am: family.logits(model, ids, am), prompt_ids[i:i + size], attn[i:i + size],
                             DecodeOptions(settings, self.tokens, gen.rows(slice(i, i + size))))
                 for i in range(0, prompt_ids.shape[0], size)]
        return MDPOTrajectory(*(torch.cat([getattr(p, k) for p in parts]) for k in
                                ("sequences", "inputs", "predictions", "confidence")), nfe=sum(p.nfe for p in parts))

    def _final_batch(self, traj: MDPOTrajectory, attn: torch.Tensor, P: int) -> ScoringBatch:
        tokens = self.tokens
        comp = traj.sequences[:, P:]
        comp = torch.where(comp == tokens.mask_id, torch.full_like(comp, tokens.eos_id), comp)
        cmask = family_completion_mask(comp, tokens.stop_ids, self.family.pad_in_response)
        comp = torch.where(cmask, comp, torch.full_like(comp, tokens.pad_id))
        return ScoringBatch(torch.cat([traj.sequences[:, :P], comp], 1), torch.cat([attn.long(), cmask.long()], 1),
                            cmask, P, tokens.mask_id)

    def _step_rewards(self, traj: MDPOTrajectory, final: ScoringBatch, rows) -> torch.Tensor:
        """``[N, T]`` rewards of every step's prediction."""
        P, out = final.prompt_length, []
        for s in range(traj.predictions.shape[1]):
            ids = torch.cat([final.input_ids[:, :P], traj.predictions[:, s]], 1)
            b = ScoringBatch(ids, torch.ones_like(ids), torch.ones_like(traj.predictions[:, s], dtype=torch.bool), P,
                             self.tokens.mask_id)
            scored = score_completions(b, self.processing_class, self.tokens, self.reward, rows, self.params.group_size)
            out.append(scored[1])
        return torch.stack(out, 1)

    def generate_rollout(self, model, inputs) -> MDPORollout:
        """Decode, reward every step, select steps, score old/reference (module docstring)."""
        a = self.params
        device = next(model.parameters()).device
        prompts = [p for p in inputs["prompt"] for _ in range(a.group_size)]
        prompt_ids, attn = encode_prompts(self.processing_class, prompts, self.tokens.pad_id, device)
        was_training = model.training
        t0 = time.perf_counter()
        model.eval()
        try:
            traj = self._decode(self.accelerator.unwrap_model(model), prompt_ids, attn)
        finally:
            model.train(was_training)
        t1 = time.perf_counter()
        final = self._final_batch(traj, attn, prompt_ids.shape[1])
        texts, rewards, parts, score_stats = score_completions(final, self.processing_class, self.tokens, self.reward,
                                                               inputs["row"], a.group_size)
        step_r = self._step_rewards(traj, final, inputs["row"])
        adv = step_advantages(step_scores(step_r), a.group_size, a.advantage, a.advantage_std_eps).to(device)
        # the top-K steps of the whole batch: every process's |A| rows, summed in one order
        every = whole_batch_values({"abs_advantage": adv.abs()})["abs_advantage"].view(-1, adv.shape[1])
        steps = select_steps(every, self.objective.params.sample_train_steps).to(device)
        batch, pas, mask, conf = step_rows(traj, prompt_ids, attn, steps.to(device), final.completion_mask,
                                           self.tokens.mask_id)
        batch = step.rollout_batch(batch, a)  # prompt_padding (dare.rl.conventions)
        rollout = MDPORollout(batch=final, texts=texts, rewards=rewards, reward_parts=parts,
                              advantages=adv[:, steps].transpose(0, 1).reshape(-1), steps=steps, step_batch=batch,
                              step_pass=pas, step_mask=mask, confidence=conf)
        rollout.step_advantages = rollout.advantages
        t2 = time.perf_counter()
        model.eval()
        try:
            if a.num_iterations > 1:
                rollout.step_old = self.score_passes(model, batch, [pas])[0].token
            if self.reference is not None:
                with self.reference.model() as ref_model:
                    rollout.step_ref = self.score_passes(ref_model, batch, [pas])[0].token
        finally:
            model.train(was_training)
        rollout.stats = {
            **self.reward_stats(rewards, parts, rollout.advantages),
            "completion_length": score_stats["completion_length"],
            "reward_errors": score_stats["reward_errors"],
            "nfe/rollout": float(traj.nfe),
            "time/rollout": t1 - t0,
            "time/score": t2 - t1,
            "time/old_ref": time.perf_counter() - t2,
            "mdpo/mean_step_reward": float(step_r.mean()),
            "mdpo/final_step_reward": float(step_r[:, -1].mean()),
            "mdpo/num_train_steps": float(steps.numel()),
        }
        return rollout

    # ------------------------------------------------------------------ update
    def update(self, model, rollout: MDPORollout, iteration: int) -> tuple[float, dict[str, float]]:
        """:func:`mdpo_update` over the model's logits."""
        return mdpo_update(self.step_settings, self.logits_fn(model), rollout, self.backprop)


def mdpo_update(settings: step.StepSettings, fn: step.LogitsFn, rollout: MDPORollout,
                backprop: step.Backprop | None = None) -> tuple[float, dict[str, float]]:
    """MDPO's loss (:meth:`~dare_grpo.objectives.mdpo.MDPO.step_loss`) over the selected step rows of ``rollout``,
    one backward per row chunk of ``micro_batch_size`` rows.

    :returns: ``(loss of the whole batch, metrics)``; gradients are accumulated into the parameters behind ``fn``.
    """
    backprop = backprop or step.Backprop()
    batch, pas, T = rollout.step_batch, rollout.step_pass, settings.temperature
    (num_tokens,), world = whole_batch_sums(float(rollout.step_mask.sum()))
    total, metrics, forwards = 0.0, {}, 0
    entropy_sum, entropy_count = 0.0, 0.0
    chunks = step.row_chunks(batch.num_rows, settings.params.micro_batch_size)
    pads = backprop.pads(len(chunks))
    first = slice(0, 1)
    pad_loss = lambda: score_pass(fn, batch.rows(first), pas.rows(first), T).token.sum()  # noqa: E731
    for r in chunks:
        with backprop.context():
            cur = score_pass(fn, batch.rows(r), pas.rows(r), T, with_entropy=True)
        old = rollout.step_old[r] if rollout.step_old is not None else cur.token.detach()
        ref = rollout.step_ref[r] if rollout.step_ref is not None else None
        terms = settings.objective.step_loss(
            StepLossInput(current=cur.token, old=old, ref=ref, mask=rollout.step_mask[r],
                          confidence=rollout.confidence[r], advantages=rollout.step_advantages[r],
                          completion_length=batch.completion_length, num_tokens=num_tokens),
        )
        backprop.backward_or_pad(terms.loss * world, pad_loss)
        total += float(terms.loss.detach()) * world
        step.accumulate_metrics(metrics, terms)
        entropy_sum += float((cur.entropy * cur.scored).sum())
        entropy_count += float(cur.scored.sum())
        forwards += int(cur.scored.any(dim=1).sum())
    backprop.pad(pads, pad_loss)
    metrics, entropy_sum, entropy_count = whole_batch_metrics(metrics, entropy_sum, entropy_count)
    metrics["nfe/update"] = float(forwards)
    metrics["entropy"] = entropy_sum / max(entropy_count, 1.0)
    return total, metrics
