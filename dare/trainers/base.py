"""The core trainer every DARE trainer builds on (TRL style, on ``transformers.Trainer``).

What it adds to ``transformers.Trainer``:

* :class:`DareConfig`: our defaults (CPU when no accelerator, no column pruning, safetensors,
  TensorBoard + JSONL metrics) and ``help`` metadata on every added field;
* rank safety (:mod:`dare.trainers.saving`): checkpoints, ``best/`` and the final model are written into
  ``<output_dir>/.staging`` (by the main process, plus each process's own RNG/shard files) and renamed into
  place by the main process after a barrier, so a process killed while saving never leaves a half-written
  directory and no process renames what another is still writing (:mod:`dare.trainers.checkpoints`);
  resume from the last complete checkpoint;
* every logged metric is reduced over processes (means weighted by counts) and appended to
  ``metrics.jsonl`` and TensorBoard by the main process (:mod:`dare.trainers.callbacks`), which also
  prints ``step N/M`` lines with the rate and time left (:class:`~dare.trainers.callbacks.ProgressCallback`,
  instead of transformers' printed dicts and tqdm bar);
* non-finite guards: a NaN/Inf loss or gradient skips the optimizer step (counted as
  ``nonfinite_steps``), ``max_nonfinite_steps`` skips in a row stop training, and non-finite weights are
  never saved (:mod:`dare.trainers.guards`); a failed write (disk full, permissions) is one clear error,
  with the staging area cleaned and the previous checkpoint intact;
* ``eval_fn``: an optional callable ``(model) -> dict[str, float]`` run every ``eval_steps`` (the
  benchmark score logged beside the loss), on every process (evaluation is sharded and gathered);
* ``family``, ``tokens``, ``objective``: the model family adapter, special ids and the objective whose
  ``params`` the loss reads;
* ``keep_best_metric``: every evaluation whose ``eval_fn`` value for that key beats the best so far
  saves the weights to ``<output_dir>/best`` (``best.json`` names the step and value); when training
  ends those weights are loaded back, so the final model is the best one.

Model checkpoints are the model's own ``save_pretrained`` output, i.e. the official format. LoRA
(peft) models checkpoint their adapter in peft's format; their final ``save_model`` writes the merged
model in the official format plus the adapter under ``adapter/``.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from transformers import Trainer, TrainingArguments

from dare.scaling import distributed, sharding
from dare.diffusion.packing import packed_denoiser_logits
from dare.run.rundir import RunDir
from dare.trainers.callbacks import (JsonlMetricsCallback, LogFinalStepCallback, ProgressCallback,
                                     TensorBoardMetricsCallback)
from dare.trainers.checkpoints import last_complete_checkpoint, read_best
from dare.trainers.guards import NonFiniteGuard
from dare.trainers.precision import upcast_trainable_to_fp32
from dare.trainers.saving import CheckpointSaving

__all__ = ["DareConfig", "DareTrainer", "JsonlMetricsCallback", "last_complete_checkpoint", "read_best"]


@dataclass
class DareConfig(TrainingArguments):
    """Training arguments with DARE's defaults. All ``TrainingArguments`` fields are accepted."""

    report_to: Any = field(default="none", metadata={"help": "transformers' integrations (wandb, trackio, mlflow: "
                                                            "dare.trainers.trackers); DARE writes JSONL and "
                                                            "TensorBoard itself."})
    tensorboard: bool = field(default=True, metadata={"help": "Write TensorBoard scalars to tensorboard_dir "
                                                              "(train.report_to)."})
    project: str = field(default="dare", metadata={"help": "The trackio project (transformers' TrackioCallback)."})
    trackio_static_space_id: Any = field(default=False, metadata={"help": "No Hub Space after training (trackio logs "
                                                                          "locally unless TRACKIO_SPACE_ID is set)."})
    remove_unused_columns: bool = field(default=False,
                                        metadata={"help": "Keep all batch keys (dLLM collators add masks)."})
    save_strategy: str = field(default="steps", metadata={"help": "When to checkpoint."})
    logging_first_step: bool = field(default=True, metadata={"help": "Log the first step's loss."})
    disable_tqdm: bool = field(default=True, metadata={"help": "No tqdm bar: DARE prints its own progress "
                                                               "(dare.progress)."})
    metrics_file: str | None = field(default=None, metadata={"help": "JSONL metrics path (default "
                                                                     "<output_dir>/metrics.jsonl)."})
    tensorboard_dir: str | None = field(default=None, metadata={"help": "TensorBoard log dir (default "
                                                                        "<output_dir>/tensorboard)."})
    num_threads: int | None = field(default=None, metadata={"help": "torch.set_num_threads on CPU."})
    keep_best_metric: str | None = field(
        default=None,
        metadata={"help": "eval_fn key (higher is better) whose best evaluation's weights end training (None: the last "
                          "step's weights). Set eval_on_start to let the starting weights compete."},
    )
    max_nonfinite_steps: int = field(default=3, metadata={"help": "Optimizer steps with a NaN/Inf loss or gradient "
                                                                  "skipped in a row before training stops."})
    packing: bool = field(default=False, metadata={"help": "Padding-free training forwards (dare.diffusion."
                                                           "packing.packed_denoiser_logits)."})
    reference_placement: str = field(default="like_policy", metadata={
        "help": "The frozen reference policy: like_policy (sharded/placed like the policy) or device_bf16 "
                "(dare.scaling.sharding.place_frozen)."})
    packing_max_tokens: int | None = field(default=None, metadata={
        "help": "Tokens per packed row (default: the whole batch in one row; "
                "dare.diffusion.packing.packed_denoiser_logits)."})

    def __post_init__(self):
        if not torch.cuda.is_available():
            self.use_cpu = True
        super().__post_init__()


class DareTrainer(CheckpointSaving, Trainer):
    """``transformers.Trainer`` with rank-safe atomic checkpoints, best weights and resume
    (:class:`dare.trainers.saving.CheckpointSaving`), reduced metrics, non-finite guards and benchmark evaluation
    (module docstring).

    :param family: the model family adapter (``dare.components.ModelFamily``).
    :param tokens: special ids (``dare.components.SpecialTokens``).
    :param eval_fn: ``(model) -> dict[str, float]`` run every ``args.eval_steps`` when set (on every process).
    :param objective: the objective being trained (``dare.components.Objective``); losses read its
        settings from ``self.objective.params`` (the config holds training-loop settings only).
    """

    def __init__(self, *args, family=None, tokens=None, eval_fn: Callable | None = None, objective=None, **kwargs):
        targs: DareConfig = kwargs.get("args") if "args" in kwargs else args[1]
        if targs.num_threads and targs.use_cpu:
            torch.set_num_threads(targs.num_threads)
        self.family = family
        self.tokens = tokens
        self.eval_fn = eval_fn
        self.objective = objective
        if eval_fn is not None and targs.eval_steps:
            targs.eval_strategy = "steps"
            kwargs.setdefault("eval_dataset", [0])  # placeholder: evaluate() is ours
        callbacks = [LogFinalStepCallback(), *(kwargs.pop("callbacks", None) or [])]
        callbacks.append(JsonlMetricsCallback(targs.metrics_file or os.path.join(targs.output_dir, RunDir.METRICS)))
        if targs.tensorboard:
            callbacks.append(TensorBoardMetricsCallback(
                targs.tensorboard_dir or os.path.join(targs.output_dir, RunDir.TENSORBOARD)))
        self._progress_callback = ProgressCallback()
        callbacks.append(self._progress_callback)
        super().__init__(*args, callbacks=callbacks, **kwargs)
        self.remove_callback(_default_tensorboard_callback())
        for cls in _default_console_callbacks():
            self.remove_callback(cls)
        # our losses are already normalised per batch; let Trainer divide by accumulation steps
        self.model_accepts_loss_kwargs = False
        self._metrics: dict[str, list[float]] = {}
        self.guard = NonFiniteGuard(targs.max_nonfinite_steps)
        self._skipped_since_log = 0

    def create_accelerator_and_postprocess(self) -> None:
        """transformers' accelerator creation, under :func:`dare.scaling.sharding.sharding_accelerator_state`: with
        ``DARE_CPU_SHARDING=1`` an FSDP2 launch shards the model on CPU processes too (docs/scaling.md)."""
        with sharding.sharding_accelerator_state():
            super().create_accelerator_and_postprocess()

    # ------------------------------------------------------------------ training forwards
    def denoiser_logits(self, model, noisy_ids, clean_ids, attention_mask=None, **options):
        """The family's training logits ``[B, L, V]`` (``ModelFamily.denoiser_logits``), computed padding-free with
        :func:`dare.diffusion.packing.packed_denoiser_logits` when ``args.packing`` (``train.packing``); same arguments
        and result on every valid position. ``options`` (a block family's ``block_anchor``) go to the family's
        forward.

        :raises ValueError: ``options`` with ``train.packing`` (the packed forward has none).
        """
        if self.args.packing:
            if options:
                raise ValueError(f"train.packing cannot run a forward with {', '.join(sorted(options))}: "
                                 "set train.packing: false")
            return packed_denoiser_logits(self.family, model, noisy_ids, clean_ids, attention_mask,
                                          self.args.packing_max_tokens)
        return self.family.denoiser_logits(model, noisy_ids, clean_ids, attention_mask, **options)

    # ------------------------------------------------------------------ metrics
    def record(self, **values: float) -> None:
        """Accumulate scalar metrics; their means (over steps and processes) are added to the next log record."""
        for k, v in values.items():
            self._metrics.setdefault(k, []).append(float(v))

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs:
            local = {k: (sum(vs), len(vs)) for k, vs in self._metrics.items()}
            totals: dict[str, list[float]] = {}
            for part in distributed.gather(local):
                for k, (s, n) in part.items():
                    acc = totals.setdefault(k, [0.0, 0])
                    acc[0] += s
                    acc[1] += n
            for k, (s, n) in sorted(totals.items()):
                logs[k] = s / n
            logs["nonfinite_steps"] = self._skipped_since_log
            self._metrics, self._skipped_since_log = {}, 0
        super().log(logs, start_time)

    # ------------------------------------------------------------------ precision
    def train(self, *args, **kwargs):
        """``Trainer.train`` with fp32 master weights under mixed precision (``args.bf16``/``fp16``): the trainable
        16-bit parameters are cast to float32 first (:func:`dare.trainers.precision.upcast_trainable_to_fp32`), after
        the subclasses took their frozen copies (the reference policy stays 16-bit) and before a checkpoint is
        resumed (its fp32 weights load without rounding). DeepSpeed keeps its own fp32 copy: nothing is cast there."""
        if (self.args.bf16 or self.args.fp16) and not self.is_deepspeed_enabled:
            cast = upcast_trainable_to_fp32(self.model)
            if cast and self.is_world_process_zero():
                print(f"fp32 master weights: {len(cast)} trainable 16-bit parameters cast to float32 (16-bit compute "
                      "under autocast; dare/trainers/precision.py)", file=sys.stderr)
        return super().train(*args, **kwargs)

    # ------------------------------------------------------------------ non-finite guard
    def create_optimizer(self, model=None):
        optimizer = super().create_optimizer(model)
        if not getattr(optimizer, "_dare_guarded", False):
            step = optimizer.step

            def guarded_step(*args, **kwargs):
                params = [p for group in optimizer.param_groups for p in group["params"]]
                if self._all_finite(self.guard.step_is_finite(params)):
                    self.guard.applied()
                    return step(*args, **kwargs)
                self._skip_step(params)
                return None

            optimizer.step = guarded_step
            optimizer._dare_guarded = True
        return optimizer

    @staticmethod
    def _all_finite(local: bool) -> bool:
        """Every process agrees to apply the step (a NaN on one process skips it everywhere)."""
        return all(distributed.gather(local))

    def _skip_step(self, params) -> None:
        for p in params:
            p.grad = None
        self._skipped_since_log += 1
        step = self.state.global_step + 1
        if self.is_world_process_zero():
            print(f"warning: step {step}: NaN/Inf loss or gradient, optimizer step skipped "
                  f"({self.guard.consecutive + 1} in a row)", file=sys.stderr)
        lr = self.lr_scheduler.get_last_lr()[0] if self.lr_scheduler is not None else None
        self.guard.skipped(step, lr)

    def training_step(self, model, inputs, num_items_in_batch=None):
        loss = super().training_step(model, inputs, num_items_in_batch)
        self.guard.observe_loss(loss)
        return loss

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval") -> dict[str, float]:
        """Run ``eval_fn`` on the current model and log its metrics (prefixed ``eval/``)."""
        if self.eval_fn is None:
            return {}
        from dare import progress

        progress.stage("validate", f"in-training evaluation at step {self.state.global_step}/{self.args.max_steps}")
        was_training = self.model.training
        self.model.eval()
        try:
            raw = self.eval_fn(self.model)
        finally:
            self.model.train(was_training)
        metrics = {f"{metric_key_prefix}/{k}": float(v) for k, v in raw.items()}
        if self.args.keep_best_metric:
            self._maybe_save_best(raw)
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics=metrics)
        return metrics


def _default_console_callbacks() -> tuple[type, ...]:
    """transformers' console callbacks (printed log dicts, tqdm bar); DARE's :class:`ProgressCallback` replaces them."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback as HFProgressCallback

    return PrinterCallback, HFProgressCallback


def _default_tensorboard_callback():
    """transformers' TensorBoard callback class (it writes ``train/eval/...`` keys on every process where a writer
    exists; DARE uses :class:`~dare.trainers.callbacks.TensorBoardMetricsCallback` instead)."""
    from transformers.integrations import TensorBoardCallback

    return TensorBoardCallback
