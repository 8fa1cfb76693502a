"""A run: a validated spec made concrete (model, sampler, rewards, objective, its run directory).

``Run.execute()`` is what ``dare run`` does: evaluate before training (optional), train with the
spec's objective, evaluate after, then write the report and plot in the run directory
(:mod:`dare.run.stages`). The directory's layout and rules are :class:`dare.run.rundir.RunDir`'s
(``Run.rundir``; ``Run.dir`` is its path).

While it works, a run prints stage banners (evaluate / train / validate / report) and progress with rate
and time left on stderr (:mod:`dare.progress`, main process only).
"""

from __future__ import annotations

import json
import logging
import sys
from functools import cached_property
from pathlib import Path
from typing import Any

from dare.scaling import distributed
from dare.errors import DareError, SpecError
from dare.eval import BenchmarkResult, evaluate_benchmark
from dare.io import atomic_write_json
from dare.modeling import create_model, enable_gradient_checkpointing, load_model
from dare.modeling.checkpoint import DTYPES
from dare.modeling.lora import apply_lora
from dare.rewards import WeightedReward
from dare.run import info as runinfo
from dare.run.differences import format_differences, spec_differences
from dare.run.rundir import RunDir
from dare.sampling.bundle import DecodingBundle
from dare.runspec import ResolvedBenchmark, ResolvedSpec, RunSpec, load_spec, resolve_spec, spec_hash
from dare.trainers.checkpoints import last_complete_checkpoint, resume_problem

__all__ = ["Run"]

log = logging.getLogger("dare.run")


class Run:
    """Everything a trainer or evaluator needs, resolved from a spec.

    :raises SpecError: the spec fails validation (both passes).
    """

    def __init__(self, spec: RunSpec, source: str | None = None, resolved: ResolvedSpec | None = None):
        self.spec = spec
        self.source = source
        self.resolved = resolved if resolved is not None else resolve_spec(spec, source)
        self.resolved.raise_problems()
        #: the run directory (``output.dir``): its layout and rules; ``dir`` is its path
        self.rundir = RunDir(spec.output.dir)
        self.dir = self.rundir.path
        self.family = self.resolved.family
        self.sampler = self.resolved.sampler
        self.objective = self.resolved.objective
        self.reward = self._weighted(self.resolved.rewards, [r.timeout_s for r in spec.rewards])
        self.hash = spec_hash(spec)
        # the stage dare.run.stages is in (before, train, after, eval): interrupted_message
        self.stage: str | None = None
        #: extra ``transformers.TrainerCallback``s given to the trainer (e.g. ``dare profile``'s step timer)
        self.callbacks: list = []
        #: the spec hash of the run that owns the directory (differs from ``hash`` only for ``dare eval`` with
        #: evaluation-only overrides, see :meth:`prepare`), and those overrides as ``"key (old -> new)"`` text
        self.run_hash = self.hash
        self.eval_overrides: str | None = None

    @classmethod
    def from_file(cls, path: str, overrides: list[str] | None = None, unset: list[str] | None = None,
                  spec: RunSpec | None = None) -> Run:
        """The run of the spec file ``path`` with ``overrides`` (``--set KEY=VALUE``) and ``unset`` (``--unset KEY``).

        :param spec: the file's structurally validated spec when the caller has read it already (the CLI reads it
            first to lock ``output.dir`` before the slow checks); the semantic checks run here.
        """
        if spec is None:
            spec = load_spec(path, overrides=overrides, check=False, unset=unset)
        try:
            return cls(spec, source=str(path))
        except SpecError as exc:  # a semantic problem of a --set value: say where it came from
            if not overrides and not unset:
                raise
            from dare.runspec.problems import mark_overrides

            raise SpecError(mark_overrides(exc.problems, overrides or [], unset), source=exc.source) from None

    @staticmethod
    def _weighted(pairs, timeouts_s):
        return WeightedReward(pairs, timeouts_s) if pairs else None

    # ------------------------------------------------------------------ directories
    @property
    def checkpoint_dir(self) -> Path:
        """``checkpoints/`` of the run directory (:attr:`dare.run.rundir.RunDir.checkpoints`)."""
        return self.rundir.checkpoints

    @property
    def model_dir(self) -> Path:
        """``model/`` of the run directory (:attr:`dare.run.rundir.RunDir.model`)."""
        return self.rundir.model

    def prepare(self, train: bool = True) -> None:
        """Create ``output.dir`` and its ``run.json`` by the rules of :meth:`dare.run.rundir.RunDir.plan`.

        A non-empty directory without ``run.json`` is refused (never deleted, whatever
        ``output.overwrite``). A run directory is cleared first (its contents deleted) when it holds a
        different run and ``output.overwrite`` is set, when its earlier run produced nothing durable
        (no checkpoint, ``model/`` or report: one line on stderr says so), or, when ``train``, when it
        holds training output of this spec with ``train.resume: false`` and ``output.overwrite``.
        An evaluation-only command whose spec differs from the stored one only in evaluation settings
        (:data:`dare.run.rundir.EVAL_ONLY_KEYS`) evaluates into the directory and keeps its ``run.json``.

        With several processes every one decides from the same directory state (before anything changes), and
        only the main process clears, creates and writes; the others wait at a barrier.

        :raises SpecError: ``output.dir`` (not a run directory; a different run) or ``train.resume``
            (this run's checkpoints are there but resume is off and overwrite is not set).
        """
        resume = self.spec.train.resume if self.spec.train is not None else True
        dump = self.spec.model_dump(mode="json")
        rundir = self.rundir
        action, problems = rundir.plan(self.hash, self.spec.output.overwrite, resume=resume, train=train, spec=dump,
                                       damaged=resume_problem)
        self.created_dir = rundir.first_missing() if action == "use" else None  # for discard_unused_dir
        distributed.barrier()  # every process decided before the main one changes anything
        if problems:
            raise SpecError(problems, source=self.source)
        if action == "eval-only":
            self.run_hash = rundir.read_record()["spec_hash"]
            self.eval_overrides = format_differences(spec_differences(rundir.stored_spec(), dump), most=20)
            if distributed.is_main():
                print(f"{self.dir}: evaluating the finished run with other evaluation settings: {self.eval_overrides}",
                      file=sys.stderr)
            distributed.barrier()
            return
        if distributed.is_main():
            if action == "replace-unfinished":
                print(f"{self.dir}: replacing the files of an earlier unfinished run (no checkpoint, model or report)",
                      file=sys.stderr)
            if action in ("replace", "replace-unfinished"):
                rundir.clear()
            try:
                rundir.create(self.hash, self.source, self.spec.model_dump(mode="json"))
            except OSError as exc:  # validation probed it; a race or an odd filesystem may still refuse
                raise SpecError([("output.dir", f"{str(self.dir)!r} cannot be created: {exc.strerror}")],
                                source=self.source) from None
        distributed.barrier()

    def discard_unused_dir(self) -> None:
        """After a refusal (:class:`DareError`): remove ``output.dir`` if this command created it and nothing was
        trained or measured in it yet (:meth:`dare.run.rundir.RunDir.discard_new`), so a refused run leaves no files."""
        if distributed.is_main() and getattr(self, "created_dir", None) is not None:
            self.rundir.discard_new(self.created_dir)

    # ------------------------------------------------------------------ model
    @cached_property
    def lm(self):
        """The ``LoadedModel`` (created under ``init-model/`` when ``model.new``).

        ``model.path`` may be a LoRA adapter directory (base + adapter, merged; see
        :func:`dare.modeling.lora.load_adapter_checkpoint`). With ``model.lora`` the model is wrapped in
        peft adapters (:func:`dare.modeling.lora.apply_lora`, initialised under ``train.seed``), so
        every trainer trains only the adapters. The model is moved to this process's device
        (:func:`dare.scaling.distributed.device`: ``cuda:LOCAL_RANK`` on GPU machines) unless FSDP/DeepSpeed will shard
        it. ``model.gradient_checkpointing`` switches on the model's
        per-layer gradient checkpointing (:func:`dare.modeling.enable_gradient_checkpointing`) before that.
        """
        m = self.spec.model
        if m.new is not None:
            init_dir = self.rundir.init_model
            with distributed.main_first():  # one process creates the fresh model, the others load it
                if self.rundir.has_init_model():
                    lm = load_model(init_dir, dtype=m.dtype)
                else:
                    lm = create_model(self.family, init_dir, preset=m.new.preset, overrides=m.new.config,
                                      tokenizer=m.new.tokenizer, seed=m.new.seed)
                    lm.model.to(DTYPES[m.dtype])
            base = str(init_dir.resolve())
        else:
            lm = load_model(m.path, dtype=m.dtype)
            base = str(lm.path.resolve()) if lm.path is not None else m.path
        if not distributed.shards_model():  # FSDP/DeepSpeed: the trainer places the shards
            lm.model.to(distributed.device())
        if m.gradient_checkpointing:
            enable_gradient_checkpointing(lm.model)
        if m.lora is not None:
            seed = self.spec.train.seed if self.spec.train else 0
            lm.model = apply_lora(lm.model, self.family, m.lora, base_name_or_path=base, seed=seed)
        return lm

    @property
    def model(self):
        return self.lm.model

    @property
    def tokenizer(self):
        return self.lm.tokenizer

    @property
    def tokens(self):
        return self.lm.tokens

    def use_trained_model(self) -> bool:
        """Make the run's model the trained ``model/`` of its directory, if there is one (for eval). Without one,
        the spec's model is evaluated, and a directory whose training stopped after a checkpoint says so (naming
        the checkpoint and how to score it)."""
        if not self.rundir.has_model():
            ckpt = last_complete_checkpoint(self.rundir.checkpoints) if self.rundir.checkpoints.is_dir() else None
            if ckpt is not None and distributed.is_main():
                print(f"{self.rundir} has no trained model/ yet (its training stopped at {Path(ckpt).name}), so this "
                      f"evaluates the spec's model; to score that checkpoint, add --set model.path={ckpt}, or finish "
                      f"the training with `dare run`", file=sys.stderr)
            return False
        self.__dict__["lm"] = load_model(self.model_dir, dtype=self.spec.model.dtype)
        if not distributed.shards_model():
            self.lm.model.to(distributed.device())
        if distributed.is_main():
            print(f"evaluating the trained model in {self.model_dir}", file=sys.stderr)
        return True

    # ------------------------------------------------------------------ training
    def train(self) -> dict[str, float]:
        """Train with the spec's objective; the trained model ends up in ``model/``."""
        if self.objective is None:
            raise DareError("this spec has no algorithm: section, so there is nothing to train")
        return self.objective.train(self)

    # ------------------------------------------------------------------ evaluation
    def score(self, bench: ResolvedBenchmark, model=None, limit: int | None = None, progress: str | None = None
              ) -> BenchmarkResult:
        """Generate answers to ``bench``'s rows with the spec's sampler and score them with its reward.

        :param model: default the run's model. :param limit: rows at most (overrides ``bench.spec.limit``).
        :param progress: description of the progress display (:mod:`dare.progress`).
        """
        decoding = DecodingBundle(model if model is not None else self.model, self.family, self.tokens, self.tokenizer,
                                  self.sampler)
        reward = WeightedReward([(bench.reward, 1.0)], [bench.spec.reward_timeout_s])
        return evaluate_benchmark(decoding, bench.evaluator, bench.spec, reward, batch_size=self.spec.eval.batch_size,
                                  seed=self.spec.eval.seed, limit=limit, progress=progress)

    def evaluate(self, stage: str, model=None, limit: int | None = None, benchmarks: list[int] | None = None,
                 save: bool = True):
        """Run the spec's benchmarks (``eval.benchmarks``, or the indices ``benchmarks``) on ``model``.

        :returns: list of ``BenchmarkResult``; also written to ``eval/<stage>.json`` when ``save``.
        """
        if self.spec.eval is None:
            return []
        results = []
        chosen = self.resolved.benchmarks if benchmarks is None else [self.resolved.benchmarks[i] for i in benchmarks]
        for bench in chosen:
            res = self.score(bench, model, limit, progress=f"{stage}: {bench.evaluator.name}")
            results.append(res)
            log.info("%s %s: accuracy %.4f mean reward %.4f", stage, res.name, res.accuracy, res.mean_reward)
        if save and distributed.is_main():
            atomic_write_json(self.rundir.eval_file(stage),
                              {"spec_hash": self.hash, "results": [r.to_dict() for r in results]})
        return results

    def cached_eval(self, stage: str, spec_hash: str | None = None):
        """Results of an earlier evaluation of this exact spec (``spec_hash``, default this one's) at ``stage``
        (resume), else None."""
        f = self.rundir.eval_file(stage)
        if not f.is_file():
            return None
        data = json.loads(f.read_text())
        if data.get("spec_hash") != (spec_hash or self.hash):
            return None
        return [BenchmarkResult(**r) for r in data["results"]]

    def validate(self, model, limit: int | None = None) -> BenchmarkResult:
        """Score ``model`` on ``eval.validation`` (``limit`` rows at most)."""
        return self.score(self.resolved.validation, model, limit, progress="validate: validation")

    def training_eval_fn(self):
        """``(model) -> metrics`` for in-training evaluation every ``train.eval_steps`` (``train.eval_limit`` rows).

        With ``eval.validation`` the keys are ``validation/accuracy`` and ``validation/mean_reward`` (what
        ``train.keep_best`` selects on); otherwise ``<benchmark>/accuracy`` and ``<benchmark>/mean_reward``
        of the first eval benchmark; ``.../rows`` is the number of rows scored (plots say which set).
        """
        if self.spec.eval is None or self.spec.train is None or not self.spec.train.eval_steps or self.sampler is None:
            return None
        limit = self.spec.train.eval_limit

        def fn(model) -> dict[str, float]:
            if self.spec.eval.validation is not None:
                res = self.validate(model, limit)
                return {"validation/accuracy": res.accuracy, "validation/mean_reward": res.mean_reward,
                        "validation/rows": res.n}
            (res,) = self.evaluate("validate", model=model, limit=limit, benchmarks=[0], save=False)
            return {f"{res.name}/accuracy": res.accuracy, f"{res.name}/mean_reward": res.mean_reward,
                    f"{res.name}/rows": res.n}

        return fn

    def model_card(self, results: list[dict[str, Any]] | None = None) -> str:
        """The text of ``model/README.md`` (:func:`dare.report.modelcard.model_card`): this run's spec, objective,
        sampler and family, with ``results`` (the evaluation after training, as dicts) in its ``model-index``."""
        from dare.report.modelcard import model_card

        family = getattr(self.family, "name", None)
        return str(model_card(self.spec, results=results, sampler=self.sampler, objective=self.objective,
                              family=family))

    # ------------------------------------------------------------------ descriptions (dare.run.info)
    def facts(self) -> runinfo.RunFacts:
        """What reports and the Ctrl-C message say about this run, as plain data (:class:`dare.run.info.RunFacts`)."""
        spec = self.spec
        ds = spec.data.train if spec.data is not None else None
        t = spec.train
        component = lambda c: {"name": c.name,  # noqa: E731
                               "params": c.params.model_dump(mode="json")} if c is not None else None
        return runinfo.RunFacts(
            dir=self.dir, objective=component(self.objective), sampler=component(self.sampler),
            max_steps=t.max_steps if t is not None else None, save_steps=t.save_steps if t is not None else None,
            training_data={"path": ds.path, "offset": ds.offset, "limit": ds.limit} if ds is not None else None,
            in_training_eval=({"every_steps": t.eval_steps, "rows": t.eval_limit}
                              if t is not None and t.eval_steps and spec.eval is not None else None),
            validation=(_row_set(self.resolved.validation)
                        if spec.eval is not None and self.resolved.validation else None),
            benchmarks=tuple(_row_set(b) for b in self.resolved.benchmarks) if spec.eval is not None else (),
        )

    def eval_set_labels(self, stages: dict[str, list[BenchmarkResult]]) -> dict[str, str]:
        """Which rows each evaluation scored, in words (:func:`dare.run.info.eval_set_labels`)."""
        return runinfo.eval_set_labels(self.facts(), stages)

    def interrupted_message(self, command: str) -> str:
        """What an interrupted command saved and how to resume (:func:`dare.run.info.interrupted_message`)."""
        before = (self.spec.train is not None and self.stage != "eval"
                  and bool(self.cached_eval("before", self.run_hash)))
        return runinfo.interrupted_message(self.facts(), self.stage, before, command)

    def evaluator_descriptions(self) -> dict[str, str]:
        """Benchmark name -> what its accuracy and mean reward mean (the report's column notes)."""
        return {b.evaluator.name: b.evaluator.description() for b in self.resolved.benchmarks}

    # ------------------------------------------------------------------ whole run
    def execute(self, train: bool = True, evaluate: bool = True) -> dict[str, Any]:
        """``dare run``: [eval before] -> train -> eval after -> report + plot (:func:`dare.run.stages.execute`,
        which enters each stage once). Returns the report data:
        ``{"stages": {stage: [result dicts]}, "train": metrics}``.

        Without training (``dare eval``) the stage is ``eval``; when the run directory already holds
        this spec's trained ``model/`` (an earlier ``dare run``/``dare train``), that model is evaluated
        (never a cached result), not the spec's initial model. The report then keeps the earlier
        ``before``/``after`` rows (from ``eval/before.json``, ``eval/after.json``) and train metrics,
        with the ``eval`` row added, and names the evaluated model (``eval_model``). ``dare eval`` of a
        finished run may change evaluation settings only (:data:`dare.run.rundir.EVAL_ONLY_KEYS`); the report
        then names them (``eval_overrides``).

        One CPU thread count applies to the whole command (:mod:`dare.scaling.threads`), so every stage's tokens/s is
        measured with the same threads.
        """
        from dare.run.stages import execute

        return execute(self, train=train, evaluate=evaluate)


def _row_set(bench: ResolvedBenchmark) -> runinfo.RowSet:
    """The rows ``bench`` scores, as plain data (:class:`dare.run.info.RowSet`)."""
    name = f"validation ({bench.evaluator.name})" if bench.loc == "eval.validation" else bench.evaluator.name
    return runinfo.RowSet(name, bench.spec.path or bench.evaluator.default_path or "?", bench.spec.offset)
