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
   whose loss depends on the pass mean (see :mod:`dare.rl.objective`); rows that add exactly zero gradient
   (advantage 0 in a group of tied rewards) are skipped (``skip_zero_advantage``). The update is
   :class:`dare.rl.update.PolicyUpdate`'s (mixed into :class:`GRPOTrainer`).
   ``transformers.Trainer`` then clips gradients (``max_grad_norm``) and steps the optimizer.

The ``num_iterations`` inner iterations reuse the rollout (the prompt sampler repeats each rollout
batch, :class:`~dare.rl.prompts.RepeatChunkSampler`). Reference policy (``beta > 0``, through
:class:`dare.modeling.lora.ReferencePolicy`): a frozen copy of the initial model, or, for a peft
model, the same model with its adapters disabled (no second copy).

Randomness (:mod:`dare.randomness`): completion ``j`` of prompt ``i`` is example ``i * G + j``; its rollout
noise is drawn from a generator keyed by ``(seed, "rollout", step, i * G + j)`` (when the sampler draws
per row: ``Sampler.supports_row_generators``) and its likelihood-estimator passes of inner iteration ``k``
from ``(seed, "rl-passes", step, (i * G + j) * num_iterations + k)``. So 1 and N processes draw the same
completions and masks, nothing random needs checkpointing, and a resumed run recomputes the same keys.
A checkpoint never falls inside a rollout's inner iterations (a save due there is deferred to the end of
the rollout, :class:`RolloutBoundarySaves`), so no rollout buffer is saved either. Loss normalisers (scored
tokens, rows) are summed over processes (:func:`dare.rl.batch_totals.whole_batch_normalisers`), and every process
runs the same number of backwards per update (zero-gradient pads where its rows need fewer passes:
:meth:`dare.rl.update.PolicyUpdate._backward_pads`).

Metrics (logged every ``logging_steps``, means over the steps since the last log): ``reward``,
``reward_std``, ``reward/<name>``(+``_std``), ``reward_errors``, ``advantage_mean``/``_std``/``_abs``,
``frac_zero_std_groups``, ``rollout_edits`` (tokens the sampler rewrote after committing them, which
trajectory replay cannot represent), ``clip_fraction`` (+``_low``/``_high``), ``dual_clip_fraction``,
``approx_kl`` (vs old), ``kl`` (vs reference), ``entropy``, ``completion_length``, ``nfe/rollout``,
``nfe/update``, ``time/rollout``, ``time/score``, ``time/old_ref``, ``time/update`` (seconds). The per-pass
update's loss metrics (clip fractions, ``approx_kl``, ``kl``) and ``entropy`` are the whole batch's on any number
of processes (:func:`dare.rl.batch_totals.whole_batch_metrics`), and so are the rollout statistics (means and
standard deviations, :func:`dare.rl.batch_totals.whole_batch_values`).
"""

from __future__ import annotations

import time
from typing import Any

import torch
from transformers import TrainerCallback

from dare import progress
from dare.components import Estimator
from dare.diffusion.estimators import Pass, PassScore, ScoringBatch, score_pass
from dare.modeling.lora import ReferencePolicy
from dare.randomness import STREAMS, RowGenerators, key_seed
from dare.rl.advantages import group_advantages, zero_std_groups
from dare.rl.conventions import attend_prompt_padding, score_through_first_stop
from dare.rl.batch_totals import whole_batch_values
from dare.rl.prompts import RepeatChunkSampler, collate_prompts
from dare.rl.rollout import Rollout, sample_completions, score_completions
from dare.rl.update import PolicyUpdate
from dare.trainers.base import DareTrainer

__all__ = ["GRPOTrainer"]

class RolloutBoundarySaves(TrainerCallback):
    """Defer a checkpoint due inside a rollout's inner iterations to the step that ends the rollout, so a
    checkpoint never needs the rollout buffer (and resume replays whole rollouts)."""

    def __init__(self, num_iterations: int):
        self.num_iterations = num_iterations
        self.pending = False

    def on_step_end(self, args, state, control, **kwargs):
        at_boundary = state.global_step % self.num_iterations == 0
        if control.should_save and not at_boundary:
            control.should_save, self.pending = False, True
        elif self.pending and at_boundary:
            control.should_save, self.pending = True, False
        return control


class GRPOTrainer(PolicyUpdate, DareTrainer):
    #: Whether this trainer decodes rollouts with its own loop that draws per row (MDPO), whatever the sampler;
    #: otherwise its rollouts draw per row when the rollout sampler does (``Sampler.supports_row_generators``).
    own_decoder_draws_per_row = False

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
        # per-example generators (dare.randomness), keyed by (seed, step, completion index) at each rollout
        self.row_generators = self.own_decoder_draws_per_row or getattr(sampler, "supports_row_generators", False)
        self.rollout_generator = None
        self.mask_generator = None
        self._keys: tuple[int, list[int]] | None = None  # (rollout step, completion indices) of the current rollout
        self.buffers: dict[tuple[int, ...], Rollout] = {}
        if self.params.num_iterations > 1:
            self.add_callback(RolloutBoundarySaves(self.params.num_iterations))
        # a KL against the rollout policy (TraceRL's kl_target: rollout) needs no reference copy
        needs_reference = self.params.beta > 0 and getattr(self.params, "kl_target", "reference") == "reference"
        placement = self.args.reference_placement  # train.reference_placement: sharded like the policy, or whole bf16
        self.reference = (ReferencePolicy(self.accelerator.unwrap_model(self.model), self.accelerator, placement)
                          if needs_reference else None)

    # ------------------------------------------------------------------ data order
    def _get_train_sampler(self, train_dataset=None):
        a = self.args
        chunk = a.per_device_train_batch_size * a.gradient_accumulation_steps * a.world_size
        seed = a.data_seed if a.data_seed is not None else a.seed
        return RepeatChunkSampler(len(train_dataset or self.train_dataset), chunk, self.params.num_iterations, seed)

    # ------------------------------------------------------------------ likelihoods
    def _logits_fn(self, model):
        return lambda noisy, clean, attn: self.denoiser_logits(model, noisy, clean, attn)

    def _row_chunks(self, n: int) -> list[slice]:
        step = self.params.micro_batch_size or max(n, 1)
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

    @torch.no_grad()
    def _score_rows(self, model, batch: ScoringBatch, passes: list[Pass], rows: torch.Tensor | None) -> list[torch.Tensor]:
        """``[N, G]`` token scores of every pass under ``model`` (no gradient), computed for ``rows`` only (all
        when None) and 0 elsewhere: the old-policy scores of the rows the update runs (:meth:`_trained_rows`)."""
        if rows is None:
            return [x.token for x in self._score_all(model, batch, passes)]
        fn = self._logits_fn(model)
        out = []
        for pas in passes:
            token = torch.zeros(pas.weight.shape[1:], dtype=torch.float32, device=pas.weight.device)
            for r in (rows[c] for c in self._row_chunks(len(rows))):
                token[r] = score_pass(fn, batch.rows(r), pas.rows(r), self.likelihood_temperature).token
            out.append(token)
        return out

    # ------------------------------------------------------------------ per-example randomness
    def _set_rollout_keys(self, prompt_indices: list[int]) -> None:
        """Key this rollout's draws: completion ``j`` of prompt ``i`` is example ``i * group_size + j`` at the
        current step (dare.randomness), so its noise does not depend on the process count or batch split."""
        G = self.params.group_size
        completions = [int(i) * G + j for i in prompt_indices for j in range(G)]
        step = int(self.state.global_step)
        self._keys = (step, completions)
        seed = self.args.seed
        if self.row_generators:
            self.rollout_generator = RowGenerators.keyed(seed, "rollout", step, completions, device=self.args.device)
        else:  # the sampler draws batch-wide: keyed by the step and the rollout's first prompt
            key = key_seed(seed, STREAMS["rollout"], step, int(prompt_indices[0]) if prompt_indices else 0)
            self.rollout_generator = torch.Generator(device=self.args.device).manual_seed(key)

    def _draw_passes(self, batch: ScoringBatch, iteration: int = 0) -> list[Pass]:
        """The estimator's passes of inner iteration ``iteration``, each completion from its own generator."""
        step, completions = self._keys if self._keys is not None else (0, list(range(batch.num_rows)))
        n = self.params.num_iterations
        self.mask_generator = RowGenerators.keyed(self.args.seed, "rl-passes", step, [c * n + iteration for c in completions])
        passes = self.estimator.draw(batch, self.mask_generator)
        if self.params.response_tokens == "through_first_eos":  # dare.rl.conventions
            passes = score_through_first_stop(passes, batch, self.tokens.stop_ids)
        return passes

    # ------------------------------------------------------------------ rollout
    def generate_rollout(self, model, inputs: dict[str, list]) -> Rollout:
        """Sample, score, compute advantages, draw passes and the old/reference scores (module docstring)."""
        a = self.params
        was_training = model.training
        t0 = time.perf_counter()
        total = len(inputs["prompt"]) * a.group_size
        with progress.task(f"rollout for step {self.state.global_step + 1}", total, "completions", final_line=False) as bar:
            # the sampler gets the model itself, not a DDP/DeepSpeed wrapper (no gradient: nothing to synchronise;
            # samplers read model.config, e.g. LLaDA2's block length)
            batch, gen_stats = sample_completions(
                self.accelerator.unwrap_model(model), self.family, self.tokens, self.processing_class, self.sampler,
                inputs["prompt"], a.group_size, generator=self.rollout_generator, batch_size=a.rollout_batch_size,
                on_batch=bar.advance,
            )
        if a.prompt_padding == "attend":  # dare.rl.conventions
            batch = attend_prompt_padding(batch)
        t1 = time.perf_counter()
        texts, rewards, parts, score_stats = score_completions(
            batch, self.processing_class, self.tokens, self.reward, inputs["row"], a.group_size
        )
        advantages = group_advantages(rewards, a.group_size, a.advantage, a.advantage_std_eps).to(batch.input_ids.device)
        rollout = Rollout(batch=batch, texts=texts, rewards=rewards, reward_parts=parts, advantages=advantages)
        rollout.passes = [self._draw_passes(batch, i) for i in range(a.num_iterations)]
        extra_stats = self._after_passes(rollout)
        t2 = time.perf_counter()
        model.eval()
        try:
            if a.num_iterations > 1:
                rows = self._trained_rows(rollout)
                rollout.old = [self._score_rows(model, batch, passes, rows) for passes in rollout.passes]
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
            **extra_stats,
        }
        return rollout

    def _after_passes(self, rollout: Rollout) -> dict[str, float]:
        """A hook between drawing the passes and scoring the old/reference policies: a subclass may replace
        ``rollout.advantages`` here (TraceRL's value model: ``[N, G]`` token advantages), so the rows the update runs
        (:meth:`_trained_rows`) follow them. :returns: extra rollout statistics (default none)."""
        return {}

    def _reward_stats(self, rewards, parts, advantages) -> dict[str, float]:
        """Rollout statistics of the whole batch over every process (means and standard deviations)."""
        every = whole_batch_values({"reward": rewards, "advantage": advantages,
                                    **{f"part/{k}": v for k, v in parts.items()}})
        rewards, advantages = every["reward"], every["advantage"]
        parts = {k: every[f"part/{k}"] for k in parts}
        stats = {
            "reward": float(rewards.mean()),
            "reward_std": float(rewards.std()) if rewards.numel() > 1 else 0.0,
            "advantage_mean": float(advantages.mean()),
            "advantage_std": float(advantages.std()) if advantages.numel() > 1 else 0.0,
            "advantage_abs": float(advantages.abs().mean()),
            "frac_zero_std_groups": float(zero_std_groups(rewards, self.params.group_size).float().mean()),
        }
        for name, values in parts.items():
            stats[f"reward/{name}"] = float(values.float().mean())
            stats[f"reward/{name}_std"] = float(values.float().std()) if values.numel() > 1 else 0.0
        return stats

    # ------------------------------------------------------------------ the training step
    def training_step(self, model, inputs: dict[str, Any], num_items_in_batch=None) -> torch.Tensor:
        """Rollout (first inner iteration) + one inner iteration of the objective (module docstring)."""
        model.train()
        a = self.params
        iteration = self.state.global_step % a.num_iterations
        key = tuple(inputs["index"])
        rollout = self.buffers.get(key) if iteration > 0 else None
        if rollout is None:
            self._set_rollout_keys(list(inputs["index"]))
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
        self.guard.observe_loss(loss)
        return torch.tensor(loss / self.current_gradient_accumulation_steps, device=self.args.device)
