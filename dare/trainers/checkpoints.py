"""The checkpoint directory of a run: staged, complete checkpoints, rotation, ``best/`` and resume records.

Layout of ``<run>/checkpoints``::

    checkpoint-N/     a complete checkpoint (``trainer_state.json`` is written last)
    best/             the weights of the best in-training evaluation (``train.keep_best``) + best.json
    .staging/         where checkpoints, best/ and the final model are written before being renamed

Only the main process creates, renames or deletes here (:mod:`dare.scaling.distributed`); the others write their
own shards/RNG files into the staged checkpoint and wait at a barrier.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from dare.errors import DareError
from dare.io import atomic_write_text
from dare.run.rundir import RunDir

__all__ = ["BEST_DIR", "STAGING_DIR", "BATCH_RECORD", "TRAINER_STATE", "check_trainer_files", "resume_problem",
           "read_best", "checkpoint_step", "last_complete_checkpoint", "rotate_checkpoints", "drop_metrics_after",
           "logged_losses", "write_batch_record", "check_resume_batch"]

BEST_DIR = RunDir.BEST
STAGING_DIR = RunDir.STAGING
#: A checkpoint's record of the batch layout that wrote it (processes, per-process batch, accumulation steps).
BATCH_RECORD = RunDir.BATCH_RECORD
#: transformers' trainer state of a checkpoint (``transformers.trainer.TRAINER_STATE_NAME``, written last by a save)
TRAINER_STATE = RunDir.TRAINER_STATE


def read_best(output_dir: str | os.PathLike) -> dict[str, Any] | None:
    """``<output_dir>/best/best.json`` (``{"step", "metric", "value"}``) or None when absent or unreadable."""
    f = Path(output_dir) / BEST_DIR / RunDir.BEST_RECORD
    if not f.is_file():
        return None
    try:
        return json.loads(f.read_text())
    except json.JSONDecodeError:
        return None


def checkpoint_step(path: str | os.PathLike) -> int | None:
    """``N`` of a ``checkpoint-N`` path, else None."""
    name = Path(path).name
    if not name.startswith(RunDir.CHECKPOINT_PREFIX):
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
    cands = [(step, p) for p in output_dir.glob(f"{RunDir.CHECKPOINT_PREFIX}*")
             if (step := checkpoint_step(p)) is not None and (p / TRAINER_STATE).is_file()]
    return str(max(cands)[1]) if cands else None


def rotate_checkpoints(root: str | os.PathLike, limit: int | None) -> None:
    """Delete all but the newest ``limit`` checkpoints (None/0: keep all)."""
    if not limit:
        return
    ckpts = sorted((step, p) for p in Path(root).glob(f"{RunDir.CHECKPOINT_PREFIX}*")
                   if (step := checkpoint_step(p)) is not None)
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


def write_batch_record(checkpoint: str | os.PathLike, world_size: int, per_device: int, accumulation: int) -> None:
    """Record in ``checkpoint`` how many processes wrote it and their batch (:data:`BATCH_RECORD`, JSON)."""
    atomic_write_text(Path(checkpoint) / BATCH_RECORD, json.dumps(
        {"world_size": world_size, "per_device_batch_size": per_device, "gradient_accumulation_steps": accumulation}))


def check_resume_batch(checkpoint: str | os.PathLike, world_size: int, per_device: int, accumulation: int) -> None:
    """Refuse to resume ``checkpoint`` with another global batch than the one that wrote it.

    The data order, the per-example noise and the loss normalisers follow the global batch (processes x
    per-process batch x accumulation steps), so a run resumed with another one is not the run it continues
    (docs/scaling.md); the same global batch over another process count passes (through ``dare`` it cannot occur:
    the per-process batch is part of the spec, and a changed spec is another run). Checkpoints without a record
    (written before it existed) are not checked.

    :raises DareError: the global batch differs, naming both layouts and the fix.
    """
    f = Path(checkpoint) / BATCH_RECORD
    try:
        was = json.loads(f.read_text())
        old = (int(was["world_size"]), int(was["per_device_batch_size"]), int(was["gradient_accumulation_steps"]))
    except (OSError, ValueError, KeyError, TypeError):
        return
    new = (world_size, per_device, accumulation)
    if old[0] * old[1] * old[2] != new[0] * new[1] * new[2]:
        def layout(w, b, a):
            return (f"{w} process{'es' if w > 1 else ''} x per_device_batch_size {b} x {a} accumulation steps = "
                    f"{w * b * a}")
        raise DareError(
            f"{checkpoint} was written with a global batch of {layout(*old)}, but this launch has {layout(*new)}: "
            "resuming would continue another run (data order and loss normalisers follow the global batch). "
            f"Relaunch with {old[0]} process{'es' if old[0] > 1 else ''} (e.g. `torchrun --nproc_per_node {old[0]} "
            "--no-python dare ...`, with ACCELERATE_USE_CPU=1 on a CPU machine).")


_NUMBER, _NONE = (int, float), type(None)
#: the JSON types of the ``transformers.TrainerState`` fields that a resume reads (bool is not a number here)
_TRAINER_STATE_TYPES: dict[str, tuple[type, ...]] = {
    "global_step": (int,), "max_steps": (int,), "num_train_epochs": (int,), "logging_steps": _NUMBER,
    "eval_steps": _NUMBER, "save_steps": _NUMBER, "train_batch_size": (int, _NONE), "epoch": (*_NUMBER, _NONE),
    "total_flos": _NUMBER, "num_input_tokens_seen": (int,), "best_metric": (*_NUMBER, _NONE),
    "best_global_step": (int, _NONE), "best_model_checkpoint": (str, _NONE), "log_history": (list,),
    "stateful_callbacks": (dict, _NONE), "is_local_process_zero": (bool,), "is_world_process_zero": (bool,),
    "is_hyper_param_search": (bool,), "trial_name": (str, _NONE), "trial_params": (dict, _NONE),
}


def _trainer_state_problem(values: Any) -> str | None:
    """What makes parsed ``trainer_state.json`` content unusable by a resume (a field of the wrong JSON
    type, a negative step, a history entry that is not an object), or None."""
    if not isinstance(values, dict):
        return f"the top level is a JSON {type(values).__name__}, not an object"
    for key, types in _TRAINER_STATE_TYPES.items():
        if key not in values:
            continue
        value = values[key]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            want = " or ".join("null" if t is _NONE else t.__name__ for t in types)
            return f"{key!r} is {json.dumps(value)[:60]} (a JSON {type(value).__name__}), not {want}"
    if values.get("global_step", 0) < 0:
        return f"'global_step' is {values['global_step']}, below 0"
    if not all(isinstance(entry, dict) for entry in values.get("log_history", [])):
        return "'log_history' holds an entry that is not an object"
    return None


def check_trainer_files(ckpt: Path) -> None:
    """``trainer_state.json`` parses and its fields have the JSON types a resume reads
    (:data:`_TRAINER_STATE_TYPES`: ``"global_step": "two"`` is refused here, not by a ``TypeError`` mid-resume),
    and the ``torch.save`` files (optimizer, scheduler, RNG states) are
    complete zip archives (their central directory is read; nothing is unpickled).

    :raises CheckpointError: naming the damaged file.
    """
    import zipfile

    from dare.errors import CheckpointError

    state = ckpt / TRAINER_STATE
    try:
        values = json.loads(state.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{state} is not valid JSON ({exc}): the save was interrupted") from None
    if (wrong := _trainer_state_problem(values)) is None and ckpt.name.startswith(RunDir.CHECKPOINT_PREFIX):
        step = ckpt.name[len(RunDir.CHECKPOINT_PREFIX):]
        if step.isdigit() and values.get("global_step", int(step)) != int(step):  # saved at this step, by its name
            wrong = f"'global_step' is {values['global_step']}, but the checkpoint was saved at step {int(step)}"
    if wrong is not None:
        raise CheckpointError(f"{state} is valid JSON but not a trainer state: {wrong}; it was edited or written by "
                              "another program")
    for f in sorted(ckpt.glob("*.pt")) + sorted(ckpt.glob("*.pth")):
        try:
            with zipfile.ZipFile(f) as z:
                z.infolist()
        except (OSError, zipfile.BadZipFile) as exc:
            raise CheckpointError(f"{f} is truncated or damaged ({exc}): the save was interrupted") from None


def resume_problem(checkpoints: str | os.PathLike) -> str | None:
    """What is wrong with the checkpoint a resuming run would load from the run's ``checkpoints`` directory (its last
    complete one: safetensors headers and :func:`check_trainer_files`, no tensor data read), as the message under
    ``train.resume``, or None (no checkpoint, or a sound one). What :meth:`dare.run.rundir.RunDir.plan` refuses."""
    if not Path(checkpoints).is_dir():
        return None
    from dare.errors import CheckpointError
    from dare.modeling.checkpoint import ADAPTER_CONFIG, adapter_weights, checkpoint_shapes

    ckpt = last_complete_checkpoint(checkpoints)
    if ckpt is None:
        return None
    try:
        adapter_weights(ckpt) if (Path(ckpt) / ADAPTER_CONFIG).is_file() else checkpoint_shapes(ckpt)
        check_trainer_files(Path(ckpt))
    except CheckpointError as exc:
        return (f"the run resumes from {ckpt}, which is damaged: {exc}. Move {ckpt} out of the run directory to resume "
                "from the checkpoint before it, or set train.resume: false and output.overwrite: true to start fresh")
    return None
