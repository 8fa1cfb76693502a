"""Where logged metrics go: ``metrics.jsonl`` and TensorBoard, written by the main process only."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from transformers import TrainerCallback

__all__ = ["JsonlMetricsCallback", "TensorBoardMetricsCallback"]


def _jsonable(v):
    return v.item() if isinstance(v, torch.Tensor) else v


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
