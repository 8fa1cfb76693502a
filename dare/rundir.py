"""Rules for ``output.dir``: when a run may use, replace or must refuse a directory.

Both spec validation (:func:`dare.spec.load_spec`) and :meth:`dare.run.Run.prepare` apply
:func:`plan_output_dir`, so what validation accepts is exactly what a run does:

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
  config); otherwise it is refused, naming the spec keys that differ (:func:`spec_differences`,
  against the spec stored in ``run.json``);
* an evaluation-only command (``dare eval``) may differ from the stored spec in evaluation-only keys
  (:data:`EVAL_ONLY_KEYS`: the benchmarks, their limits, ``eval.batch_size``, ``eval.seed``): the
  directory is used as it is (``"eval-only"``; ``run.json`` keeps the run's spec) and the report names
  the keys that differ.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["plan_output_dir", "clear_run_dir", "first_missing", "discard_new_run_dir", "is_unfinished_run", "writable_problem", "spec_differences",
           "format_differences", "stored_spec", "run_record", "is_run_record", "RUN_ENTRIES", "EVAL_ONLY_KEYS"]

#: top-level entries DARE writes in a run directory (temporary siblings start with ``.<entry>.``)
RUN_ENTRIES = frozenset({"run.json", "init-model", "checkpoints", "model", "metrics.jsonl", "tensorboard", "eval",
                         "samples", "report.json", "report.md", "plot.png", "run.log"})


#: spec keys (dotted prefixes) that change what an evaluation measures but nothing a run trained: ``dare eval``
#: of a finished run may override them (``eval.validation`` is not among them: it selected ``train.keep_best``'s weights)
EVAL_ONLY_KEYS = ("eval.benchmarks", "eval.batch_size", "eval.seed", "eval.before_train", "eval.num_threads")

#: keys the spec hash ignores (:func:`dare.spec.spec_hash`), so never a difference between runs
_IGNORED = ("output.overwrite", "train.resume", "train.report_to", "launch")


def spec_differences(old: Any, new: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    """Dotted keys (list items as ``key[i]``) whose values differ between two spec dumps, with both values.

    A key missing on one side has the value ``"<absent>"`` there. ``output.overwrite``, ``train.resume``,
    ``train.report_to`` and ``launch`` (which the spec hash ignores) are never reported.
    """
    if prefix in _IGNORED:
        return []
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for k in list(old) + [k for k in new if k not in old]:
            out += spec_differences(old.get(k, "<absent>"), new.get(k, "<absent>"), f"{prefix}.{k}" if prefix else str(k))
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [d for i, (a, b) in enumerate(zip(old, new)) for d in spec_differences(a, b, f"{prefix}[{i}]")]
    if old == "<absent>" and new is None:  # an optional key the older spec did not have, left unset
        return []
    return [] if old == new else [(prefix, old, new)]


def format_differences(diffs: list[tuple[str, Any, Any]], most: int = 6, width: int = 40) -> str:
    """``"train.max_steps (750 -> 100), sampler.params.steps (17 -> 8)"``, at most ``most`` keys, then a count.

    A value longer than ``width`` characters is cut to a window of that width; both sides of a key are cut at the
    same place, just before their first differing character, so two long values show where they differ
    (``"...{{ extra_info.puzzle }} Solve it..." -> "...{{ extra_info.puzzle }} Answer..."``), never the same text."""
    shown = [f"{k} ({' -> '.join(_differing_parts(a, b, width))})" for k, a, b in diffs[:most]]
    more = len(diffs) - most
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def _differing_parts(a: Any, b: Any, width: int) -> tuple[str, str]:
    """The texts of ``a`` and ``b`` cut to ``width`` characters around where they first differ."""
    ta, tb = (v if isinstance(v, str) else json.dumps(v) for v in (a, b))
    if len(ta) <= width and len(tb) <= width:
        return ta, tb
    start = max(0, len(os.path.commonprefix([ta, tb])) - width // 3)

    def cut(t: str) -> str:
        return ("..." if start else "") + t[start:start + width] + ("..." if start + width < len(t) else "")

    return cut(ta), cut(tb)


def run_record(spec_hash: str, source: str | None, spec: dict) -> dict:
    """The mapping ``dare run`` stores as ``run.json``: the spec hash, the spec file it came from and the spec
    dump (``RunSpec.model_dump(mode="json")``, overrides applied)."""
    return {"spec_hash": spec_hash, "source": source, "spec": spec}


def is_run_record(raw: Any) -> bool:
    """Whether ``raw`` (a parsed JSON/YAML document) is a :func:`run_record`, i.e. a ``run.json``."""
    return isinstance(raw, dict) and set(raw) == {"spec_hash", "source", "spec"} and isinstance(raw["spec"], dict)


def stored_spec(out: str | Path) -> dict | None:
    """The spec dump stored in ``out/run.json`` (None when absent or unreadable)."""
    try:
        spec = json.loads((Path(out) / "run.json").read_text()).get("spec")
    except (OSError, json.JSONDecodeError, AttributeError):
        return None
    return spec if isinstance(spec, dict) else None


def _is_eval_only_key(key: str) -> bool:
    return any(key == p or key.startswith((p + ".", p + "[")) for p in EVAL_ONLY_KEYS)


def _eval_only(diffs: list[tuple[str, Any, Any]]) -> bool:
    """The specs differ, and only in :data:`EVAL_ONLY_KEYS`."""
    return bool(diffs) and all(_is_eval_only_key(k) for k, _, _ in diffs)


def _is_run_entry(name: str) -> bool:
    base = name[1:] if name.startswith(".") else name
    return any(base == e or base.startswith(e + ".") for e in RUN_ENTRIES)


def _has_durable_results(out: Path) -> bool:
    return (any((out / "checkpoints").glob("checkpoint-*")) or (out / "model").exists()
            or (out / "report.json").exists() or (out / "report.md").exists())


def _has_training_output(out: Path) -> bool:
    return any((out / "checkpoints").glob("checkpoint-*")) or (out / "metrics.jsonl").exists() or (out / "model").exists()


def is_unfinished_run(out: Path) -> bool:
    """``out`` is a run directory whose run produced nothing durable and that holds only DARE's files."""
    return (out / "run.json").is_file() and not _has_durable_results(out) and all(_is_run_entry(p.name) for p in out.iterdir())


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


def _check_trainer_files(ckpt: Path) -> None:
    """``trainer_state.json`` parses and its fields have the JSON types a resume reads
    (:data:`_TRAINER_STATE_TYPES`: ``"global_step": "two"`` is refused here, not by a ``TypeError`` mid-resume),
    and the ``torch.save`` files (optimizer, scheduler, RNG states) are
    complete zip archives (their central directory is read; nothing is unpickled).

    :raises CheckpointError: naming the damaged file.
    """
    import zipfile

    from dare.errors import CheckpointError

    state = ckpt / "trainer_state.json"
    try:
        values = json.loads(state.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{state} is not valid JSON ({exc}): the save was interrupted") from None
    if (wrong := _trainer_state_problem(values)) is None and ckpt.name.startswith("checkpoint-"):
        step = ckpt.name[len("checkpoint-"):]
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


def _resume_problem(out: Path) -> tuple[str, str] | None:
    """A damaged checkpoint that a resuming run would load (safetensors headers only, no tensor data)."""
    if not (out / "checkpoints").is_dir():
        return None
    from dare.errors import CheckpointError
    from dare.modeling.checkpoint import ADAPTER_CONFIG, adapter_weights, checkpoint_shapes
    from dare.trainers.base import last_complete_checkpoint

    ckpt = last_complete_checkpoint(out / "checkpoints")
    if ckpt is None:
        return None
    try:
        adapter_weights(ckpt) if (Path(ckpt) / ADAPTER_CONFIG).is_file() else checkpoint_shapes(ckpt)
        _check_trainer_files(Path(ckpt))
    except CheckpointError as exc:
        return ("train.resume", f"the run resumes from {ckpt}, which is damaged: {exc}. Move {ckpt} out of the run "
                                "directory to resume from the checkpoint before it, or set train.resume: false and "
                                "output.overwrite: true to start fresh")
    return None


def plan_output_dir(out: str | Path, spec_hash: str, overwrite: bool, resume: bool = True, train: bool = True,
                    spec: dict | None = None) -> tuple[str, list[tuple[str, str]]]:
    """What a run with ``spec_hash`` does with ``out``, and the problems that refuse it.

    :param resume: ``train.resume``; only consulted when ``train`` (the run will train, resuming from the
        checkpoint whose weights are then checked).
    :param spec: the new spec's dump (``RunSpec.model_dump(mode="json")``): a refusal then names the keys that
        differ from the stored spec, and an evaluation-only command (not ``train``) that differs only in
        :data:`EVAL_ONLY_KEYS` uses the directory.
    :returns: ``(action, problems)``; action is ``"use"`` (create/keep the directory), ``"replace"``
        (delete the contents of a run directory with ``overwrite``), ``"replace-unfinished"`` (delete
        the files of an earlier run that produced nothing durable), ``"eval-only"`` (evaluate into the
        finished run's directory, keeping its ``run.json``) or ``"refuse"`` (see problems).
    """
    out = Path(out)
    shown = str(out)
    if (why := writable_problem(out)) is not None:  # first: it also covers directories this user may not enter
        return "refuse", [("output.dir", why)]
    if out.exists() and not out.is_dir():
        return "refuse", [("output.dir", f"{shown!r} exists and is not a directory; choose another output.dir")]
    if not out.is_dir() or not any(out.iterdir()):
        return "use", []
    marker = out / "run.json"
    if not marker.is_file():
        return "refuse", [("output.dir", f"{shown!r} is a non-empty directory that is not a DARE run directory (it has no "
                                         "run.json), so DARE will not write into or replace it, even with output.overwrite: "
                                         "true; choose an empty or new output.dir")]
    try:
        old = json.loads(marker.read_text()).get("spec_hash")
    except (OSError, json.JSONDecodeError, AttributeError):
        old = None
    if old != spec_hash:
        old_spec = stored_spec(out) if spec is not None else None
        diffs = spec_differences(old_spec, spec) if old_spec is not None else []
        if not train and _eval_only(diffs) and _has_durable_results(out):
            return "eval-only", []
        if overwrite and not train and _has_durable_results(out):
            return "refuse", [("output.overwrite", f"{shown!r} holds another run's checkpoints, model or report, which an "
                                                  "evaluation-only command would delete; evaluate into another output.dir "
                                                  "(set model.path to this run's model/ to score it)")]
        if overwrite:
            return "replace", []
        if is_unfinished_run(out):
            return "replace-unfinished", []
        if diffs:
            what = f"its spec differs in {format_differences(diffs)}"
            hint = ("; to only evaluate with other eval settings, use `dare eval`" if train and _eval_only(diffs) else "")
        else:
            what, hint = f"spec hash {old} != {spec_hash}", ""
        return "refuse", [("output.dir", f"{shown!r} already holds a different run ({what}); choose another output.dir "
                                         f"or set output.overwrite: true (which deletes it){hint}")]
    if train and not resume and _has_training_output(out):
        if overwrite:
            return "replace", []
        return "refuse", [("train.resume", f"{shown!r} already holds checkpoints or metrics of this run, which a new run with "
                                           "train.resume: false would mix with its own; set train.resume: true to continue "
                                           "it, or output.overwrite: true to delete them and start fresh")]
    if train and resume and (problem := _resume_problem(out)) is not None:
        return "refuse", [problem]
    return "use", []


def clear_run_dir(out: Path) -> None:
    """Delete the contents of the run directory ``out`` (never ``out`` itself, never through a symlink).

    ``run.json`` goes last, so an interrupted clear still leaves a directory recognised as a run.
    """
    if not (out / "run.json").is_file():  # pragma: no cover - callers checked; never delete a non-run directory
        raise ValueError(f"{out} is not a DARE run directory")
    for p in sorted(out.iterdir(), key=lambda p: p.name == "run.json"):
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()


def first_missing(out: Path) -> Path | None:
    """The outermost directory of ``out`` (itself or a parent) that does not exist yet, or None."""
    top = None
    for p in [out.absolute(), *out.absolute().parents]:
        if os.path.lexists(p):
            break
        top = p
    return top


#: what a run writes before it trains or measures anything (a refused run's directory holds only these)
_BEFORE_ANY_RESULT = {"run.json", "init-model", "run.log"}


def discard_new_run_dir(out: Path, created: Path | None) -> bool:
    """Remove the run directory ``out`` that this command created (``created``: :func:`first_missing` before)
    when it holds nothing but :data:`_BEFORE_ANY_RESULT`, with the parents it created; so a run refused
    after it created ``output.dir`` (weights, data) leaves no files. Returns whether it removed it."""
    if created is None or not out.is_dir() or not {p.name for p in out.iterdir()} <= _BEFORE_ANY_RESULT:
        return False
    shutil.rmtree(out, ignore_errors=True)
    for p in out.absolute().parents:  # the parents this command created, while empty
        if not p.is_relative_to(created) or not p.is_dir() or any(p.iterdir()):
            break
        p.rmdir()
    return True
