"""Rank-safe, atomic writes of a trainer's checkpoints, best weights and final model, and resume from them.

:class:`CheckpointSaving` is mixed into :class:`dare.trainers.base.DareTrainer` ahead of
``transformers.Trainer``: every checkpoint, ``best/`` and the final model is written into
``<output_dir>/.staging`` (by the main process, plus each process's own RNG/shard files) and renamed into
place by the main process after a barrier (:mod:`dare.trainers.checkpoints`), never with non-finite weights,
and a failed write (disk full, permissions) is one clear error with the previous checkpoint intact.
:meth:`CheckpointSaving.train_or_resume` starts or resumes training from the last complete checkpoint.
It uses the trainer's ``guard`` (:class:`dare.trainers.guards.NonFiniteGuard`) and ``_progress_callback``.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import shutil
import sys
from pathlib import Path
from typing import Any, Callable

from transformers.trainer_utils import TrainOutput

from dare.scaling import distributed
from dare.errors import DareError
from dare.io import WRITE_ERRORS, describe_write_error, replace_dir
from dare.modeling.lora import is_peft_model, save_merged
from dare.run.rundir import RunDir
from dare.trainers.checkpoints import (BEST_DIR, STAGING_DIR, TRAINER_STATE, check_resume_batch, drop_metrics_after,
                                       last_complete_checkpoint, logged_losses, read_best, rotate_checkpoints,
                                       write_batch_record)

__all__ = ["CheckpointSaving"]


class CheckpointSaving:
    """Checkpoints, ``best/`` and the final model written rank-safely and atomically, and resume (module docstring).
    A mixin of ``transformers.Trainer`` subclasses (it overrides Trainer's save and load hooks)."""

    _dare_staging: str | None = None  # while a checkpoint is written: the staging directory Trainer writes into

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
                            f"staged copy was removed and "
                            f"{'the last checkpoint ' + Path(kept).name + ' is' if kept else 'earlier files are'} "
                            "intact. Free space (or fix the permissions) and re-run the same command to "
                            "resume") from None
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
        name = f"{RunDir.CHECKPOINT_PREFIX}{self.state.global_step}"

        def write(staged: str) -> None:
            self._dare_staging = str(Path(staged).parent)
            try:
                super(CheckpointSaving, self)._save_checkpoint(model, trial)
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

    def save_final(self, model_dir: str | os.PathLike, card: str | None = None) -> None:
        """Write the trained model to ``model_dir`` in the official format (a LoRA run: merged, with the
        adapter in ``adapter/``): staged, renamed by the main process, never with non-finite weights, and without
        ``Trainer``'s ``training_args.bin`` (a pickle: never shipped with a model).

        :param card: the model card's text (:mod:`dare.report.modelcard`), staged as ``README.md`` with the weights."""
        def write(staged: str) -> None:
            self.save_model(staged)
            for p in Path(staged).rglob("training_args.bin") if distributed.is_main() else ():
                p.unlink(missing_ok=True)
            if card is not None and distributed.is_main():
                (Path(staged) / "README.md").write_text(card)

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
                (Path(staged) / RunDir.BEST_RECORD).write_text(json.dumps(record))

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
            old = sorted(p.name for p in Path(out_dir).glob(f"{RunDir.CHECKPOINT_PREFIX}*"))
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
            drop_metrics_after(self.args.metrics_file or os.path.join(out_dir, RunDir.METRICS), step)
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
            state = json.loads((Path(ckpt) / TRAINER_STATE).read_text())
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


def _unsafe_checkpoint(checkpoint: str | None, files: str, exc: BaseException) -> DareError:
    """One paragraph for a checkpoint file that ``torch.load(weights_only=True)`` refused or could not read."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return DareError(f"cannot resume from {checkpoint}: its {files} could not be loaded safely "
                     f"(torch.load with weights_only=True: {first}). The file is damaged or was not written by a "
                     f"trainer; nothing in it was run. Delete that checkpoint directory to resume from the previous "
                     f"one, or set train.resume: false with output.overwrite: true to start over")
