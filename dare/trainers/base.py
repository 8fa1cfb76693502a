"""The core trainer every DARE trainer builds on (TRL style, on ``transformers.Trainer``).

What it adds to ``transformers.Trainer``:

* :class:`DareConfig`: our defaults (CPU when no accelerator, no column pruning, safetensors,
  TensorBoard + JSONL metrics) and ``help`` metadata on every added field;
* checkpoints are staged in ``<output_dir>/.staging`` and renamed into place, so a process killed
  while saving never leaves a half-written ``checkpoint-N`` (resume picks the last complete one);
* every logged metric is appended to ``metrics.jsonl`` (one JSON object per line) and written to
  TensorBoard;
* ``eval_fn``: an optional callable ``(model) -> dict[str, float]`` run every ``eval_steps`` (the
  benchmark score logged beside the loss);
* ``family`` and ``tokens``: the model family adapter and special ids, for subclasses' losses;
* ``keep_best_metric``: every evaluation whose ``eval_fn`` value for that key beats the best so far
  saves the weights to ``<output_dir>/best`` (``dare.io.atomic_dir``; ``best.json`` names the step and
  value); when training ends those weights are loaded back, so the final model is the best one.

Model checkpoints are the model's own ``save_pretrained`` output, i.e. the official format. LoRA
(peft) models checkpoint their adapter in peft's format; their final ``save_model`` writes the merged
model in the official format plus the adapter under ``adapter/``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from transformers import Trainer, TrainerCallback, TrainingArguments
from transformers.trainer_utils import get_last_checkpoint

__all__ = ["DareConfig", "DareTrainer", "JsonlMetricsCallback", "last_complete_checkpoint", "read_best"]

BEST_DIR = "best"


def read_best(output_dir: str | os.PathLike) -> dict[str, Any] | None:
    """``<output_dir>/best/best.json`` (``{"step", "metric", "value"}``) or None when absent."""
    f = Path(output_dir) / BEST_DIR / "best.json"
    if not f.is_file():
        return None
    try:
        return json.loads(f.read_text())
    except json.JSONDecodeError:
        return None


@dataclass
class DareConfig(TrainingArguments):
    """Training arguments with DARE's defaults. All ``TrainingArguments`` fields are accepted."""

    report_to: Any = field(default="none", metadata={"help": "Extra integrations; DARE always writes TensorBoard + JSONL."})
    remove_unused_columns: bool = field(default=False, metadata={"help": "Keep all batch keys (dLLM collators add masks)."})
    save_strategy: str = field(default="steps", metadata={"help": "When to checkpoint."})
    logging_first_step: bool = field(default=True, metadata={"help": "Log the first step's loss."})
    metrics_file: str | None = field(default=None, metadata={"help": "JSONL metrics path (default <output_dir>/metrics.jsonl)."})
    tensorboard_dir: str | None = field(default=None, metadata={"help": "TensorBoard log dir (default <output_dir>/tensorboard)."})
    num_threads: int | None = field(default=None, metadata={"help": "torch.set_num_threads on CPU."})
    keep_best_metric: str | None = field(
        default=None,
        metadata={"help": "eval_fn key (higher is better) whose best evaluation's weights end training (None: the last "
                          "step's weights). Set eval_on_start to let the starting weights compete."},
    )

    def __post_init__(self):
        if not torch.cuda.is_available():
            self.use_cpu = True
        super().__post_init__()


def last_complete_checkpoint(output_dir: str | os.PathLike) -> str | None:
    """The newest ``checkpoint-N`` in ``output_dir`` that holds a ``trainer_state.json`` (written last)."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return None
    cands = []
    for p in output_dir.glob("checkpoint-*"):
        try:
            step = int(p.name.split("-")[-1])
        except ValueError:
            continue
        if (p / "trainer_state.json").is_file():
            cands.append((step, p))
    if not cands:
        return None
    return str(max(cands)[1])


class JsonlMetricsCallback(TrainerCallback):
    """Append every ``Trainer.log`` record to a JSONL file, with step and epoch."""

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


def _jsonable(v):
    if isinstance(v, torch.Tensor):
        return v.item()
    return v


class DareTrainer(Trainer):
    """``transformers.Trainer`` with atomic checkpoints, JSONL/TensorBoard metrics and benchmark eval.

    :param family: the model family adapter (``dare.components.ModelFamily``).
    :param tokens: special ids (``dare.components.SpecialTokens``).
    :param eval_fn: ``(model) -> dict[str, float]`` run every ``args.eval_steps`` when set.
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
        callbacks = list(kwargs.pop("callbacks", None) or [])
        metrics_file = targs.metrics_file or os.path.join(targs.output_dir, "metrics.jsonl")
        callbacks.append(JsonlMetricsCallback(metrics_file))
        try:
            from torch.utils.tensorboard import SummaryWriter
            from transformers.integrations import TensorBoardCallback

            tb_dir = targs.tensorboard_dir or os.path.join(targs.output_dir, "tensorboard")
            callbacks.append(TensorBoardCallback(tb_writer=SummaryWriter(log_dir=tb_dir)))
        except ImportError:  # pragma: no cover - tensorboard is a dependency
            pass
        super().__init__(*args, callbacks=callbacks, **kwargs)
        # our losses are already normalised per batch; let Trainer divide by accumulation steps
        self.model_accepts_loss_kwargs = False
        self._metrics: dict[str, list[float]] = {}

    # ------------------------------------------------------------------ metrics
    def record(self, **values: float) -> None:
        """Accumulate scalar metrics; their means are added to the next training log record."""
        for k, v in values.items():
            self._metrics.setdefault(k, []).append(float(v))

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs and self._metrics:
            for k, vs in self._metrics.items():
                logs[k] = sum(vs) / len(vs)
            self._metrics = {}
        super().log(logs, start_time)

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval") -> dict[str, float]:
        """Run ``eval_fn`` on the current model and log its metrics (prefixed ``eval/``)."""
        if self.eval_fn is None:
            return {}
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

    # ------------------------------------------------------------------ best weights
    def _maybe_save_best(self, raw: dict[str, float]) -> None:
        """Save the weights to ``<output_dir>/best`` when ``raw[keep_best_metric]`` beats the best so far."""
        from dare.errors import DareError

        key = self.args.keep_best_metric
        if key not in raw:
            raise DareError(f"keep_best_metric {key!r} is not among the in-training evaluation's metrics "
                            f"({', '.join(raw)}); set train.keep_best only with eval.validation")
        value = float(raw[key])
        best = read_best(self.args.output_dir)
        if best is not None and best.get("metric") == key and not value > best["value"]:
            return
        from dare.io import atomic_dir

        target = os.path.join(self.args.output_dir, BEST_DIR)
        record = {"step": int(self.state.global_step), "metric": key, "value": value}
        with atomic_dir(target, overwrite=True) as tmp:
            self.save_model(str(tmp), _internal_call=True)
            (tmp / "best.json").write_text(json.dumps(record))
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

    # ------------------------------------------------------------------ saving
    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """Save the model (``Trainer.save_model``); a final save of a LoRA model writes both formats.

        For a peft model, a call from user code (the final save) writes the merged weights in the
        official format to ``output_dir`` and the adapter in peft format to ``output_dir/adapter``;
        checkpoints (``_internal_call``) keep peft's adapter-only layout, which resume loads.
        """
        from dare.modeling.lora import is_peft_model, save_merged

        if _internal_call or not is_peft_model(self.model):
            super().save_model(output_dir, _internal_call)
            return
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        super().save_model(os.path.join(output_dir, "adapter"), _internal_call)
        if self.args.should_save:
            save_merged(self.model, output_dir, tokenizer=self.processing_class)

    def save_final(self, model_dir: str | os.PathLike) -> None:
        """Write the trained model to ``model_dir`` in the official format (a LoRA run: merged, with the
        adapter in ``adapter/``), atomically (built in a temporary sibling, then renamed)."""
        from dare.io import atomic_dir

        with atomic_dir(model_dir, overwrite=True) as tmp:
            self.save_model(str(tmp))

    # ------------------------------------------------------------------ atomic checkpoints
    def _get_output_dir(self, trial):  # noqa: D401 - transformers hook
        if self._dare_staging is not None:
            return self._dare_staging
        return super()._get_output_dir(trial)

    def _save_checkpoint(self, model, trial):
        final_root = self.args.output_dir
        staging = os.path.join(final_root, ".staging")
        name = f"checkpoint-{self.state.global_step}"
        if self.args.should_save:
            shutil.rmtree(os.path.join(staging, name), ignore_errors=True)
        self._dare_staging = staging
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self._dare_staging = None
        if self.args.should_save:
            target = os.path.join(final_root, name)
            if os.path.exists(target):
                shutil.rmtree(target)
            os.replace(os.path.join(staging, name), target)
            self._rotate(final_root)

    def _rotate(self, root: str) -> None:
        limit = self.args.save_total_limit
        if not limit:
            return
        ckpts = []
        for p in Path(root).glob("checkpoint-*"):
            try:
                ckpts.append((int(p.name.split("-")[-1]), p))
            except ValueError:
                continue
        for _, p in sorted(ckpts)[:-limit]:
            shutil.rmtree(p, ignore_errors=True)

    # ------------------------------------------------------------------ resume
    def train_or_resume(self, resume: bool = True):
        """``train()``, resuming from the last complete checkpoint in ``output_dir`` when ``resume``.

        ``transformers.Trainer`` restores the model (or LoRA adapter), optimizer, scheduler, RNG states
        and data position. A checkpoint that already reached ``max_steps`` is loaded without training
        (``Trainer.train`` would run one extra step when resumed exactly at the end). On resume,
        records an interrupted process logged after the checkpoint are dropped from the JSONL metrics
        file (each step then appears once), and staged checkpoints it left half-written are removed.
        Resuming prints one line ``resuming from <output_dir>/checkpoint-N`` on stderr. A start
        without a checkpoint drops every earlier record from the metrics file (a run that died before
        its first checkpoint). The emptied ``.staging`` directory is removed when training ends.

        With ``keep_best_metric`` the best in-training evaluation's weights (``<output_dir>/best``) are
        loaded when training ends. On resume ``best/`` is kept (the best weights validated so far in
        this run directory, possibly from after the checkpoint: a deterministic replay re-scores them
        equal, which does not replace them) and the evaluation before the first step is not repeated;
        a start without a checkpoint removes it.

        :raises DareError: ``resume`` is False but ``output_dir`` already holds ``checkpoint-*``
            directories (the new run's checkpoints would be rotated against the old ones).
        """
        from dare.errors import DareError

        staging = os.path.join(self.args.output_dir, ".staging")
        if self.args.should_save:
            shutil.rmtree(staging, ignore_errors=True)
        if not resume:
            old = sorted(p.name for p in Path(self.args.output_dir).glob("checkpoint-*"))
            if old:
                raise DareError(f"train.resume is false but {self.args.output_dir} already holds {', '.join(old)}; set "
                                "train.resume: true to continue from them, or output.overwrite: true to start fresh")
        ckpt = last_complete_checkpoint(self.args.output_dir) if resume else None
        if self.args.should_save:
            step = int(Path(ckpt).name.split("-")[-1]) if ckpt is not None else 0
            self._drop_metrics_after(step)
            if ckpt is None:  # a fresh start: a best/ left by a run that died before its first checkpoint
                shutil.rmtree(os.path.join(self.args.output_dir, BEST_DIR), ignore_errors=True)
        if ckpt is not None:
            # the start was evaluated by the first process; re-evaluating the resumed step (which an
            # uninterrupted run may never evaluate) could select weights that run would not
            self.args.eval_on_start = False
        if ckpt is not None and self.is_world_process_zero():
            print(f"resuming from {ckpt}", file=sys.stderr)
        if ckpt is not None and self.args.max_steps > 0:
            state = json.loads((Path(ckpt) / "trainer_state.json").read_text())
            if state.get("global_step", 0) >= self.args.max_steps:
                out = self._finished_from(ckpt, state)
                if self.args.keep_best_metric:
                    self.load_best()
                return out
        out = self.train(resume_from_checkpoint=ckpt)
        if self.args.keep_best_metric:
            self.load_best()
        if self.args.should_save and os.path.isdir(staging) and not os.listdir(staging):
            os.rmdir(staging)
        return out

    def _drop_metrics_after(self, step: int) -> None:
        from dare.io import atomic_write_text

        path = Path(self.args.metrics_file or os.path.join(self.args.output_dir, "metrics.jsonl"))
        if not path.is_file():
            return
        kept = []
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:  # a line cut short by the kill
                continue
            if rec.get("step", 0) <= step:
                kept.append(line + "\n")
        atomic_write_text(path, "".join(kept))

    def _finished_from(self, ckpt: str, state: dict):
        from transformers.trainer_utils import TrainOutput

        self._load_from_checkpoint(ckpt)
        hist = state.get("log_history", [])
        losses = [r["train_loss"] for r in hist if "train_loss" in r] or [r["loss"] for r in hist if "loss" in r]
        steps = state["global_step"]
        self.state.global_step = steps
        return TrainOutput(steps, losses[-1] if losses else float("nan"), {"resumed_finished": 1.0})


# re-exported for callers that want HF's notion too
get_last_checkpoint = get_last_checkpoint
