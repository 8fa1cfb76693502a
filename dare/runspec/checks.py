"""Semantic checks of a structurally valid spec (the second validation pass, before any weights load).

Each check appends ``(yaml_path, message)`` problems: the model (``model.path`` is a checkpoint, run or
adapter directory whose ``config.json`` an installed family loads, whose safetensors headers hold exactly
the tensors that config implies (no tensor data read; :mod:`dare.modeling.integrity`) and whose tokenizer
has the family's mask token and fits the embedding; a path that looks local and does not exist is
reported, never looked up on the hub; ``model.new`` names a family, preset and valid config overrides;
``model.lora`` targets exist), datasets and benchmark files (exist, have rows and the columns the
templates use, offsets inside the file), held-out validation rows (disjoint from training and test
rows), ``train.keep_best`` and ``output.dir`` (writable, and the rules of :mod:`dare.run.rundir`).
:func:`dare.runspec.resolve.resolve_spec` runs them.
"""

from __future__ import annotations

import json
from pathlib import Path

from dare.data import dataset_columns, template_fields
from dare.data.columns import column_type_problems
from dare.data.rows import SCAN_LINES, dataset_rows, first_row, jsonl_surrogate_problem, sample_rows
from dare.data.templates import render
from dare.errors import DareError, SpecError
from dare.eval.paths import benchmark_path
from dare.io import looks_local, resolve_path
from dare.modeling.locate import ADAPTER_CONFIG, adapter_base, one_line, run_first_hint, trained_model_dir
from dare.plugins.manager import register_auto_classes
from dare.run.rundir import plan_output_dir
from dare.runspec.models import BenchmarkSpec, DatasetSpec, RunSpec, spec_hash
from dare.trainers.checkpoints import resume_problem

# torch and transformers (dare.modeling.checkpoint, dare.modeling.lora) are imported only by the checks that build
# a config or a meta-device model, so validating a spec that needs neither does not import them.

__all__ = [
    "check_model",
    "check_lora",
    "check_gradient_checkpointing",
    "check_precision",
    "check_packing",
    "check_report_to",
    "check_dataset",
    "check_benchmark_data",
    "check_validation_rows",
    "check_keep_best",
    "check_output",
]

Problems = list[tuple[str, str]]


def check_model(ctx, problems: Problems) -> None:
    """``model.path`` / ``model.new``; sets ``ctx.family`` and ``ctx.model_config`` when they resolve.

    :param ctx: the :class:`~dare.runspec.resolve.ResolvedSpec` being built.
    """
    spec = ctx.spec
    reg = ctx.registry
    if spec.model.new is not None:
        new = spec.model.new
        entry = reg.find("model_family", new.family)
        if entry is None:
            problems.append(("model.new.family", reg.unknown_message("model_family", new.family)))
            return
        ctx.family = entry.create()
        presets = ctx.family.presets()
        if new.preset not in presets:
            problems.append(
                ("model.new.preset", f"unknown preset {new.preset!r} for {new.family}; available: {', '.join(presets)}")
            )
        else:
            cfg = dict(presets[new.preset])
            cfg.update(new.config)
            ctx.model_config = cfg
        if new.tokenizer != "byte" and not (resolve_path(new.tokenizer) / "tokenizer_config.json").is_file():
            problems.append(("model.new.tokenizer", f"{new.tokenizer!r} is neither 'byte' nor a tokenizer directory"))
        elif new.preset in presets and new.config:  # build the config (and a meta-device model): no weights
            from dare.modeling.checkpoint import new_config_problems

            tok = new.tokenizer if new.tokenizer == "byte" else str(resolve_path(new.tokenizer))
            for key, msg in new_config_problems(ctx.family, new.preset, new.config, tokenizer=tok):
                problems.append((f"model.new.config.{key}" if key else "model.new.config", msg))
        return
    path = spec.model.path
    p = resolve_path(path)
    if not looks_local(path):
        return  # hub id: checked when loading
    if not p.is_dir():
        what = f"{path!r} is a file, not a directory" if p.exists() else \
            f"no such directory {path!r} (a local path, so it is not looked up on the hub; check the spelling" \
            f"{run_first_hint(path)})"
        problems.append(("model.path", f"{what}: model.path takes a checkpoint, run or LoRA adapter directory, or a "
                                       f"hub id (org/name)"))
        return
    p = trained_model_dir(p)  # an earlier run's directory: its trained model/
    from dare.modeling.checkpoint import adapter_weights, check_tokenizer_fits, verify_checkpoint, verify_weight_index

    try:
        base = adapter_base(p)
        if base is not None:
            adapter_weights(p)
    except DareError as exc:
        problems.append(("model.path", str(exc)))
        return
    if base is not None:  # a LoRA adapter directory: check the base model it names
        p = resolve_path(base)
        if not p.is_dir():
            if Path(base).is_absolute():
                problems.append(("model.path", f"{path!r} is a LoRA adapter whose base model {base!r} does not exist; "
                                               "fix base_model_name_or_path in its adapter_config.json"))
            return
    cfg_file = p / "config.json"
    if not cfg_file.is_file():
        problems.append(("model.path", f"{path!r} has no config.json; point model.path at a checkpoint directory"))
        return
    try:
        cfg = json.loads(cfg_file.read_text())
        if not isinstance(cfg, dict):
            raise ValueError("the top level is not a JSON object")
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        problems.append(("model.path", f"{cfg_file} is not valid JSON: {exc}"))
        return
    ctx.model_config = cfg
    mt = cfg.get("model_type")
    entry = reg.family_for_model_type(mt) if mt else None
    if entry is None:
        known = sorted(t for e in reg.entries["model_family"].values() for t in e.cls.model_types)
        problems.append(
            ("model.path", f"config.json model_type {mt!r} is not loaded by any installed family; known: "
                           f"{', '.join(known)}")
        )
        return
    ctx.family = entry.create()
    from transformers import AutoConfig

    register_auto_classes()  # the families' config classes (idempotent)
    try:
        config = AutoConfig.from_pretrained(str(p))
    except Exception as exc:  # noqa: BLE001 - a config its own class refuses
        problems.append(("model.path", f"{cfg_file} is not a valid {mt} config: {one_line(exc)}"))
        return
    try:  # safetensors headers and tensor names/shapes against the config (no tensor data read)
        if ctx.config_only:  # a model card: the tensor names of its weight index, when it has one
            verify_weight_index(p, ctx.family.model_class_for(config), config)
        else:
            ctx.family.validate_checkpoint(str(p))
            verify_checkpoint(p, ctx.family.model_class_for(config), config)
    except DareError as exc:
        problems.append(("model.path", str(exc)))
    except Exception as exc:  # noqa: BLE001 - the model class cannot be built from this config
        problems.append(("model.path", f"{cfg_file}: a {mt} model cannot be built from this config: {one_line(exc)}"))
    try:
        tok = ctx.tokenizer
    except Exception as exc:  # noqa: BLE001 - report any tokenizer failure as a spec problem
        problems.append(("model.path", f"could not load the tokenizer from {path!r}: {one_line(exc)}"))
        return
    if tok is not None and not ctx.config_only:  # a model card may ship only part of its vocabulary files
        try:
            check_tokenizer_fits(config, tok, ctx.family, where=path)
        except DareError as exc:
            problems.append(("model.path", str(exc)))


def check_lora(ctx, problems: Problems) -> None:
    """``model.lora``: an adapter ``path`` to continue, or target modules that exist in a meta-device model of
    the resolved family and config (no weights loaded). Needs :func:`check_model` to have run."""
    lora = ctx.spec.model.lora
    if lora is None:
        return
    if lora.path is not None:
        if not (Path(lora.path).expanduser() / ADAPTER_CONFIG).is_file():
            problems.append(("model.lora.path", f"{lora.path!r} has no {ADAPTER_CONFIG}; point it at a LoRA adapter "
                                                "directory"))
        return
    if ctx.family is None or ctx.model_config is None:
        return
    import torch
    from transformers import AutoConfig

    from dare.modeling.lora import resolve_lora_targets

    try:
        register_auto_classes()
        raw = dict(ctx.model_config)
        model_type = raw.pop("model_type", None)
        config = AutoConfig.for_model(model_type, **raw) if model_type else ctx.family.config_class()(**raw)
        with torch.device("meta"):
            model = ctx.family.model_class_for(config)(config)
    except Exception:  # noqa: BLE001 - the model check reports broken configs; targets are re-checked at load
        return
    try:
        resolve_lora_targets(model, ctx.family, lora)
    except SpecError as exc:
        problems.extend(exc.problems)


def check_gradient_checkpointing(ctx, problems: Problems) -> None:
    """``model.gradient_checkpointing``: the family's model class supports it (no weights loaded)."""
    if not ctx.spec.model.gradient_checkpointing or ctx.family is None:
        return
    cls = ctx.family.model_class()
    if not getattr(cls, "supports_gradient_checkpointing", False):
        problems.append(("model.gradient_checkpointing", f"{cls.__name__} ({ctx.family.name}) does not support "
                                                         f"gradient checkpointing; set model.gradient_checkpointing: "
                                                         f"false"))


def check_precision(ctx, problems: Problems) -> None:
    """``model.dtype`` 16-bit trained without mixed precision (``train.bf16: false``, no LoRA) at a learning rate
    whose AdamW steps round away (:func:`dare.trainers.precision.pure_16bit_problem`): refused, naming the fix."""
    spec = ctx.spec
    if spec.algorithm is None or spec.train is None:
        return
    from dare.trainers.precision import pure_16bit_problem

    why = pure_16bit_problem(spec.model.dtype, spec.train.bf16, spec.model.lora is not None, spec.train.learning_rate)
    if why is not None:
        problems.append(("train.bf16", why))


def check_packing(ctx, problems: Problems) -> None:
    """``train.packing``: the family implements packed forwards; ``train.packing_max_tokens`` only with packing."""
    train = ctx.spec.train
    if train is None:
        return
    if train.packing_max_tokens is not None and not train.packing:
        problems.append(("train.packing_max_tokens", "packing_max_tokens sets the row length of packed training, which "
                                                     "is off; set train.packing: true or remove packing_max_tokens"))
    if train.packing and ctx.family is not None and not ctx.family.supports_packing:
        problems.append(("train.packing", f"model family {ctx.family.name!r} has no packed forward "
                                          "(ModelFamily.packed_logits); set train.packing: false"))


def check_report_to(ctx, problems: Problems) -> None:
    """``train.report_to``: every tracker's package is installed (:func:`dare.trainers.trackers.missing_trackers`), and
    no tracker is named twice."""
    t = ctx.spec.train
    if t is None:
        return
    from dare.trainers.trackers import missing_trackers

    for i, name in enumerate(t.report_to):
        if name in t.report_to[:i]:
            problems.append((f"train.report_to[{i}]", f"{name} is listed twice; name each tracker once"))
    for i, message in missing_trackers(t.report_to):
        problems.append((f"train.report_to[{i}]", message))


def check_dataset(ds: DatasetSpec, loc: str, problems: Problems, need_prompt: bool = True) -> None:
    """A dataset at ``loc``: readable, has the columns its templates use (``prompt`` without a template), and
    its ``offset`` leaves rows."""
    try:
        cols = dataset_columns(ds.path, ds.split)
    except DareError as exc:
        problems.append((f"{loc}.path", str(exc)))
        return
    if cols is None:  # hub dataset: checked at load time
        return
    if (bad := jsonl_surrogate_problem(ds.path, ds.offset + ds.limit if ds.limit else SCAN_LINES)) is not None:
        problems.append((f"{loc}.path", bad))
    needed: dict[str, str] = {}
    for tname in ("prompt_template", "response_template"):
        tmpl = getattr(ds, tname)
        if tmpl is not None:
            try:
                for f in template_fields(tmpl):
                    needed.setdefault(f, f"{loc}.{tname}")
            except DareError as exc:
                problems.append((f"{loc}.{tname}", str(exc)))
    if ds.prompt_template is None and need_prompt:
        needed.setdefault("prompt", f"{loc}.path")
    missing = False
    for col, where in needed.items():
        if col not in cols:
            missing = True
            problems.append((where, f"{ds.path} has no column {col!r}; its columns are: {', '.join(cols)}"))
    if ds.prompt_template is None and need_prompt and not missing:
        for _, msg in column_type_problems(ds.path, ["prompt"], sample_rows(ds.path, ds.offset)):
            problems.append((f"{loc}.path", f"{msg}; or set {loc}.prompt_template"))
            missing = True
    row = None if missing else first_row(ds.path, ds.split, ds.offset)
    for tname in ("prompt_template", "response_template"):  # nested fields ({{ extra_info.x }}): render row 1
        tmpl = getattr(ds, tname)
        if row is not None and tmpl is not None:
            try:
                render(tmpl, row)
            except DareError as exc:
                problems.append((f"{loc}.{tname}", f"row {ds.offset} of {ds.path}: {exc}"))
            except Exception as exc:  # noqa: BLE001 - e.g. a filter applied to the wrong type
                problems.append((f"{loc}.{tname}", f"template {tmpl!r} fails on row {ds.offset} of {ds.path}: "
                                                   f"{type(exc).__name__}: {exc}"))
    n = dataset_rows(ds.path, at_most=ds.offset + 1)
    if n == 0:
        problems.append((f"{loc}.path", f"{ds.path} has no rows; point {loc}.path at a file with data"))
    elif ds.offset and n is not None and ds.offset >= n:
        problems.append((f"{loc}.offset", f"offset {ds.offset} skips every row: {ds.path} has {n} rows; use an "
                                          f"offset below {n}"))


def check_benchmark_data(ev, b: BenchmarkSpec, loc: str, problems: Problems) -> None:
    """The data file of benchmark ``b`` (evaluator ``ev``): exists and fits its template and offset."""
    try:
        path = benchmark_path(ev, b)
    except DareError as exc:
        problems.append((f"{loc}.path", str(exc)))
        return
    ds = DatasetSpec(path=str(path), prompt_template=b.prompt_template, offset=b.offset)
    check_dataset(ds, loc, problems)


def _rows(offset: int, limit: int | None) -> tuple[float, float]:
    """Half-open row range ``[offset, offset + limit)`` (``inf`` without a limit)."""
    return offset, offset + limit if limit is not None else float("inf")


def _row_range(offset: int, limit: int | None) -> str:
    return f"{offset}..{offset + limit - 1}" if limit is not None else f"{offset}..end"


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return max(a[0], b[0]) < min(a[1], b[1])


def check_validation_rows(spec: RunSpec, ev, v: BenchmarkSpec, problems: Problems) -> None:
    """``eval.validation`` must share rows with neither an ``eval.benchmarks`` entry (the test set) nor
    ``data.train`` (same file, overlapping ``offset``/``limit`` ranges)."""
    try:
        vpath = Path(benchmark_path(ev, v)).resolve()
    except (DareError, OSError):
        return
    vrows = _rows(v.offset, v.limit)
    for i, b in enumerate(spec.eval.resolved):
        if b.path is None and b.name != v.name:
            continue  # another evaluator's default file
        try:
            bpath = Path(benchmark_path(ev, b)).resolve()  # b.path, or (same evaluator) the shared default
        except (DareError, OSError):
            continue
        if bpath == vpath and _overlap(_rows(b.offset, b.limit), vrows):
            problems.append(("eval.validation", f"rows {_row_range(v.offset, v.limit)} of {vpath.name} are also rows "
                                                f"of eval.benchmarks[{i}] (the test set): checkpoints would be "
                                                f"selected on test data; point eval.validation.path at held-out "
                                                f"training rows (e.g. the training file with data.train.limit and this "
                                                f"offset)"))
            return
    train = spec.data.train if spec.data is not None else None
    if train is None or resolve_path(train.path).resolve() != vpath:
        return
    if _overlap(_rows(train.offset, train.limit), vrows):
        hint = (f"e.g. data.train.limit: {v.offset}" if train.offset == 0 and v.offset > 0 else
                "give data.train and eval.validation disjoint offset/limit ranges")
        problems.append(("eval.validation", f"rows {_row_range(v.offset, v.limit)} of {train.path} are also training "
                                            f"rows (data.train rows {_row_range(train.offset, train.limit)}): a "
                                            f"validation score on trained rows cannot select a checkpoint; hold them "
                                            f"out, {hint}"))


def check_keep_best(spec: RunSpec, problems: Problems) -> None:
    """``train.keep_best`` needs ``eval.validation`` and ``train.eval_steps <= max_steps``."""
    t = spec.train
    if t is None or not t.keep_best:
        return
    if spec.eval is None or spec.eval.validation is None:
        problems.append(("train.keep_best", "keep_best selects the final weights on eval.validation, which is not set; "
                                            "add eval.validation (held-out training rows, never the test benchmark)"))
    if t.eval_steps is None:
        problems.append(("train.keep_best", "keep_best needs in-training evaluations; set train.eval_steps (e.g. 10)"))
    elif t.eval_steps > t.max_steps:
        problems.append(("train.eval_steps", f"eval_steps {t.eval_steps} > max_steps {t.max_steps}: keep_best would "
                                             f"only see the evaluation before training; lower train.eval_steps"))


def check_output(spec: RunSpec, problems: Problems, command: str | None = None) -> None:
    """``output.dir`` rules of :mod:`dare.run.rundir`, as the command that uses the spec applies them.

    ``command`` ``run`` or ``train`` (``dare validate``'s default is ``run``): a spec that trains (``algorithm`` and
    ``train``) is checked as training checks it, ``train.resume`` included, so ``dare validate`` accepts exactly what
    ``dare run`` accepts; ``eval``: as an evaluation-only command. None (the command is not known): the directory
    passes when it suits either (``output.overwrite: true`` replacing another run's directory is for training).
    :meth:`dare.run.Run.prepare` checks again with the command's own stages, so ``dare eval`` never deletes a run's
    results."""
    dump = spec.model_dump(mode="json")
    trains = spec.algorithm is not None and spec.train is not None
    resume = spec.train.resume if spec.train is not None else True
    if command in ("run", "train") and trains:
        _, found = plan_output_dir(spec.output.dir, spec_hash(spec), spec.output.overwrite, resume=resume, train=True,
                                   spec=dump, damaged=resume_problem)
        problems.extend(found)
        return
    _, found = plan_output_dir(spec.output.dir, spec_hash(spec), spec.output.overwrite, train=False, spec=dump)
    if found and trains and command is None:
        _, as_training = plan_output_dir(spec.output.dir, spec_hash(spec), spec.output.overwrite, resume=resume,
                                         train=True, spec=dump, damaged=resume_problem)
        found = found if as_training else []
    problems.extend(found)
