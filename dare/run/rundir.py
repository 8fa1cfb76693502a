"""The run directory: every path a run writes (:class:`RunDir`) and when a run may use, replace or must refuse one.

Layout of ``output.dir`` (the names are the class attributes of :class:`RunDir`; no other module spells them)::

    run.json          the run record: resolved spec + hash (a re-run of the same spec resumes; another spec is
                      refused unless output.overwrite, or the earlier run left nothing durable)
    init-model/       the fresh model, when model.new (official format)
    checkpoints/      trainer checkpoints: checkpoint-N/ (official-format model + optimizer/scheduler/RNG state,
                      trainer_state.json written last, dare_batch.json), best/ (best.json), .staging/; read and
                      written by :mod:`dare.trainers.checkpoints` and :mod:`dare.trainers.saving`
    model/            the trained model (official format; LoRA runs: merged, with the peft adapter in model/adapter/)
    metrics.jsonl     every logged metric; tensorboard/ the same for TensorBoard
    eval/<stage>.json per-stage benchmark results; samples/ per-row completions and rewards
    report.json, report.md, plot.png
    run.log           the console output of every command of the run (appended; main process only)
    ../.<name>.lock   the lock of the command working in it (next to the directory, :mod:`dare.run.lock`)

Both spec validation (:func:`dare.runspec.load_spec`) and a run's preparation apply :meth:`RunDir.plan`
(:func:`plan_output_dir`), so what validation accepts is exactly what a run does:

* a missing or empty directory is used;
* a non-empty directory without ``run.json`` is not a DARE run directory and is refused, also with
  ``output.overwrite: true`` (nothing that DARE did not write is ever deleted);
* a run directory of the same spec (same spec hash) is used: the run resumes. With ``train.resume:
  false`` and training output of this run already there (``checkpoints/checkpoint-*``,
  ``metrics.jsonl`` or ``model/``), training is refused, or, with ``output.overwrite: true``, the
  directory's contents are deleted first (a fresh start);
* a run directory of a different spec is replaced (its contents deleted) when ``output.overwrite`` is
  true, or when the earlier run left nothing durable (no ``checkpoints/checkpoint-*``, no ``model/``,
  no ``report.json``/``report.md``) and only files DARE writes (it failed early, e.g. on a bad model
  config); otherwise it is refused, naming the spec keys that differ (:func:`dare.run.differences.spec_differences`,
  against the spec stored in ``run.json``);
* an evaluation-only command (``dare eval``) may differ from the stored spec in evaluation-only keys
  (:data:`EVAL_ONLY_KEYS`: the benchmarks, their limits, ``eval.batch_size``, ``eval.seed``): the
  directory is used as it is (``"eval-only"``; ``run.json`` keeps the run's spec) and the report names
  the keys that differ.

This module imports no torch (spec validation plans the directory).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dare.io import atomic_write_json
from dare.run.differences import EVAL_ONLY_KEYS, eval_only, format_differences, spec_differences

__all__ = ["RunDir", "plan_output_dir", "writable_problem", "run_record", "is_run_record", "stored_spec",
           "RUN_ENTRIES", "EVAL_ONLY_KEYS", "format_differences", "spec_differences"]

#: a Hugging Face model directory's config: a ``model/`` or ``init-model/`` holding it is a complete model
_MODEL_CONFIG = "config.json"


@dataclass(frozen=True)
class RunDir:
    """The run directory at ``path`` (``output.dir``): the path of every entry a run writes, and its rules.

    ``RunDir(path)`` touches nothing on disk; the properties are paths, the methods read or change the directory
    (:meth:`plan`, :meth:`clear`, :meth:`create`, :meth:`discard_new`), hold its lock (:meth:`hold`) and open its
    ``run.log`` (:meth:`open_log`). Equal when their paths are equal.

    :param path: the directory (a ``str`` or ``os.PathLike``, kept as a :class:`pathlib.Path`).
    """

    path: Path

    RECORD = "run.json"
    INIT_MODEL = "init-model"
    CHECKPOINTS = "checkpoints"
    MODEL = "model"
    EVAL = "eval"
    SAMPLES = "samples"
    METRICS = "metrics.jsonl"
    TENSORBOARD = "tensorboard"
    REPORT_JSON = "report.json"
    REPORT_MD = "report.md"
    PLOT = "plot.png"
    LOG = "run.log"
    #: inside ``checkpoints/`` (:mod:`dare.trainers.checkpoints`): ``checkpoint-N/`` (transformers' name) holding
    #: ``trainer_state.json`` (written last) and ``dare_batch.json``; ``best/`` with ``best.json``; ``.staging/``
    CHECKPOINT_PREFIX = "checkpoint-"
    TRAINER_STATE = "trainer_state.json"
    BATCH_RECORD = "dare_batch.json"
    BEST = "best"
    BEST_RECORD = "best.json"
    STAGING = ".staging"

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    def __fspath__(self) -> str:
        return os.fspath(self.path)

    def __str__(self) -> str:
        return str(self.path)

    # ------------------------------------------------------------------ the layout
    @property
    def record(self) -> Path:
        """``run.json``: the run record (:func:`run_record`)."""
        return self.path / self.RECORD

    @property
    def init_model(self) -> Path:
        """``init-model/``: the fresh model of ``model.new``."""
        return self.path / self.INIT_MODEL

    @property
    def checkpoints(self) -> Path:
        """``checkpoints/``: the trainer's output directory (:mod:`dare.trainers.checkpoints`)."""
        return self.path / self.CHECKPOINTS

    @property
    def model(self) -> Path:
        """``model/``: the trained model."""
        return self.path / self.MODEL

    @property
    def eval_dir(self) -> Path:
        """``eval/``: one results file per evaluation stage (:meth:`eval_file`)."""
        return self.path / self.EVAL

    def eval_file(self, stage: str) -> Path:
        """``eval/<stage>.json``: the results of the evaluation ``stage`` (``before``, ``after``, ``eval``)."""
        return self.eval_dir / f"{stage}.json"

    @property
    def samples(self) -> Path:
        """``samples/``: per-row completions and rewards, one file per stage and benchmark (:meth:`samples_file`)."""
        return self.path / self.SAMPLES

    def samples_file(self, stage: str, benchmark: str) -> Path:
        """``samples/<stage>-<benchmark>.json``."""
        return self.samples / f"{stage}-{benchmark}.json"

    @property
    def metrics(self) -> Path:
        """``metrics.jsonl``: every logged metric, one JSON object a line."""
        return self.path / self.METRICS

    @property
    def tensorboard(self) -> Path:
        """``tensorboard/``: the logged metrics as TensorBoard events."""
        return self.path / self.TENSORBOARD

    @property
    def report_json(self) -> Path:
        """``report.json``: the report's data."""
        return self.path / self.REPORT_JSON

    @property
    def report_md(self) -> Path:
        """``report.md``: the report to read."""
        return self.path / self.REPORT_MD

    @property
    def plot(self) -> Path:
        """``plot.png``: the training curve and the evaluations."""
        return self.path / self.PLOT

    @property
    def log(self) -> Path:
        """``run.log``: the console output of the run's commands."""
        return self.path / self.LOG

    @property
    def lock(self) -> Path:
        """``<parent>/.<name>.lock``: the lock file of the command working in the directory (next to it, not in it:
        it exists before the directory does and no rule of the directory sees it; :mod:`dare.run.lock`)."""
        path = Path(os.path.abspath(self.path))
        return path.parent / f".{path.name}.lock"

    # ------------------------------------------------------------------ what it holds
    def is_run(self) -> bool:
        """It holds a ``run.json`` (a DARE run directory)."""
        return self.record.is_file()

    def read_record(self) -> dict | None:
        """The parsed ``run.json`` (None when absent, unreadable or not a JSON object)."""
        try:
            raw = json.loads(self.record.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return None
        return raw if isinstance(raw, dict) else None

    def stored_hash(self) -> str | None:
        """The spec hash in ``run.json`` (None when absent or unreadable)."""
        record = self.read_record()
        return record.get("spec_hash") if record is not None else None

    def stored_spec(self) -> dict | None:
        """The spec dump stored in ``run.json`` (None when absent or unreadable)."""
        spec = (self.read_record() or {}).get("spec")
        return spec if isinstance(spec, dict) else None

    def has_model(self) -> bool:
        """``model/`` holds a trained model (its ``config.json``)."""
        return (self.model / _MODEL_CONFIG).is_file()

    def has_init_model(self) -> bool:
        """``init-model/`` holds the fresh model (its ``config.json``)."""
        return (self.init_model / _MODEL_CONFIG).is_file()

    def checkpoint_files(self) -> list[Path]:
        """The ``checkpoints/checkpoint-*`` entries (complete or not), unsorted."""
        return list(self.checkpoints.glob(f"{self.CHECKPOINT_PREFIX}*"))

    def has_durable_results(self) -> bool:
        """A checkpoint, ``model/`` or a report: what an earlier run left that is worth keeping."""
        return (bool(self.checkpoint_files()) or self.model.exists() or self.report_json.exists()
                or self.report_md.exists())

    def has_training_output(self) -> bool:
        """A checkpoint, ``metrics.jsonl`` or ``model/``: what a run with ``train.resume: false`` would mix with."""
        return bool(self.checkpoint_files()) or self.metrics.exists() or self.model.exists()

    def is_unfinished(self) -> bool:
        """A run directory whose run produced nothing durable and that holds only DARE's files."""
        return self.is_run() and not self.has_durable_results() and all(_is_run_entry(p.name)
                                                                        for p in self.path.iterdir())

    # ------------------------------------------------------------------ the rules
    def hold(self):
        """A context manager holding the directory's lock (:attr:`lock`) for a whole command, so a second command on
        it stops at once naming the first (:func:`dare.run.lock.hold_run_dir`).

        :raises dare.run.lock.RunDirLocked: (on entering) another command holds it.
        """
        from dare.run.lock import hold_run_dir

        return hold_run_dir(self)

    def open_log(self) -> bool:
        """Start copying this process's console into :attr:`log` (appended; the main process only:
        :func:`dare.run.log.open_log`). Returns whether it opened (False: a log is open already)."""
        from dare.run.log import open_log

        return open_log(self.log)

    def plan(self, spec_hash: str, overwrite: bool, resume: bool = True, train: bool = True,
             spec: dict | None = None, damaged: Callable[[Path], str | None] | None = None
             ) -> tuple[str, list[tuple[str, str]]]:
        """What a run with ``spec_hash`` does with this directory, and the problems that refuse it.

        :param overwrite: ``output.overwrite``.
        :param resume: ``train.resume``; only consulted when ``train`` (the run will train, resuming from the
            checkpoint whose weights are then checked).
        :param spec: the new spec's dump (``RunSpec.model_dump(mode="json")``): a refusal then names the keys that
            differ from the stored spec, and an evaluation-only command (not ``train``) that differs only in
            :data:`EVAL_ONLY_KEYS` uses the directory.
        :param damaged: what is wrong with the checkpoint a resuming run would load from ``checkpoints/``
            (:func:`dare.trainers.checkpoints.resume_problem`: headers only, no tensor data), or None; a problem refuses
            the run under ``train.resume``. Given by the caller, so reading a run directory imports no model code.
        :returns: ``(action, problems)``; action is ``"use"`` (create/keep the directory), ``"replace"``
            (delete the contents of a run directory with ``overwrite``), ``"replace-unfinished"`` (delete
            the files of an earlier run that produced nothing durable), ``"eval-only"`` (evaluate into the
            finished run's directory, keeping its ``run.json``) or ``"refuse"`` (see problems: ``(YAML path,
            message)`` pairs naming ``output.dir``, ``output.overwrite`` or ``train.resume`` and the fix).
        """
        out = self.path
        shown = str(out)
        if (why := writable_problem(out)) is not None:  # first: it also covers directories this user may not enter
            return "refuse", [("output.dir", why)]
        if out.exists() and not out.is_dir():
            return "refuse", [("output.dir", f"{shown!r} exists and is not a directory; choose another output.dir")]
        if not out.is_dir() or not any(out.iterdir()):
            return "use", []
        if not self.is_run():
            return "refuse", [("output.dir", f"{shown!r} is a non-empty directory that is not a DARE run directory (it "
                                             f"has no {self.RECORD}), so DARE will not write into or replace it, even "
                                             "with output.overwrite: true; choose an empty or new output.dir")]
        old = self.stored_hash()
        if old != spec_hash:
            old_spec = self.stored_spec() if spec is not None else None
            diffs = spec_differences(old_spec, spec) if old_spec is not None else []
            if not train and eval_only(diffs) and self.has_durable_results():
                return "eval-only", []
            if overwrite and not train and self.has_durable_results():
                return "refuse", [("output.overwrite", f"{shown!r} holds another run's checkpoints, model or report, "
                                                      "which an evaluation-only command would delete; evaluate into "
                                                      "another output.dir (set model.path to this run's model/ to "
                                                      "score it)")]
            if overwrite:
                return "replace", []
            if self.is_unfinished():
                return "replace-unfinished", []
            if diffs:
                what = f"its spec differs in {format_differences(diffs)}"
                hint = ("; to only evaluate with other eval settings, use `dare eval`"
                        if train and eval_only(diffs) else "")
            elif old is None:  # run.json is damaged (e.g. truncated by a full disk) or holds no spec hash
                what, hint = (f"its {self.RECORD} cannot be read or names no spec, so which run it holds is unknown",
                              f"; or restore {self.record}")
            else:
                what, hint = f"spec hash {old} != {spec_hash}", ""
            return "refuse", [("output.dir", f"{shown!r} already holds a different run ({what}); choose another "
                                             f"output.dir or set output.overwrite: true (which deletes it){hint}")]
        if train and not resume and self.has_training_output():
            if overwrite:
                return "replace", []
            return "refuse", [("train.resume", f"{shown!r} already holds checkpoints or metrics of this run, which a "
                                               "new run with train.resume: false would mix with its own; set "
                                               "train.resume: true to continue it, or output.overwrite: true to delete "
                                               "them and start fresh")]
        if train and resume and damaged is not None and (problem := damaged(self.checkpoints)) is not None:
            return "refuse", [("train.resume", problem)]
        return "use", []

    def clear(self) -> None:
        """Delete the contents of the run directory (never the directory itself, never through a symlink).

        ``run.json`` goes last, so an interrupted clear still leaves a directory recognised as a run.

        :raises ValueError: it is not a run directory (callers planned it first: never reached).
        """
        if not self.is_run():  # pragma: no cover - callers checked; never delete a non-run directory
            raise ValueError(f"{self.path} is not a DARE run directory")
        for p in sorted(self.path.iterdir(), key=lambda p: p.name == self.RECORD):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()

    def create(self, spec_hash: str, source: str | None, spec: dict) -> None:
        """Create the directory (and its parents) and write ``run.json`` (:func:`run_record`, atomically).

        :raises OSError: the directory cannot be created (the caller names ``output.dir``).
        """
        self.path.mkdir(parents=True, exist_ok=True)
        atomic_write_json(self.record, run_record(spec_hash, source, spec))

    def first_missing(self) -> Path | None:
        """The outermost directory of the path (itself or a parent) that does not exist yet, or None."""
        top = None
        for p in [self.path.absolute(), *self.path.absolute().parents]:
            if os.path.lexists(p):
                break
            top = p
        return top

    def discard_new(self, created: Path | None) -> bool:
        """Remove the directory that this command created (``created``: :meth:`first_missing` before) when it holds
        nothing but :data:`_BEFORE_ANY_RESULT`, with the parents it created; so a run refused after it created
        ``output.dir`` (weights, data) leaves no files. Returns whether it removed it."""
        out = self.path
        if created is None or not out.is_dir() or not {p.name for p in out.iterdir()} <= _BEFORE_ANY_RESULT:
            return False
        shutil.rmtree(out, ignore_errors=True)
        for p in out.absolute().parents:  # the parents this command created, while empty
            if not p.is_relative_to(created) or not p.is_dir() or any(p.iterdir()):
                break
            p.rmdir()
        return True


#: top-level entries DARE writes in a run directory (temporary siblings start with ``.<entry>.``)
RUN_ENTRIES = frozenset({RunDir.RECORD, RunDir.INIT_MODEL, RunDir.CHECKPOINTS, RunDir.MODEL, RunDir.METRICS,
                         RunDir.TENSORBOARD, RunDir.EVAL, RunDir.SAMPLES, RunDir.REPORT_JSON, RunDir.REPORT_MD,
                         RunDir.PLOT, RunDir.LOG})

#: what a run writes before it trains or measures anything (a refused run's directory holds only these)
_BEFORE_ANY_RESULT = {RunDir.RECORD, RunDir.INIT_MODEL, RunDir.LOG}


def _is_run_entry(name: str) -> bool:
    base = name[1:] if name.startswith(".") else name
    return any(base == e or base.startswith(e + ".") for e in RUN_ENTRIES)


def run_record(spec_hash: str, source: str | None, spec: dict) -> dict:
    """The mapping ``dare run`` stores as ``run.json``: the spec hash, the spec file it came from and the spec
    dump (``RunSpec.model_dump(mode="json")``, overrides applied)."""
    return {"spec_hash": spec_hash, "source": source, "spec": spec}


def is_run_record(raw: Any) -> bool:
    """Whether ``raw`` (a parsed JSON/YAML document) is a :func:`run_record`, i.e. a ``run.json``."""
    return isinstance(raw, dict) and set(raw) == {"spec_hash", "source", "spec"} and isinstance(raw["spec"], dict)


def stored_spec(out: str | Path) -> dict | None:
    """The spec dump stored in ``out/run.json`` (None when absent or unreadable): :meth:`RunDir.stored_spec`."""
    return RunDir(out).stored_spec()


def plan_output_dir(out: str | Path, spec_hash: str, overwrite: bool, resume: bool = True, train: bool = True,
                    spec: dict | None = None, damaged: Callable[[Path], str | None] | None = None
                    ) -> tuple[str, list[tuple[str, str]]]:
    """What a run with ``spec_hash`` does with ``out``, and the problems that refuse it: :meth:`RunDir.plan`."""
    return RunDir(out).plan(spec_hash, overwrite, resume=resume, train=train, spec=spec, damaged=damaged)


def writable_problem(out: str | Path) -> str | None:
    """Why this process cannot create or write ``out`` (checked on ``out``, or on its nearest existing parent
    when it does not exist yet, with ``os.access``: permissions, directories it may not enter, read-only
    mounts), or None."""
    out = Path(out)
    probe = out.absolute()
    while not os.path.exists(probe) and probe != probe.parent:  # os.path.exists: False when it may not look
        probe = probe.parent
    if not probe.is_dir():
        if probe == out.absolute():
            return None  # output.dir itself is a file: plan_output_dir says so
        return f"{str(out)!r} cannot be created: {str(probe)!r} is a file, not a directory; choose another output.dir"
    effective = os.access in os.supports_effective_ids  # the ids a write would use (setuid, sudo -u)
    if not os.access(probe, os.W_OK | os.X_OK, effective_ids=effective):
        where = "it" if probe == out.absolute() else f"its parent {str(probe)!r}"
        return (f"{str(out)!r} is not writable: {where} is read-only for this user (permissions or a read-only mount); "
                "choose an output.dir you can write, e.g. under your home or working directory")
    try:  # os.access passes where the kernel still refuses (root; /proc, /sys): create and remove a directory
        os.rmdir(tempfile.mkdtemp(prefix=".dare-write-probe-", dir=probe))
    except OSError as exc:
        return (f"{str(out)!r} cannot be created: {str(probe)!r} does not accept new directories ({exc.strerror}; e.g. "
                "/proc and /sys are kernel filesystems); choose an output.dir you can write, e.g. under your home or "
                "working directory")
    return None
