"""The stages of ``dare run``, in order: evaluate before, train, evaluate after, report.

:class:`Pipeline` takes a :class:`dare.run.Run` (the spec made concrete) and enters each stage of
:data:`STAGES` once; a stage that has nothing to do (``dare train`` evaluates nothing, ``dare eval`` trains
nothing) returns at once. Before the stages, :meth:`Pipeline.setup` prepares the run directory, the CPU
threads (:mod:`dare.threads`), the run's console log (``run.log``, :mod:`dare.runlog`) and the model to
evaluate. Where training resumes is decided in one place (:func:`resume_point`); what the report keeps
from an earlier command of the same run directory is :mod:`dare.eval.merge`'s.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from dare import distributed, progress, runinfo, runlog, sharding, threads
from dare.eval import provenance, write_report
from dare.eval.merge import earlier_run_report, keep_run_facts, merge_later_evaluation, read_report
from dare.eval.plots import plot_training
from dare.eval.report import machine_info
from dare.trainers.checkpoints import checkpoint_step, last_complete_checkpoint, read_best

__all__ = ["STAGES", "Pipeline", "ResumePoint", "resume_point"]

#: the stages of ``dare run``, in the order :meth:`Pipeline.execute` enters them (each once)
STAGES = ("evaluate_before", "train", "evaluate_after", "report")


@dataclass(frozen=True)
class ResumePoint:
    """Where training starts: ``step`` of the checkpoint it resumes from (None: step 0), and whether that
    checkpoint already reached ``train.max_steps`` (``finished``: nothing to train)."""

    step: int | None = None
    finished: bool = False


def resume_point(checkpoint_dir: Path, resume: bool, max_steps: int) -> ResumePoint:
    """The last complete checkpoint in ``checkpoint_dir`` when ``resume`` (``train.resume``), as the main
    process sees it (:func:`dare.distributed.from_main`: collective, every process calls it)."""
    ckpt = distributed.from_main(last_complete_checkpoint(checkpoint_dir) if resume else None)
    step = checkpoint_step(ckpt) if ckpt else None
    return ResumePoint(step, step is not None and step >= max_steps)


class Pipeline:
    """One command's pass through the stages of a run.

    :param run: the :class:`dare.run.Run`. :param train: train (``dare run``, ``dare train``), when the spec has
        an algorithm. :param evaluate: evaluate (``dare run``, ``dare eval``), when the spec has an eval section.
    """

    def __init__(self, run, train: bool = True, evaluate: bool = True):
        self.run = run
        self.do_train = train and run.objective is not None
        self.do_eval = evaluate and run.spec.eval is not None
        self.stages: dict[str, list] = {}
        self.stage_seconds: dict[str, float] = {}
        self.train_metrics: dict[str, Any] = {}
        self.train_seconds: float | None = None
        self.resume = ResumePoint()
        self.trained = False  # `dare eval` evaluates the run's trained model/
        self.rerun: dict[str, Any] | None = None  # a finished run run again: its earlier report.json
        self.machine: dict[str, Any] | None = None

    def execute(self) -> dict[str, Any]:
        """:meth:`setup`, then each stage of :data:`STAGES` once. Returns ``{"stages": {stage: [result dicts]},
        "train": train metrics}``."""
        try:
            self.setup()
            for name in STAGES:
                getattr(self, name)()
            distributed.barrier()
        finally:
            runlog.close()
        return {"stages": {k: [r.to_dict(with_samples=False) for r in v] for k, v in self.stages.items()},
                "train": self.train_metrics}

    # ------------------------------------------------------------------ before the stages
    def setup(self) -> None:
        """Run directory (:meth:`dare.run.Run.prepare`), ``run.log``, CPU threads, seed, and for ``dare eval``
        the run's trained model when its directory holds one.

        One thread count applies to the whole command (:func:`dare.threads.choose_threads`), so every stage's
        tokens/s is measured with the same CPU threads."""
        run = self.run
        distributed.setup()
        run.prepare(train=self.do_train)
        if distributed.is_main():
            runlog.open_log(run.dir / "run.log")
        choice = threads.apply(run.spec, training=self.do_train)
        self.machine = {**machine_info(), "torch_threads_from": choice.reason}
        if distributed.is_main():
            print(f"torch threads: {choice.describe()}", file=sys.stderr)
            if (warning := threads.load_warning(choice.threads)) is not None:
                print(warning, file=sys.stderr)
        torch.manual_seed(run.spec.train.seed if run.spec.train else 0)
        self.trained = self.do_eval and not self.do_train and run.use_trained_model()
        if self.do_eval and not self.do_train and distributed.shards_model():  # `dare eval` under FSDP2/ZeRO-3
            run.lm.model = sharding.shard_for_evaluation(run.model)

    # ------------------------------------------------------------------ the stages
    def evaluate_before(self) -> None:
        """``dare run``: the evaluation before training (``eval.before_train``); ``dare eval``: the ``eval`` row.
        A result of the same spec saved by an earlier command is kept (unless ``dare eval`` scores model/)."""
        run = self.run
        if not self.do_eval or (self.do_train and not run.spec.eval.before_train):
            return
        label = "before" if self.do_train else "eval"
        cached = None if self.trained else run.cached_eval(label)
        if cached:
            progress.stage("evaluate", f"{label}: kept from {run.dir / 'eval' / (label + '.json')}")
            self.stages[label] = cached
        else:
            self.stages[label] = self._timed_evaluate(label)

    def train(self) -> None:
        """Train with the spec's objective from :func:`resume_point` (the trained model ends in ``model/``)."""
        run = self.run
        if not self.do_train:
            return
        t = run.spec.train
        self.resume = resume_point(run.checkpoint_dir, t.resume, t.max_steps)
        step, finished = self.resume.step, self.resume.finished
        progress.stage("train", f"{run.objective.name}, {t.max_steps} steps"
                       + (" already trained: nothing to train" if finished
                          else f", resuming from step {step}" if step else "")
                       + f"; checkpoints every {t.save_steps} steps in {run.checkpoint_dir}")
        t0 = time.perf_counter()
        run.stage = "train"
        metrics = run.train() or {}
        self.train_seconds = round(time.perf_counter() - t0, 1)
        if t.keep_best and (best := read_best(run.checkpoint_dir)) is not None:
            metrics = {**metrics, "best_step": best["step"], "best_validation_accuracy": best["value"]}
        self.train_metrics = metrics

    def evaluate_after(self) -> None:
        """The evaluation after training; a finished run run again keeps its saved one (and its report facts)."""
        run = self.run
        earlier = earlier_run_report(run.dir) if self.resume.finished else None
        cached = run.cached_eval("after") if earlier and self.do_eval else None
        if self.do_eval and self.do_train:
            if cached:
                progress.stage("evaluate", f"after: kept from {run.dir / 'eval' / 'after.json'}")
            self.stages["after"] = cached or self._timed_evaluate("after")
            self._card_with_scores(self.stages["after"])
        self.rerun = earlier if (cached or not self.do_eval) else None

    def _card_with_scores(self, results) -> None:
        """Rewrite ``model/README.md`` (atomically, main process) with the scores after training in its model-index."""
        run = self.run
        if not distributed.is_main() or not (run.model_dir / "config.json").is_file():
            return
        from dare.io import atomic_write_text

        rows = [r if isinstance(r, dict) else r.to_dict(with_samples=False) for r in results]
        atomic_write_text(run.model_dir / "README.md", run.model_card(rows))

    def report(self) -> None:
        """``report.{json,md}`` (with what :mod:`dare.eval.merge` keeps of an earlier command) and, after
        training, ``plot.png``; main process only."""
        run = self.run
        prov = provenance(run.spec, run.sampler, run.spec.eval.seed if run.spec.eval else None, machine=self.machine)
        facts = run.facts()
        info = runinfo.run_info(facts, self.train_metrics, self.train_seconds, self.resume.step, self.stage_seconds)
        extra = {"train_metrics": self.train_metrics, "run_dir": str(run.dir), "run": info}
        if self.rerun:  # nothing was trained or evaluated again: the report keeps the run's own facts
            extra, prov = keep_run_facts(self.rerun, extra, prov)
        if self.do_eval and not self.do_train:  # `dare eval` after `dare run`: keep the run's before/after rows
            earlier = {s: rs for s in ("before", "after") if (rs := run.cached_eval(s, run.run_hash))}
            if earlier:
                self.stages, extra, prov = merge_later_evaluation(read_report(run.dir), earlier, self.stages, extra,
                                                                  prov, self.stage_seconds)
            if self.trained:
                extra["eval_model"] = str(run.model_dir)
            if run.eval_overrides:
                extra["eval_overrides"] = run.eval_overrides
        stages = self.stages
        if stages and distributed.is_main():
            progress.stage("report", f"{run.dir / 'report.md'}" + (", plot.png" if self.do_train else ""))
            extra["run"]["eval_sets"] = runinfo.eval_set_labels(facts, stages)
            write_report(run.dir, stages, prov, extra=extra, evaluators=run.evaluator_descriptions())
        if self.do_train and distributed.is_main():
            flat = lambda rs: {r.name: r for r in rs}  # noqa: E731
            plot_training(
                run.dir / "metrics.jsonl",
                run.dir / "plot.png",
                before=flat(stages.get("before", [])) or None,
                after=flat(stages.get("after", [])) or None,
                title=self._plot_title(),
                labels=runinfo.eval_set_labels(facts, stages),
                after_step=self.train_metrics.get("best_step"), max_step=run.spec.train.max_steps,
            )

    # ------------------------------------------------------------------ helpers
    def _timed_evaluate(self, label: str) -> list:
        run = self.run
        run.stage = label  # for the Ctrl-C message
        what = {"before": "before training", "after": "after training", "eval": "the model"}[label]
        progress.stage("evaluate", f"{what}: " + ", ".join(b.evaluator.name for b in run.resolved.benchmarks))
        t0 = time.perf_counter()
        results = run.evaluate(label)
        self.stage_seconds[label] = round(time.perf_counter() - t0, 1)
        return results

    def _plot_title(self) -> str:
        run = self.run
        obj = run.objective.name if run.objective is not None else "?"
        steps = self.train_metrics.get("global_step", run.spec.train.max_steps if run.spec.train else "?")
        return f"{run.dir}: {obj}, {steps} steps"
