"""The checkpoint directory of a run: staged, complete checkpoints, rotation, ``best/`` and resume records.

Layout of ``<run>/checkpoints``::

    checkpoint-N/     a complete checkpoint (``trainer_state.json`` is written last)
    best/             the weights of the best in-training evaluation (``train.keep_best``) + best.json
    .staging/         where checkpoints, best/ and the final model are written before being renamed

Only the main process creates, renames or deletes here (:mod:`dare.distributed`); the others write their
own shards/RNG files into the staged checkpoint and wait at a barrier.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from dare.io import atomic_write_text

__all__ = ["BEST_DIR", "STAGING_DIR", "read_best", "checkpoint_step", "last_complete_checkpoint", "rotate_checkpoints",
           "drop_metrics_after", "logged_losses"]

BEST_DIR = "best"
STAGING_DIR = ".staging"


def read_best(output_dir: str | os.PathLike) -> dict[str, Any] | None:
    """``<output_dir>/best/best.json`` (``{"step", "metric", "value"}``) or None when absent or unreadable."""
    f = Path(output_dir) / BEST_DIR / "best.json"
    if not f.is_file():
        return None
    try:
        return json.loads(f.read_text())
    except json.JSONDecodeError:
        return None


def checkpoint_step(path: str | os.PathLike) -> int | None:
    """``N`` of a ``checkpoint-N`` path, else None."""
    name = Path(path).name
    if not name.startswith("checkpoint-"):
        return None
    try:
        return int(name.split("-")[-1])
    except ValueError:
        return None


def last_complete_checkpoint(output_dir: str | os.PathLike) -> str | None:
    """The newest ``checkpoint-N`` in ``output_dir`` that holds a ``trainer_state.json`` (written last)."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return None
    cands = [(step, p) for p in output_dir.glob("checkpoint-*")
             if (step := checkpoint_step(p)) is not None and (p / "trainer_state.json").is_file()]
    return str(max(cands)[1]) if cands else None


def rotate_checkpoints(root: str | os.PathLike, limit: int | None) -> None:
    """Delete all but the newest ``limit`` checkpoints (None/0: keep all)."""
    if not limit:
        return
    ckpts = sorted((step, p) for p in Path(root).glob("checkpoint-*") if (step := checkpoint_step(p)) is not None)
    for _, p in ckpts[:-limit]:
        shutil.rmtree(p, ignore_errors=True)


def drop_metrics_after(path: str | os.PathLike, step: int) -> None:
    """Keep the JSONL metric records of steps ``<= step`` (what a resumed run replays is logged again)."""
    path = Path(path)
    if not path.is_file():
        return
    kept = []
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:  # a line cut short by a kill
            continue
        if rec.get("step", 0) <= step:
            kept.append(line + "\n")
    atomic_write_text(path, "".join(kept))


def logged_losses(trainer_state: dict[str, Any]) -> list[float]:
    """Training losses in a ``trainer_state.json`` history (the final ``train_loss`` when present)."""
    hist = trainer_state.get("log_history", [])
    return [r["train_loss"] for r in hist if "train_loss" in r] or [r["loss"] for r in hist if "loss" in r]
