"""What a run's numbers come from, in words: which rows each evaluation scored, the run's context for its
report (objective, steps, wall time, training data, sampler), and what an interrupted command saved.

Every function here takes plain data (:class:`RunFacts`, :class:`RowSet`, dicts of results), which
:meth:`dare.run.Run.facts` builds from a run; the report stage of :mod:`dare.run.stages` uses them for
``report.{json,md}`` (the ``run`` block) and ``plot.png``'s legend labels, the CLI for the message printed
on Ctrl-C; ``dare compare`` reads the ``run`` block back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dare.run.rundir import RunDir
from dare.trainers.checkpoints import BEST_DIR, checkpoint_step, last_complete_checkpoint, read_best

__all__ = ["RowSet", "RunFacts", "describe_rows", "eval_set_labels", "run_info", "interrupted_message", "logged_rows"]


@dataclass(frozen=True)
class RowSet:
    """The rows one benchmark scores: its name (``validation (sudoku)`` for ``eval.validation``), its file
    (``"?"`` when unknown) and the first row (``offset``)."""

    name: str
    path: str
    offset: int = 0


@dataclass(frozen=True)
class RunFacts:
    """What a report and the Ctrl-C message say about a run, as plain data.

    ``objective``/``sampler``: ``{"name", "params"}`` or None; ``max_steps``/``save_steps``: ``train.*`` (None
    without a train section); ``training_data``: ``{"path", "offset", "limit"}`` of ``data.train`` or None;
    ``in_training_eval``: ``{"every_steps", "rows"}`` or None; ``validation``/``benchmarks``: the row sets of
    ``eval.validation`` and ``eval.benchmarks`` (None and () without an eval section).
    """

    dir: Path
    objective: dict[str, Any] | None = None
    sampler: dict[str, Any] | None = None
    max_steps: int | None = None
    save_steps: int | None = None
    training_data: dict[str, Any] | None = None
    in_training_eval: dict[str, Any] | None = None
    validation: RowSet | None = None
    benchmarks: tuple[RowSet, ...] = ()

    @property
    def rundir(self) -> RunDir:
        """The run directory (:class:`dare.run.rundir.RunDir` of :attr:`dir`)."""
        return RunDir(self.dir)

    @property
    def checkpoint_dir(self) -> Path:
        """``checkpoints/`` of the run directory."""
        return self.rundir.checkpoints


def describe_rows(rows: RowSet, n: int | None = None) -> str:
    """Which rows a benchmark scores:
    ``"sudoku: 500 rows (0-499) of dare://sudoku/test.parquet"``,
    ``"validation (sudoku): 100 rows (19000-19099) of dare://sudoku/train.parquet"`` (``n`` unknown: the file)."""
    if n is None:
        return f"{rows.name}: rows from {rows.offset} of {rows.path}" if rows.offset else f"{rows.name}: {rows.path}"
    return f"{rows.name}: {n} rows ({rows.offset}-{rows.offset + n - 1}) of {rows.path}"


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


def eval_set_labels(facts: RunFacts, stages: dict[str, list]) -> dict[str, str]:
    """Labels naming each evaluation's rows: the in-training evaluation's prefix (``validation`` or the first
    benchmark's name; row count from the metrics' ``.../rows``) and ``<stage>:<benchmark>`` for the full
    evaluations in ``stages`` (stage -> results with ``name`` and ``n``, in ``eval.benchmarks`` order)."""
    labels: dict[str, str] = {}
    if facts.validation is None and not facts.benchmarks:
        return labels
    rows = logged_rows(facts.rundir.metrics)
    if facts.validation is not None:
        labels["validation"] = describe_rows(facts.validation, rows.get("validation"))
    else:
        b = facts.benchmarks[0]
        labels[b.name] = describe_rows(b, rows.get(b.name))
    for stage, results in stages.items():
        for bench, res in zip(facts.benchmarks, results):
            labels[f"{stage}:{res.name}"] = describe_rows(bench, res.n)
    return labels


def run_info(facts: RunFacts, train_metrics: dict[str, Any], train_seconds: float | None, resumed_from: int | None,
             stage_seconds: dict[str, float]) -> dict[str, Any]:
    """The ``run`` block of ``report.json``: objective (name, params), steps done and planned, training wall
    time of this command (``resumed_from_step`` when it resumed), training data, sampler, in-training
    evaluation, evaluation wall times per stage and :func:`eval_set_labels`."""
    td = facts.training_data
    info: dict[str, Any] = {
        "objective": facts.objective,
        "steps": train_metrics.get("global_step"),
        "max_steps": facts.max_steps,
        "train_seconds": train_seconds,
        "resumed_from_step": resumed_from,
        "training_data": {**td, "examples": train_metrics.get("examples")} if td is not None else None,
        "sampler": facts.sampler,
        "stage_seconds": stage_seconds,
        "eval_sets": eval_set_labels(facts, {}),
    }
    if facts.in_training_eval is not None:
        info["in_training_eval"] = facts.in_training_eval
    return info


def interrupted_message(facts: RunFacts, stage: str | None, before_saved: bool, command: str) -> str:
    """What an interrupted command (Ctrl-C) saved in ``facts.dir`` and what re-running it does, as one paragraph.

    :param stage: where it stopped (the stage :mod:`dare.run.stages` was in): ``before``/``after``/``eval`` (an
        evaluation), ``train``, or None (before any stage began).
    :param before_saved: the run's evaluation before training is saved (``eval/before.json`` of its spec).
    :param command: the command that resumes (quoted at the end)."""
    where = {"before": " during the evaluation before training", "train": " during training",
             "after": " during the evaluation after training", "eval": " during the evaluation"}.get(stage, "")
    trains = facts.max_steps is not None and stage != "eval"
    ckpt = last_complete_checkpoint(facts.checkpoint_dir) if trains else None
    step = checkpoint_step(ckpt) if ckpt is not None else None
    saved = []
    if ckpt is not None:
        saved.append(f"the checkpoint of step {step} of {facts.max_steps} ({ckpt})")
    best = read_best(facts.checkpoint_dir) if trains else None
    if best is not None:
        saved.append(f"the best weights so far (step {best['step']}, {facts.checkpoint_dir / BEST_DIR})")
    kept = trains and before_saved
    rundir = facts.rundir
    if kept:
        saved.append(f"the evaluation before training ({rundir.eval_file('before')})")
    model = rundir.model
    if stage == "after" and rundir.has_model():  # training finished; only the last evaluation is lost
        text = (f"interrupted{where}: training finished and the trained model is in {model}"
                + (f"; the evaluation before training is saved ({rundir.eval_file('before')})" if kept else ""))
        return f"{text}. Re-running the same command evaluates the trained model again (no retraining): {command}"
    if saved:
        text = f"interrupted{where}: saved {'; '.join(saved)}"
    elif stage in ("before", "eval") and rundir.is_run() and not rundir.has_model():
        held = (f"the run's spec ({RunDir.RECORD})"
                + (f" and starting model ({RunDir.INIT_MODEL}/)" if rundir.init_model.is_dir() else ""))
        text = f"interrupted{where}: no results were saved; {facts.dir} holds only {held}"
    else:
        text = f"interrupted{where}: nothing was saved"
    if stage == "train" and ckpt is None:
        text += f" (no checkpoint yet: the first is written at step {facts.save_steps}, train.save_steps)"
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
