"""What a run's numbers come from, in words: which rows each evaluation scored, the run's context for its
report (objective, steps, wall time, training data, sampler), and what an interrupted command saved.

Used by :class:`dare.run.Run` for ``report.{json,md}`` (the ``run`` block), ``plot.png``'s legend
labels and the message printed on Ctrl-C; ``dare compare`` reads the ``run`` block back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dare.trainers.checkpoints import checkpoint_step, last_complete_checkpoint, read_best

__all__ = ["describe_rows", "eval_set_labels", "run_info", "interrupted_message", "logged_rows"]


def describe_rows(bench, n: int | None = None) -> str:
    """Which rows a benchmark (a :class:`dare.spec.ResolvedBenchmark`) scores:
    ``"sudoku: 500 rows (0-499) of dare://sudoku/test.parquet"``,
    ``"validation (sudoku): 100 rows (19000-19099) of dare://sudoku/train.parquet"`` (``n`` unknown: the file)."""
    b = bench.spec
    path = b.path or bench.evaluator.default_path or "?"
    name = f"validation ({bench.evaluator.name})" if bench.loc == "eval.validation" else bench.evaluator.name
    if n is None:
        return f"{name}: rows from {b.offset} of {path}" if b.offset else f"{name}: {path}"
    return f"{name}: {n} rows ({b.offset}-{b.offset + n - 1}) of {path}"


def logged_rows(metrics_file: str | Path) -> dict[str, int]:
    """``{prefix: rows}`` from the ``eval/<prefix>/rows`` values of ``metrics.jsonl`` (the last of each)."""
    out: dict[str, int] = {}
    try:
        lines = Path(metrics_file).read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        for k, v in rec.items():
            if k.startswith("eval/") and k.endswith("/rows") and isinstance(v, (int, float)):
                out[k[len("eval/"):-len("/rows")]] = int(v)
    return out


def eval_set_labels(run, stages: dict[str, list]) -> dict[str, str]:
    """Labels naming each evaluation's rows: the in-training evaluation's prefix (``validation`` or the first
    benchmark's name; row count from the metrics' ``.../rows``) and ``<stage>:<benchmark>`` for the full
    evaluations in ``stages``."""
    labels: dict[str, str] = {}
    if run.spec.eval is None:
        return labels
    rows = logged_rows(run.dir / "metrics.jsonl")
    if run.resolved.validation is not None:
        labels["validation"] = describe_rows(run.resolved.validation, rows.get("validation"))
    elif run.resolved.benchmarks:
        b = run.resolved.benchmarks[0]
        labels[b.evaluator.name] = describe_rows(b, rows.get(b.evaluator.name))
    for stage, results in stages.items():
        for bench, res in zip(run.resolved.benchmarks, results):
            labels[f"{stage}:{res.name}"] = describe_rows(bench, res.n)
    return labels


def run_info(run, train_metrics: dict[str, Any], train_seconds: float | None, resumed_from: int | None,
             stage_seconds: dict[str, float]) -> dict[str, Any]:
    """The ``run`` block of ``report.json``: objective (name, params), steps done and planned, training wall
    time of this command (``resumed_from_step`` when it resumed), training data, sampler, in-training
    evaluation, evaluation wall times per stage and :func:`eval_set_labels`."""
    spec = run.spec
    ds = spec.data.train if spec.data is not None else None
    info: dict[str, Any] = {
        "objective": ({"name": run.objective.name, "params": run.objective.params.model_dump(mode="json")}
                      if run.objective is not None else None),
        "steps": train_metrics.get("global_step"),
        "max_steps": spec.train.max_steps if spec.train is not None else None,
        "train_seconds": train_seconds,
        "resumed_from_step": resumed_from,
        "training_data": ({"path": ds.path, "offset": ds.offset, "limit": ds.limit, "examples": train_metrics.get("examples")}
                          if ds is not None else None),
        "sampler": ({"name": run.sampler.name, "params": run.sampler.params.model_dump(mode="json")}
                    if run.sampler is not None else None),
        "stage_seconds": stage_seconds,
        "eval_sets": eval_set_labels(run, {}),
    }
    if spec.train is not None and spec.train.eval_steps and spec.eval is not None:
        info["in_training_eval"] = {"every_steps": spec.train.eval_steps, "rows": spec.train.eval_limit}
    return info


def interrupted_message(run, command: str) -> str:
    """What an interrupted command (Ctrl-C) saved in ``run.dir`` and what re-running it does, as one paragraph.

    ``run.stage`` (set by :meth:`dare.run.Run.execute`) says where it stopped: ``before``/``after``/``eval``
    (an evaluation), ``train``, or None (before any stage began)."""
    stage = getattr(run, "stage", None)
    where = {"before": " during the evaluation before training", "train": " during training",
             "after": " during the evaluation after training", "eval": " during the evaluation"}.get(stage, "")
    trains = run.spec.train is not None and stage != "eval"
    ckpt = last_complete_checkpoint(run.checkpoint_dir) if trains else None
    step = checkpoint_step(ckpt) if ckpt is not None else None
    saved = []
    if ckpt is not None:
        saved.append(f"the checkpoint of step {step} of {run.spec.train.max_steps} ({ckpt})")
    best = read_best(run.checkpoint_dir) if trains else None
    if best is not None:
        saved.append(f"the best weights so far (step {best['step']}, {run.checkpoint_dir / 'best'})")
    kept = trains and bool(run.cached_eval("before", run.run_hash))
    if kept:
        saved.append(f"the evaluation before training ({run.dir / 'eval' / 'before.json'})")
    model = run.dir / "model"
    if stage == "after" and (model / "config.json").is_file():  # training finished; only the last evaluation is lost
        text = (f"interrupted{where}: training finished and the trained model is in {model}"
                + (f"; the evaluation before training is saved ({run.dir / 'eval' / 'before.json'})" if kept else ""))
        return f"{text}. Re-running the same command evaluates the trained model again (no retraining): {command}"
    if saved:
        text = f"interrupted{where}: saved {'; '.join(saved)}"
    elif stage in ("before", "eval") and (run.dir / "run.json").is_file() and not (model / "config.json").is_file():
        held = "the run's spec (run.json)" + (" and starting model (init-model/)" if (run.dir / "init-model").is_dir() else "")
        text = f"interrupted{where}: no results were saved; {run.dir} holds only {held}"
    else:
        text = f"interrupted{where}: nothing was saved"
    if stage == "train" and ckpt is None:
        text += f" (no checkpoint yet: the first is written at step {run.spec.train.save_steps}, train.save_steps)"
    reuse = ", reusing the saved evaluation before training" if kept else ""
    if not trains:
        then = "evaluates again"
    elif step is not None:
        then = f"resumes training from step {step}{reuse}"
    elif stage == "train" or kept:
        then = f"starts training from step 0{reuse}"
    else:
        then = "starts over"
    return f"{text}. Re-running the same command {then}: {command}"
