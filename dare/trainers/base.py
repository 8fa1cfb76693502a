"""The core trainer every DARE trainer builds on (TRL style, on ``transformers.Trainer``).

What it adds to ``transformers.Trainer``:

* :class:`DareConfig`: our defaults (CPU when no accelerator, no column pruning, safetensors,
  TensorBoard + JSONL metrics) and ``help`` metadata on every added field;
* rank safety: checkpoints, ``best/`` and the final model are written into ``<output_dir>/.staging`` (by
  the main process, plus each process's own RNG/shard files) and renamed into place by the main process
  after a barrier, so a process killed while saving never leaves a half-written directory and no
  process renames what another is still writing (:mod:`dare.trainers.checkpoints`);
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

import contextlib
import json
import os
import pickle
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from transformers import Trainer, TrainingArguments
from transformers.trainer_utils import TrainOutput

from dare import distributed
from dare.diffusion.packing import packed_denoiser_logits
from dare.errors import DareError
from dare.io import WRITE_ERRORS, describe_write_error, replace_dir
from dare.modeling.lora import is_peft_model, save_merged
from dare.trainers.callbacks import JsonlMetricsCallback, LogFinalStepCallback, ProgressCallback, TensorBoardMetricsCallback
from dare.trainers.checkpoints import (BEST_DIR, STAGING_DIR, check_resume_batch, drop_metrics_after,
                                       last_complete_checkpoint, logged_losses, read_best, rotate_checkpoints,
                                       write_batch_record)
from dare.trainers.guards import NonFiniteGuard

__all__ = ["DareConfig", "DareTrainer", "JsonlMetricsCallback", "last_complete_checkpoint", "read_best"]


@dataclass
class DareConfig(TrainingArguments):
    """Training arguments with DARE's defaults. All ``TrainingArguments`` fields are accepted."""

    report_to: Any = field(default="none", metadata={"help": "Extra integrations; DARE always writes TensorBoard + JSONL."})
    remove_unused_columns: bool = field(default=False, metadata={"help": "Keep all batch keys (dLLM collators add masks)."})
    save_strategy: str = field(default="steps", metadata={"help": "When to checkpoint."})
    logging_first_step: bool = field(default=True, metadata={"help": "Log the first step's loss."})
    disable_tqdm: bool = field(default=True, metadata={"help": "No tqdm bar: DARE prints its own progress (dare.progress)."})
    metrics_file: str | None = field(default=None, metadata={"help": "JSONL metrics path (default <output_dir>/metrics.jsonl)."})
    tensorboard_dir: str | None = field(default=None, metadata={"help": "TensorBoard log dir (default <output_dir>/tensorboard)."})
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
    packing_max_tokens: int | None = field(default=None, metadata={"help": "Tokens per packed row (default: the whole "
                                                                           "batch in one row; dare.diffusion.packing.packed_denoiser_logits)."})

    def __post_init__(self):
        if not torch.cuda.is_available():
            self.use_cpu = True
        super().__post_init__()


class DareTrainer(Trainer):
    """``transformers.Trainer`` with rank-safe atomic checkpoints, reduced metrics, non-finite guards and
    benchmark evaluation (module docstring).

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
        self._dare_staging: str | None = None
        if eval_fn is not None and targs.eval_steps:
            targs.eval_strategy = "steps"
            kwargs.setdefault("eval_dataset", [0])  # placeholder: evaluate() is ours
        callbacks = [LogFinalStepCallback(), *(kwargs.pop("callbacks", None) or [])]
        callbacks.append(JsonlMetricsCallback(targs.metrics_file or os.path.join(targs.output_dir, "metrics.jsonl")))
        callbacks.append(TensorBoardMetricsCallback(targs.tensorboard_dir or os.path.join(targs.output_dir, "tensorboard")))
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

    # ------------------------------------------------------------------ training forwards
    def denoiser_logits(self, model, noisy_ids, clean_ids, attention_mask=None):
        """The family's training logits ``[B, L, V]`` (``ModelFamily.denoiser_logits``), computed padding-free with
        :func:`dare.diffusion.packing.packed_denoiser_logits` when ``args.packing`` (``train.packing``); same arguments
        and result on every valid position."""
        if self.args.packing:
            return packed_denoiser_logits(self.family, model, noisy_ids, clean_ids, attention_mask,
                                          self.args.packing_max_tokens)
        return self.family.denoiser_logits(model, noisy_ids, clean_ids, attention_mask)

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

    # ------------------------------------------------------------------ rank-safe, atomic writes
    def _publish(self, target: str | os.PathLike, what: str, write: Callable[[str], None]) -> None:
        """Write ``what`` with ``write(staged_dir)`` (every process calls it; it writes what its process owns),
        then the main process renames the staged directory onto ``target``.

        :raises NonFiniteError: the model holds NaN/Inf weights (nothing is written).
        :raises DareError: the write failed (disk full, permissions); the staged copy is removed and the
            previous ``target`` is intact.
        """
        self.guard.refuse_to_save(self.model, what)
        target = Path(target)
        staged = Path(self.args.output_dir) / STAGING_DIR / target.name
        if distributed.is_main():
            shutil.rmtree(staged, ignore_errors=True)
            staged.parent.mkdir(parents=True, exist_ok=True)
        distributed.barrier()
        try:
            write(str(staged))
        except WRITE_ERRORS as exc:
            if distributed.is_main():
                shutil.rmtree(staged, ignore_errors=True)
                with contextlib.suppress(OSError):
                    staged.parent.rmdir()  # only when empty
            kept = last_complete_checkpoint(self.args.output_dir)
            raise DareError(f"saving {what} failed: {describe_write_error(exc, staged)}. Nothing was half-written: the "
                            f"staged copy was removed and {'the last checkpoint ' + Path(kept).name + ' is' if kept else 'earlier files are'} "
                            "intact. Free space (or fix the permissions) and re-run the same command to resume") from None
        distributed.barrier()
        if distributed.is_main():
            replace_dir(staged, target)
            with contextlib.suppress(OSError):
                staged.parent.rmdir()  # only when empty
        distributed.barrier()

    def _get_output_dir(self, trial):  # noqa: D401 - transformers hook
        if self._dare_staging is not None:
            return self._dare_staging
        return super()._get_output_dir(trial)

    def _save_checkpoint(self, model, trial):
        name = f"checkpoint-{self.state.global_step}"

        def write(staged: str) -> None:
            self._dare_staging = str(Path(staged).parent)
            try:
                super(DareTrainer, self)._save_checkpoint(model, trial)
                if distributed.is_main():
                    write_batch_record(staged, *self._batch_layout())
            finally:
                self._dare_staging = None

        self._publish(Path(self.args.output_dir) / name, name, write)
        if distributed.is_main():
            rotate_checkpoints(self.args.output_dir, self.args.save_total_limit)
        distributed.barrier()

    def _batch_layout(self) -> tuple[int, int, int]:
        return distributed.world_size(), self.args.per_device_train_batch_size, self.args.gradient_accumulation_steps

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """Save the model (``Trainer.save_model``); a final save of a LoRA model writes both formats.

        For a peft model, a call from user code (the final save) writes the merged weights in the
        official format to ``output_dir`` and the adapter in peft format to ``output_dir/adapter``;
        checkpoints (``_internal_call``) keep peft's adapter-only layout, which resume loads.
        """
        if _internal_call or not is_peft_model(self.model):
            super().save_model(output_dir, _internal_call)
            return
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        super().save_model(os.path.join(output_dir, "adapter"), _internal_call)
        if self.args.should_save:
            save_merged(self.model, output_dir, tokenizer=self.processing_class)

    def save_final(self, model_dir: str | os.PathLike) -> None:
        """Write the trained model to ``model_dir`` in the official format (a LoRA run: merged, with the
        adapter in ``adapter/``): staged, renamed by the main process, never with non-finite weights, and without
        ``Trainer``'s ``training_args.bin`` (a pickle: never shipped with a model)."""
        def write(staged: str) -> None:
            self.save_model(staged)
            for p in Path(staged).rglob("training_args.bin") if distributed.is_main() else ():
                p.unlink(missing_ok=True)

        self._publish(model_dir, "the final model", write)

    # ------------------------------------------------------------------ best weights
    def _maybe_save_best(self, raw: dict[str, float]) -> None:
        """Save the weights to ``<output_dir>/best`` when ``raw[keep_best_metric]`` beats the best so far."""
        key = self.args.keep_best_metric
        if key not in raw:
            raise DareError(f"keep_best_metric {key!r} is not among the in-training evaluation's metrics "
                            f"({', '.join(raw)}); set train.keep_best only with eval.validation")
        value = float(raw[key])
        best = read_best(self.args.output_dir)
        if best is not None and best.get("metric") == key and not value > best["value"]:
            return
        record = {"step": int(self.state.global_step), "metric": key, "value": value}

        def write(staged: str) -> None:
            self.save_model(staged, _internal_call=True)
            if distributed.is_main():
                (Path(staged) / "best.json").write_text(json.dumps(record))

        target = os.path.join(self.args.output_dir, BEST_DIR)
        self._publish(target, f"the best weights (step {record['step']})", write)
        if self.is_world_process_zero():
            print(f"step {record['step']}: best {key} so far ({value:.4f}), saved to {target}", file=sys.stderr)

    def load_best(self) -> dict[str, Any] | None:
        """Load ``<output_dir>/best`` into the model (after training, with ``keep_best_metric``).

        :returns: the ``best.json`` record, or None (nothing loaded) when no evaluation ran.
        """
        best = read_best(self.args.output_dir)
        if best is None or best.get("metric") != self.args.keep_best_metric:
            return None
        self._load_from_checkpoint(os.path.join(self.args.output_dir, BEST_DIR))
        if self.is_world_process_zero():
            print(f"final weights: step {best['step']} ({best['metric']} {best['value']:.4f}), the best in-training "
                  "evaluation (train.keep_best)", file=sys.stderr)
            if best["step"] == 0:
                print(f"warning: no step beat the start on {best['metric']} ({best['value']:.4f}); the final model is "
                      "the starting weights. Check the validation reward/prompt, or the learning rate", file=sys.stderr)
        return best

    # ------------------------------------------------------------------ resume
    def train_or_resume(self, resume: bool = True):
        """``train()``, resuming from the last complete checkpoint in ``output_dir`` when ``resume``.

        ``transformers.Trainer`` restores the model (or LoRA adapter), optimizer, scheduler, RNG states
        and data position. A checkpoint that already reached ``max_steps`` is loaded without training
        (``Trainer.train`` would run one extra step when resumed exactly at the end). On resume,
        records an interrupted process logged after the checkpoint are dropped from the JSONL metrics
        file (each step then appears once), and staged copies it left half-written are removed.
        Resuming prints one line ``resuming from <output_dir>/checkpoint-N`` on stderr. A start
        without a checkpoint drops every earlier record from the metrics file (a run that died before
        its first checkpoint).

        With ``keep_best_metric`` the best in-training evaluation's weights (``<output_dir>/best``) are
        loaded when training ends. On resume ``best/`` is kept (the best weights validated so far in
        this run directory, possibly from after the checkpoint: a deterministic replay re-scores them
        equal, which does not replace them) and the evaluation before the first step is not repeated;
        a start without a checkpoint removes it.

        :raises DareError: ``resume`` is False but ``output_dir`` already holds ``checkpoint-*``
            directories (the new run's checkpoints would be rotated against the old ones).
        """
        out_dir = self.args.output_dir
        staging = os.path.join(out_dir, STAGING_DIR)
        if not resume:
            old = sorted(p.name for p in Path(out_dir).glob("checkpoint-*"))
            if old:
                raise DareError(f"train.resume is false but {out_dir} already holds {', '.join(old)}; set "
                                "train.resume: true to continue from them, or output.overwrite: true to start fresh")
        # the main process's choice: a process reading the directory later could see another checkpoint
        ckpt = distributed.from_main(last_complete_checkpoint(out_dir) if resume else None)
        if ckpt is not None:
            check_resume_batch(ckpt, *self._batch_layout())
        if distributed.is_main():
            shutil.rmtree(staging, ignore_errors=True)
            step = int(Path(ckpt).name.split("-")[-1]) if ckpt is not None else 0
            drop_metrics_after(self.args.metrics_file or os.path.join(out_dir, "metrics.jsonl"), step)
            if ckpt is None:  # a fresh start: a best/ left by a run that died before its first checkpoint
                shutil.rmtree(os.path.join(out_dir, BEST_DIR), ignore_errors=True)
        distributed.barrier()
        if ckpt is not None:
            # the start was evaluated by the first process; re-evaluating the resumed step (which an
            # uninterrupted run may never evaluate) could select weights that run would not
            self.args.eval_on_start = False
            if self.is_world_process_zero():
                print(f"resuming from {ckpt}", file=sys.stderr)
        if ckpt is not None and self.args.max_steps > 0:
            state = json.loads((Path(ckpt) / "trainer_state.json").read_text())
            if state.get("global_step", 0) >= self.args.max_steps:
                out = self._finished_from(ckpt, state)
                if self.args.keep_best_metric:
                    self.load_best()
                return out
        try:
            out = self.train(resume_from_checkpoint=ckpt)
        finally:  # Ctrl-C or an error: close the progress display (on_train_end does not run then)
            self._progress_callback.on_train_end(self.args, self.state, self.control)
        if self.args.keep_best_metric:
            self.load_best()
        return out

    def _load_optimizer_and_scheduler(self, checkpoint):
        try:
            super()._load_optimizer_and_scheduler(checkpoint)
        except (pickle.UnpicklingError, RuntimeError, EOFError, OSError) as exc:
            raise _unsafe_checkpoint(checkpoint, "optimizer.pt/scheduler.pt", exc) from None

    def _load_rng_state(self, checkpoint):
        try:
            super()._load_rng_state(checkpoint)
        except (pickle.UnpicklingError, RuntimeError, EOFError, OSError) as exc:
            raise _unsafe_checkpoint(checkpoint, "rng_state*.pth", exc) from None

    def _finished_from(self, ckpt: str, state: dict):
        self._load_from_checkpoint(ckpt)
        losses = logged_losses(state)
        steps = state["global_step"]
        self.state.global_step = steps
        return TrainOutput(steps, losses[-1] if losses else float("nan"), {"resumed_finished": 1.0})


def _default_console_callbacks() -> tuple[type, ...]:
    """transformers' console callbacks (printed log dicts, tqdm bar); DARE's :class:`ProgressCallback` replaces them."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback as HFProgressCallback

    return PrinterCallback, HFProgressCallback


def _unsafe_checkpoint(checkpoint: str | None, files: str, exc: BaseException) -> DareError:
    """One paragraph for a checkpoint file that ``torch.load(weights_only=True)`` refused or could not read."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return DareError(f"cannot resume from {checkpoint}: its {files} could not be loaded safely "
                     f"(torch.load with weights_only=True: {first}). The file is damaged or was not written by a trainer; "
                     "nothing in it was run. Delete that checkpoint directory to resume from the previous one, or "
                     "set train.resume: false with output.overwrite: true to start over")


def _default_tensorboard_callback():
    """transformers' TensorBoard callback class (it writes ``train/eval/...`` keys on every process where a writer
    exists; DARE uses :class:`~dare.trainers.callbacks.TensorBoardMetricsCallback` instead)."""
    from transformers.integrations import TensorBoardCallback

    return TensorBoardCallback
