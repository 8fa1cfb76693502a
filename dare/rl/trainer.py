"""The online-RL trainer for diffusion LMs (TRL-style ``GRPOTrainer`` on ``transformers.Trainer``).

One optimizer step = one call of :meth:`GRPOTrainer.training_step` per gradient-accumulation slot:

1. **rollout** (first inner iteration of a rollout batch only): ``G = group_size`` completions per
   prompt with the spec's sampler (its own seeded ``torch.Generator``), decoded and scored with the
   spec's rewards, group advantages (:mod:`dare.rl.advantages`); then the estimator's passes are
   drawn for every inner iteration from the *mask* generator, and scored once under the rollout
   policy (``old``, only when ``num_iterations > 1``: with one iteration the ratio is identically 1
   and ``old = current.detach()`` gives the same value and gradient) and under the reference policy
   (``ref``, when ``beta > 0``). The same passes serve the old, reference and current policies
   (docs/algorithms.md §9.2).
2. **update** (inner iteration ``i``): the objective's loss over the passes of iteration ``i``, one
   backward per pass and row chunk (``micro_batch_size``), or the scalar-proxy replay for objectives
   whose loss depends on the pass mean (see :mod:`dare.rl.objective`). ``transformers.Trainer``
   then clips gradients (``max_grad_norm``) and steps the optimizer.

The ``num_iterations`` inner iterations reuse the rollout (the prompt sampler repeats each rollout
batch, :class:`~dare.rl.prompts.RepeatChunkSampler`). Reference policy (``beta > 0``, through
:class:`dare.modeling.lora.ReferencePolicy`): a frozen copy of the initial model, or, for a peft
model, the same model with its adapters disabled (no second copy).

Randomness: rollouts draw from ``rollout_generator`` and corruptions from ``mask_generator``
(seeded from ``seed + 1``/``seed + 2``, plus the process index); both states, and a rollout batch
that is still in use (checkpoint in the middle of its inner iterations), are saved in every
checkpoint (``rl_state.pt``, one file per process when data-parallel) and restored on resume, so a
resumed run draws the same completions and masks.

Metrics (logged every ``logging_steps``, means over the steps since the last log): ``reward``,
``reward_std``, ``reward/<name>``(+``_std``), ``reward_errors``, ``advantage_mean``/``_std``/``_abs``,
``frac_zero_std_groups``, ``rollout_edits`` (tokens the sampler rewrote after committing them, which
trajectory replay cannot represent), ``clip_fraction`` (+``_low``/``_high``), ``dual_clip_fraction``,
``approx_kl`` (vs old), ``kl`` (vs reference), ``entropy``, ``completion_length``, ``nfe/rollout``,
``nfe/update``, ``time/rollout``, ``time/score``, ``time/old_ref``, ``time/update`` (seconds).
"""

from __future__ import annotations

import os
import time
from typing import Any

import torch

from dare.components import Estimator
from dare.diffusion.estimators import Pass, PassScore, ScoringBatch, score_pass
from dare.modeling.lora import ReferencePolicy
from dare.rl.advantages import group_advantages
from dare.rl.losses import LossTerms, PassLossInput, SequenceLossInput
from dare.rl.prompts import RepeatChunkSampler, collate_prompts
from dare.rl.rollout import Rollout, sample_completions, score_completions
from dare.trainers.base import DareTrainer

__all__ = ["GRPOTrainer"]

RL_STATE_FILE = "rl_state.pt"


class GRPOTrainer(DareTrainer):
    """Online RL with any :class:`~dare.rl.objective.OnlineRLObjective` (module docstring).

    :param objective: the RL objective (loss, score reduction and every RL setting: ``objective.params``,
        an :class:`~dare.rl.objective.RLParams`).
    :param estimator: its likelihood estimator (``objective.make_estimator(...)``).
    :param sampler: the rollout sampler (``dare.components.Sampler``).
    :param reward: a ``dare.rewards.WeightedReward``.
    :param train_dataset: a :class:`~dare.rl.prompts.PromptDataset`.
    Other arguments as :class:`dare.trainers.DareTrainer` (``family`` and ``tokens`` are required).
    """

    def __init__(self, *args, objective, estimator: Estimator | None, sampler, reward, **kwargs):
        kwargs.setdefault("data_collator", collate_prompts)
        super().__init__(*args, objective=objective, **kwargs)
        self.params = objective.params
        self.estimator = estimator
        self.sampler = sampler
        self.reward = reward
        self.likelihood_temperature = objective.resolved_likelihood_temperature(sampler)
        # the sampler draws on the model's device; masks are drawn on the CPU (same masks on any device)
        # (seeds offset by the process index, so data-parallel workers draw different completions and masks)
        rank, seed = self.args.process_index, self.args.seed
        self.rollout_generator = torch.Generator(device=self.args.device).manual_seed(seed + 1 + rank)
        self.mask_generator = torch.Generator().manual_seed(seed + 2 + rank)
        self.buffers: dict[tuple[int, ...], Rollout] = {}
        self.reference = ReferencePolicy(self.accelerator.unwrap_model(self.model)) if self.params.beta > 0 else None

    # ------------------------------------------------------------------ data order
    def _get_train_sampler(self, train_dataset=None):
        a = self.args
        chunk = a.per_device_train_batch_size * a.gradient_accumulation_steps * a.world_size
        seed = a.data_seed if a.data_seed is not None else a.seed
        return RepeatChunkSampler(len(train_dataset or self.train_dataset), chunk, self.params.num_iterations, seed)

    # ------------------------------------------------------------------ likelihoods
    def _logits_fn(self, model):
        family = self.family
        return lambda noisy, clean, attn: family.denoiser_logits(model, noisy, clean, attn)

    def _row_chunks(self, n: int) -> list[slice]:
        step = self.params.micro_batch_size or n
        return [slice(i, min(i + step, n)) for i in range(0, n, step)]

    @torch.no_grad()
    def _score_all(self, model, batch: ScoringBatch, passes: list[Pass], with_entropy: bool = False) -> list[PassScore]:
        """Every pass scored under ``model`` without gradient (in row chunks), ``[N, G]`` tensors."""
        fn = self._logits_fn(model)
        out = []
        for pas in passes:
            parts = [score_pass(fn, batch.rows(r), pas.rows(r), self.likelihood_temperature, with_entropy)
                     for r in self._row_chunks(batch.num_rows)]
            entropy = torch.cat([x.entropy for x in parts]) if with_entropy else None
            out.append(PassScore(torch.cat([x.token for x in parts]), pas.scored, entropy))
        return out

    def _draw_passes(self, batch: ScoringBatch) -> list[Pass]:
        """The estimator's passes for one inner iteration, from the mask generator."""
        return self.estimator.draw(batch, self.mask_generator)

    # ------------------------------------------------------------------ rollout
    def generate_rollout(self, model, inputs: dict[str, list]) -> Rollout:
        """Sample, score, compute advantages, draw passes and the old/reference scores (module docstring)."""
        a = self.params
        was_training = model.training
        t0 = time.perf_counter()
        batch, gen_stats = sample_completions(
            model, self.family, self.tokens, self.processing_class, self.sampler, inputs["prompt"], a.group_size,
            generator=self.rollout_generator, batch_size=a.rollout_batch_size,
        )
        t1 = time.perf_counter()
        texts, rewards, parts, score_stats = score_completions(
            batch, self.processing_class, self.tokens, self.reward, inputs["row"], a.group_size
        )
        advantages = group_advantages(rewards, a.group_size, a.advantage).to(batch.input_ids.device)
        rollout = Rollout(batch=batch, texts=texts, rewards=rewards, reward_parts=parts, advantages=advantages)
        rollout.passes = [self._draw_passes(batch) for _ in range(a.num_iterations)]
        t2 = time.perf_counter()
        model.eval()
        try:
            if a.num_iterations > 1:
                rollout.old = [[x.token for x in self._score_all(model, batch, passes)] for passes in rollout.passes]
            if self.reference is not None:
                with self.reference.model() as ref_model:
                    rollout.ref = [[x.token for x in self._score_all(ref_model, batch, passes)] for passes in rollout.passes]
        finally:
            model.train(was_training)
        rollout.stats = {
            **self._reward_stats(rewards, parts, advantages),
            "completion_length": score_stats["completion_length"],
            "reward_errors": score_stats["reward_errors"],
            "nfe/rollout": gen_stats["nfe"],
            "rollout_edits": gen_stats["edits"],
            "time/rollout": t1 - t0,
            "time/score": score_stats["time/score"],
            "time/old_ref": time.perf_counter() - t2,
        }
        return rollout

    def _reward_stats(self, rewards, parts, advantages) -> dict[str, float]:
        groups = rewards.view(-1, self.params.group_size)
        stats = {
            "reward": float(rewards.mean()),
            "reward_std": float(rewards.std()) if rewards.numel() > 1 else 0.0,
            "advantage_mean": float(advantages.mean()),
            "advantage_std": float(advantages.std()) if advantages.numel() > 1 else 0.0,
            "advantage_abs": float(advantages.abs().mean()),
            "frac_zero_std_groups": float((groups.max(dim=1).values == groups.min(dim=1).values).float().mean()),
        }
        for name, values in parts.items():
            stats[f"reward/{name}"] = float(values.float().mean())
            stats[f"reward/{name}_std"] = float(values.float().std()) if values.numel() > 1 else 0.0
        return stats

    # ------------------------------------------------------------------ update
    def _update_per_pass(self, model, rollout: Rollout, iteration: int) -> tuple[float, dict[str, float]]:
        """Sum of the objective's per-pass losses, one backward per pass and row chunk.

        :returns: ``(loss of the whole batch, summed metric contributions)``; gradients are accumulated.
        """
        batch, passes = rollout.batch, rollout.passes[iteration]
        fn = self._logits_fn(model)
        lengths = batch.response_lengths
        total, metrics, forwards = 0.0, {}, 0
        entropy_sum, entropy_count = 0.0, 0.0
        for p, pas in enumerate(passes):
            num_tokens = float(pas.scored.sum())
            for r in self._row_chunks(batch.num_rows):
                with self.compute_loss_context_manager():
                    current = score_pass(fn, batch.rows(r), pas.rows(r), self.likelihood_temperature, with_entropy=True)
                old = rollout.old[iteration][p][r] if rollout.old is not None else current.token.detach()
                ref = rollout.ref[iteration][p][r] if rollout.ref is not None else None
                terms = self.objective.pass_loss(
                    PassLossInput(current=current, old=old, ref=ref, advantages=rollout.advantages[r],
                                  response_lengths=lengths[r], pass_index=p, num_passes=len(passes),
                                  num_tokens=num_tokens, num_sequences=batch.num_rows,
                                  total_response_tokens=float(lengths.sum())),
                )
                self._backward(terms.loss)
                total += float(terms.loss.detach())
                self._accumulate(metrics, terms)
                entropy_sum += float((current.entropy * current.scored).sum())
                entropy_count += float(current.scored.sum())
                forwards += int((pas.weight[:, r] != 0).flatten(1).any(dim=1).sum())
        metrics["nfe/update"] = float(forwards)
        metrics["entropy"] = entropy_sum / max(entropy_count, 1.0)
        return total, metrics

    def _update_pass_mean(self, model, rollout: Rollout, iteration: int) -> tuple[float, dict[str, float]]:
        """Scalar-proxy replay of ``L(mean_p s_p)`` with one pass in memory (docs/algorithms.md §3.8).

        ``z = mean_p s_p`` is computed without gradient, ``g = dL/dz`` on a leaf copy of ``z``, then
        every pass is replayed with gradient and ``sum_n s_p[n] g[n] / P`` backpropagated: by the
        chain rule this is exactly ``dL/dtheta``. Costs one extra forward per pass.
        """
        batch, passes = rollout.batch, rollout.passes[iteration]
        P = len(passes)
        with self.compute_loss_context_manager():
            scores = self._score_all(model, batch, passes, with_entropy=True)
        current = torch.stack([s.sequence for s in scores]).mean(dim=0)
        old = torch.stack([s.sum(-1) for s in rollout.old[iteration]]).mean(0) if rollout.old is not None else current
        ref = torch.stack([s.sum(-1) for s in rollout.ref[iteration]]).mean(0) if rollout.ref is not None else None
        proxy = current.detach().clone().requires_grad_(True)
        terms = self.objective.sequence_loss(
            SequenceLossInput(current=proxy, old=old.detach(), ref=ref, advantages=rollout.advantages,
                              response_lengths=batch.response_lengths),
        )
        (grad,) = torch.autograd.grad(terms.loss, proxy)
        fn = self._logits_fn(model)
        forwards = 0
        for pas in passes:
            for r in self._row_chunks(batch.num_rows):
                with self.compute_loss_context_manager():
                    seq = score_pass(fn, batch.rows(r), pas.rows(r), self.likelihood_temperature).sequence
                self._backward((seq * grad[r]).sum() / P)
                forwards += int((pas.weight[:, r] != 0).flatten(1).any(dim=1).sum())
        metrics: dict[str, float] = {}
        self._accumulate(metrics, terms)
        metrics["nfe/update"] = float(2 * forwards)
        scored = torch.stack([s.scored for s in scores]).float()
        metrics["entropy"] = float((torch.stack([s.entropy for s in scores]) * scored).sum() / scored.sum().clamp(min=1.0))
        return float(terms.loss.detach()), metrics

    def _backward(self, loss: torch.Tensor) -> None:
        self.accelerator.backward(loss / self.current_gradient_accumulation_steps)

    @staticmethod
    def _accumulate(metrics: dict[str, float], terms: LossTerms) -> None:
        for k, v in terms.metrics.items():
            metrics[k] = metrics.get(k, 0.0) + float(v)

    # ------------------------------------------------------------------ the training step
    def training_step(self, model, inputs: dict[str, Any], num_items_in_batch=None) -> torch.Tensor:
        """Rollout (first inner iteration) + one inner iteration of the objective (module docstring)."""
        model.train()
        a = self.params
        iteration = self.state.global_step % a.num_iterations
        key = tuple(inputs["index"])
        rollout = self.buffers.get(key) if iteration > 0 else None
        if rollout is None:
            rollout = self.generate_rollout(model, inputs)
            self.record(**rollout.stats)
        if iteration < a.num_iterations - 1:
            self.buffers[key] = rollout
        else:
            self.buffers.pop(key, None)
        t0 = time.perf_counter()
        update = self._update_pass_mean if self.objective.score_reduction == "pass_mean" else self._update_per_pass
        loss, metrics = update(model, rollout, iteration)
        metrics["time/update"] = time.perf_counter() - t0
        self.record(**metrics)
        return torch.tensor(loss / self.current_gradient_accumulation_steps, device=self.args.device)

    # ------------------------------------------------------------------ checkpointed RL state
    def rl_state(self) -> dict[str, Any]:
        """Generator states and the rollout batches still in use (saved with every checkpoint)."""
        return {
            "rollout_generator": self.rollout_generator.get_state(),
            "mask_generator": self.mask_generator.get_state(),
            "buffers": self.buffers,
        }

    def load_rl_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`rl_state`."""
        self.rollout_generator.set_state(state["rollout_generator"])
        self.mask_generator.set_state(state["mask_generator"])
        self.buffers = dict(state["buffers"])

    def _rl_state_file(self, directory: str) -> str:
        """``rl_state.pt``, or ``rl_state_<rank>.pt`` per process when training data-parallel."""
        name = RL_STATE_FILE if self.args.world_size <= 1 else f"rl_state_{self.args.process_index}.pt"
        return os.path.join(directory, name)

    def _save_rng_state(self, output_dir: str) -> None:
        super()._save_rng_state(output_dir)
        os.makedirs(output_dir, exist_ok=True)
        torch.save(self.rl_state(), self._rl_state_file(output_dir))

    def _load_rng_state(self, checkpoint: str | None) -> None:
        super()._load_rng_state(checkpoint)
        path = self._rl_state_file(checkpoint) if checkpoint else None
        if path and os.path.isfile(path):
            self.load_rl_state(torch.load(path, weights_only=False))
