"""The stages of ``dare run``, in order: evaluate before, train, evaluate after, report.

Each stage is a function of ``(run, rundir, state)``: the :class:`dare.run.Run` (the spec made concrete), its
:class:`dare.run.rundir.RunDir` (where the stage reads and writes) and the :class:`CommandState` of this command
(what the stages before it did). :func:`execute` calls :func:`setup`, then each stage of :data:`STAGES` once; a
stage that has nothing to do (``dare train`` evaluates nothing, ``dare eval`` trains nothing) returns at once.
:func:`setup` prepares the run directory, the CPU threads (:mod:`dare.scaling.threads`), the run's console log
(``run.log``, :mod:`dare.run.log`) and the model to evaluate. Where training resumes is decided in one place
(:func:`resume_point`); what the report keeps from an earlier command of the same run directory is
:mod:`dare.report.merge`'s.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from dare import progress
from dare.scaling import distributed, sharding, threads
from dare.report.report import provenance, write_report
from dare.report.merge import earlier_run_report, keep_run_facts, merge_later_evaluation, read_report
from dare.report.plots import plot_training
from dare.report.report import machine_info
from dare.run import info as runinfo
from dare.run import log as runlog
from dare.run.rundir import RunDir
from dare.trainers.checkpoints import checkpoint_step, last_complete_checkpoint, read_best

__all__ = ["STAGES", "CommandState", "ResumePoint", "resume_point", "execute", "setup", "evaluate_before", "train",
           "evaluate_after", "report"]

#: the stages of ``dare run``, in the order :func:`execute` enters them (each once): names of this module's functions
STAGES = ("evaluate_before", "train", "evaluate_after", "report")


@dataclass(frozen=True)
class ResumePoint:
    """Where training starts: ``step`` of the checkpoint it resumes from (None: step 0), and whether that
    checkpoint already reached ``train.max_steps`` (``finished``: nothing to train)."""

    step: int | None = None
    finished: bool = False


def resume_point(checkpoint_dir: Path, resume: bool, max_steps: int) -> ResumePoint:
    """The last complete checkpoint in ``checkpoint_dir`` when ``resume`` (``train.resume``), as the main
    process sees it (:func:`dare.scaling.distributed.from_main`: collective, every process calls it)."""
    ckpt = distributed.from_main(last_complete_checkpoint(checkpoint_dir) if resume else None)
    step = checkpoint_step(ckpt) if ckpt else None
    return ResumePoint(step, step is not None and step >= max_steps)


@dataclass
class CommandState:
    """One command's pass through the stages: what it does and what the stages before have done.

    :param do_train: the command trains (``dare run``, ``dare train``, with an ``algorithm:`` section).
    :param do_eval: the command evaluates (``dare run``, ``dare eval``, with an ``eval:`` section).

    ``stages``: stage label (``before``, ``after``, ``eval``) -> ``BenchmarkResult`` list; ``stage_seconds``: their
    wall times (s); ``train_metrics``/``train_seconds``: training's; ``resume``: where training started;
    ``trained``: ``dare eval`` scores the run's trained ``model/``; ``rerun``: a finished run run again, its earlier
    ``report.json`` (as a dict); ``machine``: the report's machine facts.
    """

    do_train: bool
    do_eval: bool
    stages: dict[str, list] = field(default_factory=dict)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    train_metrics: dict[str, Any] = field(default_factory=dict)
    train_seconds: float | None = None
    resume: ResumePoint = ResumePoint()
    trained: bool = False
    rerun: dict[str, Any] | None = None
    machine: dict[str, Any] | None = None


def execute(run, train: bool = True, evaluate: bool = True) -> dict[str, Any]:
    """One command's pass through a run: :func:`setup`, then each stage of :data:`STAGES` once.

    :param run: the :class:`dare.run.Run`. :param train: train (``dare run``, ``dare train``), when the spec has
        an algorithm. :param evaluate: evaluate (``dare run``, ``dare eval``), when the spec has an eval section.
    :returns: ``{"stages": {stage: [result dicts]}, "train": train metrics}``.
    """
    state = CommandState(do_train=train and run.objective is not None, do_eval=evaluate and run.spec.eval is not None)
    module = sys.modules[__name__]
    try:
        module.setup(run, run.rundir, state)  # looked up at each call, like the stages
        for name in STAGES:
            getattr(module, name)(run, run.rundir, state)
        distributed.barrier()
    finally:
        runlog.close()
    return {"stages": {k: [r.to_dict(with_samples=False) for r in v] for k, v in state.stages.items()},
            "train": state.train_metrics}


# ------------------------------------------------------------------ before the stages
def setup(run, rundir: RunDir, state: CommandState) -> None:
    """Run directory (:meth:`dare.run.Run.prepare`), ``run.log``, CPU threads, seed, and for ``dare eval``
    the run's trained model when its directory holds one.

    One thread count applies to the whole command (:func:`dare.scaling.threads.choose_threads`), so every stage's
    tokens/s is measured with the same CPU threads."""
    distributed.setup()
    run.prepare(train=state.do_train)
    if distributed.is_main():
        rundir.open_log()
    choice = threads.apply(run.spec, training=state.do_train)
    state.machine = {**machine_info(), "torch_threads_from": choice.reason}
    if distributed.is_main():
        print(f"torch threads: {choice.describe()}", file=sys.stderr)
        if (warning := threads.load_warning(choice.threads)) is not None:
            print(warning, file=sys.stderr)
    torch.manual_seed(run.spec.train.seed if run.spec.train else 0)
    state.trained = state.do_eval and not state.do_train and run.use_trained_model()
    if state.do_eval and not state.do_train and distributed.shards_model():  # `dare eval` under FSDP2/ZeRO-3
        run.lm.model = sharding.shard_for_evaluation(run.model)


# ------------------------------------------------------------------ the stages
def evaluate_before(run, rundir: RunDir, state: CommandState) -> None:
    """``dare run``: the evaluation before training (``eval.before_train``); ``dare eval``: the ``eval`` row.
    A result of the same spec saved by an earlier command is kept (unless ``dare eval`` scores model/)."""
    if not state.do_eval or (state.do_train and not run.spec.eval.before_train):
        return
    label = "before" if state.do_train else "eval"
    cached = None if state.trained else run.cached_eval(label)
    if cached:
        progress.stage("evaluate", f"{label}: kept from {rundir.eval_file(label)}")
        state.stages[label] = cached
    else:
        state.stages[label] = _timed_evaluate(run, state, label)


def train(run, rundir: RunDir, state: CommandState) -> None:
    """Train with the spec's objective from :func:`resume_point` (the trained model ends in ``model/``)."""
    if not state.do_train:
        return
    t = run.spec.train
    state.resume = resume_point(rundir.checkpoints, t.resume, t.max_steps)
    step, finished = state.resume.step, state.resume.finished
    progress.stage("train", f"{run.objective.name}, {t.max_steps} steps"
                   + (" already trained: nothing to train" if finished
                      else f", resuming from step {step}" if step else "")
                   + f"; checkpoints every {t.save_steps} steps in {rundir.checkpoints}")
    t0 = time.perf_counter()
    run.stage = "train"
    metrics = run.train() or {}
    state.train_seconds = round(time.perf_counter() - t0, 1)
    if t.keep_best and (best := read_best(rundir.checkpoints)) is not None:
        metrics = {**metrics, "best_step": best["step"], "best_validation_accuracy": best["value"]}
    state.train_metrics = metrics


def evaluate_after(run, rundir: RunDir, state: CommandState) -> None:
    """The evaluation after training; a finished run run again keeps its saved one (and its report facts)."""
    earlier = earlier_run_report(rundir) if state.resume.finished else None
    cached = run.cached_eval("after") if earlier and state.do_eval else None
    if state.do_eval and state.do_train:
        if cached:
            progress.stage("evaluate", f"after: kept from {rundir.eval_file('after')}")
        state.stages["after"] = cached or _timed_evaluate(run, state, "after")
        _card_with_scores(run, rundir, state.stages["after"])
    state.rerun = earlier if (cached or not state.do_eval) else None


def _card_with_scores(run, rundir: RunDir, results) -> None:
    """Rewrite ``model/README.md`` (atomically, main process) with the scores after training in its model-index."""
    if not distributed.is_main() or not rundir.has_model():
        return
    from dare.io import atomic_write_text
    from dare.report.modelcard import CARD_NAME

    rows = [r if isinstance(r, dict) else r.to_dict(with_samples=False) for r in results]
    atomic_write_text(rundir.model / CARD_NAME, run.model_card(rows))


def report(run, rundir: RunDir, state: CommandState) -> None:
    """``report.{json,md}`` (with what :mod:`dare.report.merge` keeps of an earlier command) and, after
    training, ``plot.png``; main process only."""
    prov = provenance(run.spec, run.sampler, run.spec.eval.seed if run.spec.eval else None, machine=state.machine)
    facts = run.facts()
    info = runinfo.run_info(facts, state.train_metrics, state.train_seconds, state.resume.step, state.stage_seconds)
    extra = {"train_metrics": state.train_metrics, "run_dir": str(rundir), "run": info}
    if state.rerun:  # nothing was trained or evaluated again: the report keeps the run's own facts
        extra, prov = keep_run_facts(state.rerun, extra, prov)
    if state.do_eval and not state.do_train:  # `dare eval` after `dare run`: keep the run's before/after rows
        earlier = {s: rs for s in ("before", "after") if (rs := run.cached_eval(s, run.run_hash))}
        if earlier:
            state.stages, extra, prov = merge_later_evaluation(read_report(rundir), earlier, state.stages, extra,
                                                               prov, state.stage_seconds)
        if state.trained:
            extra["eval_model"] = str(rundir.model)
        if run.eval_overrides:
            extra["eval_overrides"] = run.eval_overrides
    stages = state.stages
    if stages and distributed.is_main():
        progress.stage("report", f"{rundir.report_md}" + (f", {RunDir.PLOT}" if state.do_train else ""))
        extra["run"]["eval_sets"] = runinfo.eval_set_labels(facts, stages)
        write_report(rundir, stages, prov, extra=extra, evaluators=run.evaluator_descriptions())
    if state.do_train and distributed.is_main():
        flat = lambda rs: {r.name: r for r in rs}  # noqa: E731
        plot_training(
            rundir.metrics,
            rundir.plot,
            before=flat(stages.get("before", [])) or None,
            after=flat(stages.get("after", [])) or None,
            title=_plot_title(run, state),
            labels=runinfo.eval_set_labels(facts, stages),
            after_step=state.train_metrics.get("best_step"), max_step=run.spec.train.max_steps,
        )


# ------------------------------------------------------------------ helpers
def _timed_evaluate(run, state: CommandState, label: str) -> list:
    run.stage = label  # for the Ctrl-C message
    what = {"before": "before training", "after": "after training", "eval": "the model"}[label]
    progress.stage("evaluate", f"{what}: " + ", ".join(b.evaluator.name for b in run.resolved.benchmarks))
    t0 = time.perf_counter()
    results = run.evaluate(label)
    state.stage_seconds[label] = round(time.perf_counter() - t0, 1)
    return results


def _plot_title(run, state: CommandState) -> str:
    obj = run.objective.name if run.objective is not None else "?"
    steps = state.train_metrics.get("global_step", run.spec.train.max_steps if run.spec.train else "?")
    return f"{run.rundir}: {obj}, {steps} steps"
