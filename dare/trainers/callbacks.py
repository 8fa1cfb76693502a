"""Where logged metrics go: ``metrics.jsonl``, TensorBoard and the console (``step N/M`` lines with rate and time
left, :class:`ProgressCallback`), written by the main process only."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from transformers import TrainerCallback

__all__ = ["LogFinalStepCallback", "JsonlMetricsCallback", "TensorBoardMetricsCallback", "ProgressCallback",
           "format_log_line"]


def _jsonable(v):
    return v.item() if isinstance(v, torch.Tensor) else v


class LogFinalStepCallback(TrainerCallback):
    """Log the last optimizer step even when ``max_steps`` is not a multiple of ``logging_steps``.

    transformers logs every ``logging_steps`` steps only, so the steps after the last multiple (their mean
    loss, reward, ...) never reached ``metrics.jsonl``, TensorBoard or the plot. Must run after transformers'
    ``DefaultFlowCallback`` (which decides ``should_log`` and ``should_training_stop`` on each step end).
    """

    def on_step_end(self, args, state, control, **kwargs):
        if state.max_steps and state.global_step >= state.max_steps:
            control.should_log = True
        return control


class JsonlMetricsCallback(TrainerCallback):
    """Append every ``Trainer.log`` record to a JSONL file, with step and epoch (main process only)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        rec = {"step": state.global_step, "epoch": state.epoch, **{k: _jsonable(v) for k, v in logs.items()}}
        with self.path.open("a") as f:
            f.write(json.dumps(rec) + "\n")
            f.flush()


class TensorBoardMetricsCallback(TrainerCallback):
    """Scalars to TensorBoard (main process only): ``eval/...`` keys as they are, the rest under ``train/``."""

    def __init__(self, log_dir: str | os.PathLike):
        self.log_dir = str(log_dir)
        self.writer = None

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        if self.writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(log_dir=self.log_dir)
        for k, v in logs.items():
            v = _jsonable(v)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                self.writer.add_scalar(k if k.startswith("eval/") else f"train/{k}", v, state.global_step)
        self.writer.flush()

    def on_train_end(self, args, state, control, **kwargs):
        if self.writer is not None:
            self.writer.close()
            self.writer = None


#: metrics a console line shows (in this order, when logged); metrics.jsonl and TensorBoard keep all of them
_SHOWN = ("loss", "reward", "learning_rate", "grad_norm", "kl", "clip_fraction", "completion_length", "nonfinite_steps")


def _number(v: float) -> str:
    a = abs(v)
    return f"{v:.2e}" if a and (a < 1e-3 or a >= 1e4) else f"{v:.4f}"


def format_log_line(step: int, max_steps: int, logs: dict) -> str:
    """One console line of a ``Trainer.log`` record: ``step 25/750: loss 0.5123, lr 2.00e-03, grad_norm 0.4100``.

    Training records show :data:`_SHOWN` (``reward`` with its spread ``± reward_std``, ``nonfinite_steps``
    only when non-zero); in-training evaluation records show every ``eval/`` value.
    """
    parts = []
    evals = {k: v for k, v in logs.items() if k.startswith("eval/") and isinstance(_jsonable(v), (int, float))}
    if evals:
        parts = [f"{k[len('eval/'):]} {_number(float(_jsonable(v)))}" for k, v in evals.items()
                 if not k.endswith("/rows")]
        rows = [int(_jsonable(v)) for k, v in evals.items() if k.endswith("/rows")]
        head = f"step {step}/{max_steps}: evaluation" + (f" on {rows[0]} rows" if rows else "")
        return f"{head}: " + ", ".join(parts)
    for k in _SHOWN:
        v = _jsonable(logs.get(k))
        if not isinstance(v, (int, float)) or isinstance(v, bool) or (k == "nonfinite_steps" and not v):
            continue
        name = "lr" if k == "learning_rate" else k
        text = f"{name} {_number(float(v))}"
        if k == "reward" and isinstance(_jsonable(logs.get("reward_std")), (int, float)):
            text += f" ± {float(_jsonable(logs['reward_std'])):.4f}"
        parts.append(text)
    return f"step {step}/{max_steps}: " + ", ".join(parts)


class ProgressCallback(TrainerCallback):
    """Training progress on the console (main process; :mod:`dare.progress`): a ``train`` task counting optimizer
    steps (rate and time left from the steps of this process, so a resumed run's estimate is not skewed), and
    each log record as one line with its step (:func:`format_log_line`) and the rate/time left. Replaces
    transformers' printer (raw dicts with an epoch but no step) and its tqdm bar."""

    def __init__(self):
        self.task = None

    def on_train_begin(self, args, state, control, **kwargs):
        from dare import progress

        if state.is_world_process_zero and self.task is None:
            self.task = progress.task("train", args.max_steps, "steps", completed=state.global_step)

    def on_step_end(self, args, state, control, **kwargs):
        if self.task is not None:  # a step that logs prints its own line (on_log) with the rate
            self.task.update(state.global_step, quiet=bool(control.should_log))

    def on_log(self, args, state, control, logs=None, **kwargs):
        from dare import progress

        if not state.is_world_process_zero or not logs:
            return
        if "train_runtime" in logs:  # transformers' end-of-training summary: the task's last line says it
            return
        line = format_log_line(state.global_step, args.max_steps, logs)
        if self.task is not None and not any(k.startswith("eval/") for k in logs):
            line += f" | {self.task.status()}"
            self.task.printed()
        progress.log(line)

    def on_train_end(self, args, state, control, **kwargs):
        if self.task is not None:
            self.task.close()
            self.task = None
