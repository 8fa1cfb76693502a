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
   :func:`dare.rl.step.update`.
   ``transformers.Trainer`` then clips gradients (``max_grad_norm``) and steps the optimizer.

Every stage is a public function of :mod:`dare.rl.step` (the trainer adapts it: the model's logits function, the
per-example generators, ``transformers.Trainer``'s backward); an objective changes the step through the hooks that
:class:`dare.rl.hooks.RLStepHooks` lists, never through a private method.

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
:meth:`dare.rl.step.Backprop.pads`).

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
from dare.diffusion.estimators import Pass, PassScore, ScoringBatch
from dare.errors import DareError
from dare.modeling.lora import ReferencePolicy
from dare.randomness import STREAMS, RowGenerators, key_seed
from dare.rl import step
from dare.rl.advantages import zero_std_groups
from dare.rl.batch_totals import whole_batch_values
from dare.rl.hooks import RLStepHooks
from dare.rl.prompts import RepeatChunkSampler, collate_prompts
from dare.rl.reference_sync import reference_sync
from dare.rl.reward_guard import NonFiniteRewardGuard
from dare.rl.rollout import Rollout, sample_completions, score_completions
from dare.sampling.bundle import DecodingBundle
from dare.trainers.base import DareTrainer

__all__ = ["GRPOTrainer", "RolloutBoundarySaves"]


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


class GRPOTrainer(RLStepHooks, DareTrainer):
    """Online RL with any :class:`~dare.rl.objective.OnlineRLObjective` (module docstring): an adapter over the
    public step (:mod:`dare.rl.step`) whose hooks (:class:`~dare.rl.hooks.RLStepHooks`) objectives override.

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
        self.reward_guard = NonFiniteRewardGuard(self.args.max_nonfinite_steps)
        self.likelihood_temperature = objective.resolved_likelihood_temperature(sampler)
        self.step_settings = step.StepSettings(objective, self.likelihood_temperature, tuple(self.tokens.stop_ids),
                                               *self._activation_bound())
        #: the step's backwards: ``accelerator.backward`` over the gradient-accumulation steps, under autocast
        self.backprop = step.Backprop(backward=self._accumulated_backward, context=self.compute_loss_context_manager)
        # per-example generators (dare.randomness), keyed by (seed, step, completion index) at each rollout
        self.row_generators = self.own_decoder_draws_per_row or getattr(sampler, "supports_row_generators", False)
        self.rollout_generator = None
        self.mask_generator = None
        self._keys: tuple[int, list[int]] | None = None  # (rollout step, completion indices) of the current rollout
        self.buffers: dict[tuple[int, ...], Rollout] = {}
        if self.params.num_iterations > 1:
            self.add_callback(RolloutBoundarySaves(self.params.num_iterations))
        # a KL against another policy than a frozen reference (TraceRL's kl_target: rollout) needs no reference copy
        needs_reference = self.params.uses_reference_policy()
        placement = self.args.reference_placement  # train.reference_placement: sharded like the policy, or whole bf16
        self.reference = (ReferencePolicy(self.accelerator.unwrap_model(self.model), self.accelerator, placement)
                          if needs_reference else None)
        self._refuse_unsupported_sharding()
        sync = reference_sync(self.reference, self.params)  # TRL's sync_ref_model (dare.rl.reference_sync)
        self.reference_sync = sync
        if sync is not None:
            self.add_callback(sync)

    def _refuse_unsupported_sharding(self) -> None:
        """Refuse, before any step, what is known not to work on a launch that shards the parameters: the reference
        sync (it mixes whole tensors into the reference copy) under FSDP or ZeRO-3, and trajectory replay scored
        under a ZeRO-3 reference policy (its KL comes out wrong from the first step on 2 CPU processes; DDP, FSDP2
        and one process agree). :raises DareError: naming the setting and the launches that work."""
        ds = getattr(self.accelerator.state, "deepspeed_plugin", None)
        zero3 = ds is not None and getattr(ds, "zero_stage", None) == 3
        sharded = zero3 or bool(getattr(self, "is_fsdp_enabled", False))
        if self.params.sync_ref_model and self.reference is not None and sharded:
            raise DareError("algorithm.params.sync_ref_model mixes the policy's whole parameters into the reference "
                            "copy, which a launch that shards the parameters (FSDP, ZeRO-3) does not hold: launch with "
                            "DDP or ZeRO-1/2 (examples/accelerate/zero2.yaml), or set sync_ref_model: false")
        if zero3 and self.reference is not None and getattr(self.estimator, "name", None) == "trajectory":
            raise DareError("trajectory replay (TraceRL) with a reference policy (beta > 0 and kl_target: reference) "
                            "gives a wrong KL under ZeRO-3: launch with FSDP2, DDP or ZeRO-1/2, or set "
                            "algorithm.params.kl_target: rollout (the release's) or beta: 0")

    def _activation_bound(self) -> tuple[Any, float | None]:
        """``(row_bytes, budget bytes)`` of :class:`dare.rl.step.StepSettings` from ``params.activation_budget_mib``
        (``auto``: the policy's training state, :func:`dare.rl.step.training_state_bytes`), or ``(None, None)`` (no
        budget, an explicit ``micro_batch_size``, or a model whose config gives no sizes)."""
        budget = self.params.activation_budget_mib
        if budget is None or self.params.micro_batch_size is not None:
            return None, None
        model = self.accelerator.unwrap_model(self.model)
        row_bytes = step.row_activation_bytes(model, self.family, bool(self.args.bf16))
        if row_bytes is None:  # a model without the config sizes: nothing to size, every row at once
            return None, None
        bf16 = bool(self.args.bf16)  # trainable weights become float32 master weights when training starts
        return row_bytes, step.training_state_bytes(model, bf16) if budget == "auto" else float(budget) * 2**20

    def _accumulated_backward(self, loss: torch.Tensor) -> None:
        self.accelerator.backward(loss / self.current_gradient_accumulation_steps)

    # ------------------------------------------------------------------ data order
    def _get_train_sampler(self, train_dataset=None):
        a = self.args
        chunk = a.per_device_train_batch_size * a.gradient_accumulation_steps * a.world_size
        seed = a.data_seed if a.data_seed is not None else a.seed
        return RepeatChunkSampler(len(train_dataset or self.train_dataset), chunk, self.params.num_iterations, seed)

    # ------------------------------------------------------------------ likelihoods
    def logits_fn(self, model) -> step.LogitsFn:
        """``model``'s aligned denoiser logits as the step's :data:`dare.rl.step.LogitsFn`."""
        return lambda noisy, clean, attn, **options: self.denoiser_logits(model, noisy, clean, attn, **options)

    def row_chunks(self, n: int) -> list[slice]:
        """``n`` rows in slices of ``params.micro_batch_size`` (:func:`dare.rl.step.row_chunks`)."""
        return step.row_chunks(n, self.params.micro_batch_size)

    def score_passes(self, model, batch: ScoringBatch, passes: list[Pass],
                     with_entropy: bool = False) -> list[PassScore]:
        """Every pass scored under ``model`` without gradient (:func:`dare.rl.step.score_passes`), ``[N, G]``."""
        return step.score_passes(self.logits_fn(model), batch, passes, self.likelihood_temperature,
                                 self.params.micro_batch_size, with_entropy)

    def token_scores(self, model, batch: ScoringBatch, passes: list[Pass],
                     rows: torch.Tensor | None) -> list[torch.Tensor]:
        """``[N, G]`` token scores of every pass under ``model`` for ``rows`` (:func:`dare.rl.step.token_scores`)."""
        return step.token_scores(self.logits_fn(model), batch, passes, self.likelihood_temperature,
                                 self.params.micro_batch_size, rows)

    def trained_rows(self, rollout: Rollout) -> torch.Tensor | None:
        """The rows the update runs (:func:`dare.rl.step.trained_rows`), None for every row."""
        return step.trained_rows(self.objective, rollout.advantages)

    # ------------------------------------------------------------------ per-example randomness
    def set_rollout_keys(self, prompt_indices: list[int]) -> None:
        """Key this rollout's draws: completion ``j`` of prompt ``i`` is example ``i * group_size + j`` at the
        current step (dare.randomness), so its noise does not depend on the process count or batch split."""
        G = self.params.group_size
        completions = [int(i) * G + j for i in prompt_indices for j in range(G)]
        global_step = int(self.state.global_step)
        self._keys = (global_step, completions)
        seed = self.args.seed
        if self.row_generators:
            self.rollout_generator = RowGenerators.keyed(seed, "rollout", global_step, completions,
                                                         device=self.args.device)
        else:  # the sampler draws batch-wide: keyed by the step and the rollout's first prompt
            key = key_seed(seed, STREAMS["rollout"], global_step, int(prompt_indices[0]) if prompt_indices else 0)
            self.rollout_generator = torch.Generator(device=self.args.device).manual_seed(key)

    # ------------------------------------------------------------------ hooks (dare.rl.hooks.RLStepHooks)
    def draw_passes(self, batch: ScoringBatch, iteration: int = 0) -> list[Pass]:
        """The estimator's passes of inner iteration ``iteration``, each completion from its own generator
        (:func:`dare.rl.step.draw_passes`)."""
        global_step, completions = self._keys if self._keys is not None else (0, list(range(batch.num_rows)))
        n = self.params.num_iterations
        self.mask_generator = RowGenerators.keyed(self.args.seed, "rl-passes", global_step,
                                                  [c * n + iteration for c in completions])
        return step.draw_passes(self.estimator, batch, self.mask_generator, self.params, self.step_settings.stop_ids)

    def generate_rollout(self, model, inputs: dict[str, list]) -> Rollout:
        """Sample, score, compute advantages, draw passes and the old/reference scores (module docstring)."""
        a = self.params
        was_training = model.training
        t0 = time.perf_counter()
        total = len(inputs["prompt"]) * a.group_size
        title = f"rollout for step {self.state.global_step + 1}"
        with progress.task(title, total, "completions", final_line=False) as bar:
            # the sampler gets the model itself, not a DDP/DeepSpeed wrapper (no gradient: nothing to synchronise;
            # samplers read model.config, e.g. LLaDA2's block length)
            decoding = DecodingBundle(self.accelerator.unwrap_model(model), self.family, self.tokens,
                                      self.processing_class, self.sampler)
            batch, gen_stats = sample_completions(
                decoding, inputs["prompt"], a.group_size, generator=self.rollout_generator,
                batch_size=a.rollout_batch_size, on_batch=bar.advance,
            )
        batch = step.rollout_batch(batch, a)
        t1 = time.perf_counter()
        texts, rewards, parts, score_stats = score_completions(
            batch, self.processing_class, self.tokens, self.reward, inputs["row"], a.group_size
        )
        if hasattr(self.reward, "take_nonfinite"):  # names a NaN/Inf reward; stops after max_nonfinite_steps
            self.reward_guard.observe(self.reward.take_nonfinite(), self.state.global_step + 1, self.args.max_steps)
        rewards = step.overlong_rewards(rewards, batch, a, self.step_settings.stop_ids)
        advantages = step.rollout_advantages(rewards, a).to(batch.input_ids.device)
        rollout = Rollout(batch=batch, texts=texts, rewards=rewards, reward_parts=parts, advantages=advantages)
        rollout.passes = [step.drop_filtered_groups(self.draw_passes(batch, i), rewards, a)
                          for i in range(a.num_iterations)]
        extra_stats = self.after_passes(rollout)
        t2 = time.perf_counter()
        model.eval()
        try:
            if a.num_iterations > 1:
                rows = self.trained_rows(rollout)
                rollout.old = [self.token_scores(model, batch, passes, rows) for passes in rollout.passes]
            if self.reference is not None:
                with self.reference.model() as ref_model:
                    rollout.ref = [self.token_scores(ref_model, batch, passes, None) for passes in rollout.passes]
        finally:
            model.train(was_training)
        rollout.stats = {
            **self.reward_stats(rewards, parts, advantages),
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

    def update(self, model, rollout: Rollout, iteration: int) -> tuple[float, dict[str, float]]:
        """The objective's loss over inner iteration ``iteration`` and its backwards (:func:`dare.rl.step.update`)."""
        return step.update(self.step_settings, self.logits_fn(model), rollout, iteration, self.backprop)

    def reward_stats(self, rewards, parts, advantages) -> dict[str, float]:
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

    # ------------------------------------------------------------------ extra state in checkpoints (hooks)
    def _save_optimizer_and_scheduler(self, output_dir):
        super()._save_optimizer_and_scheduler(output_dir)
        self.save_extra_state(output_dir)
        if self.reference_sync is not None:
            self.reference_sync.save(output_dir)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is not None:
            self.load_extra_state(checkpoint)
            if self.reference_sync is not None:
                self.reference_sync.load(checkpoint)

    def _finished_from(self, ckpt: str, state: dict):
        self.load_extra_state(ckpt)
        return super()._finished_from(ckpt, state)

    # ------------------------------------------------------------------ the training step
    def training_step(self, model, inputs: dict[str, Any], num_items_in_batch=None) -> torch.Tensor:
        """Rollout (first inner iteration) + one inner iteration of the objective (module docstring)."""
        model.train()
        a = self.params
        iteration = self.state.global_step % a.num_iterations
        key = tuple(inputs["index"])
        rollout = self.buffers.get(key) if iteration > 0 else None
        if rollout is None:
            self.set_rollout_keys(list(inputs["index"]))
            rollout = self.generate_rollout(model, inputs)
            self.record(**rollout.stats)
        if iteration < a.num_iterations - 1:
            self.buffers[key] = rollout
        else:
            self.buffers.pop(key, None)
        t0 = time.perf_counter()
        loss, metrics = self.update(model, rollout, iteration)
        metrics["time/update"] = time.perf_counter() - t0
        self.record(**metrics)
        self.guard.observe_loss(loss)
        return torch.tensor(loss / self.current_gradient_accumulation_steps, device=self.args.device)
