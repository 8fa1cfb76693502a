"""The declarative run spec (YAML) and its validation.

A spec has the sections ``model / data / algorithm / sampler / rewards / train / eval / output``.
Validation runs before any weights are loaded, in two passes:

1. structure: :class:`RunSpec` (pydantic, ``extra="forbid"`` everywhere);
2. components: each ``name`` is resolved in the plugin registry and its ``params`` validated against
   that component's own ``Params`` model; then cross-field checks (files exist and have the needed
   columns, the model directory has a ``config.json`` whose ``model_type`` an installed family
   loads, the tokenizer has a mask token, the sampler fits the family, the output directory does not
   hold a different run).

Every problem is reported as ``yaml.path: message``; :func:`load_spec` raises one
:class:`~dare.errors.SpecError` listing all of them.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator, model_validator

from dare.errors import DareError, SpecError

__all__ = [
    "RunSpec",
    "ModelSpec",
    "NewModelSpec",
    "LoraSpec",
    "DatasetSpec",
    "DataSpec",
    "ComponentSpec",
    "RewardSpec",
    "TrainSpec",
    "BenchmarkSpec",
    "EvalSpec",
    "OutputSpec",
    "SpecContext",
    "load_spec",
    "validate_spec",
    "spec_hash",
    "json_schema",
    "resolve_path",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_numbers(cls, value, info):
        """``true``/``false`` for a number field is a mistake (pydantic would read it as 1/0)."""
        if isinstance(value, bool):
            import typing

            field_info = cls.model_fields.get(info.field_name)
            todo, kinds = [field_info.annotation if field_info else None], set()
            while todo:
                a = todo.pop()
                kinds.add(a)
                todo.extend(typing.get_args(a))
            if bool not in kinds and (int in kinds or float in kinds):
                raise ValueError(f"expected {'an integer' if int in kinds else 'a number'}, not a boolean")
        return value


# --------------------------------------------------------------------------- model
class NewModelSpec(_Strict):
    """Create a fresh, randomly initialised model in the official checkpoint format."""

    family: str = Field(description="Model family name (see `dare plugins`), e.g. llada.")
    preset: str = Field("tiny", description="Family preset, e.g. tiny.")
    config: dict[str, Any] = Field(default_factory=dict, description="config.json overrides, e.g. {d_model: 128}.")
    tokenizer: str = Field(
        "byte",
        description="'byte' builds DARE's byte-level tokenizer with the family's special tokens and chat template; "
        "otherwise a tokenizer directory.",
    )
    seed: int = Field(0, description="Seed of the random initialisation.")


class LoraSpec(_Strict):
    """LoRA adapters through peft."""

    r: int = Field(16, gt=0, description="LoRA rank.")
    alpha: float = Field(32.0, gt=0, description="LoRA alpha (scale = alpha / r).")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="Dropout on the LoRA input.")
    target_modules: Union[Literal["all-linear"], list[str]] = Field(
        "all-linear", description="'all-linear' (resolved per family, LM head excluded) or module names."
    )
    include_lm_head: bool = Field(False, description="Also adapt the LM head when target_modules is all-linear.")
    path: str | None = Field(None, description="Existing adapter directory to continue training from.")


class ModelSpec(_Strict):
    """Which model to train or evaluate: a checkpoint (``path``) or a fresh one (``new``)."""

    path: str | None = Field(None, description="Local checkpoint directory or hub id; family from config.json model_type.")
    new: NewModelSpec | None = Field(None, description="Create a new random model instead of loading one.")
    dtype: Literal["float32", "bfloat16", "float16"] = Field("float32", description="Weights dtype.")
    lora: LoraSpec | None = Field(None, description="Train LoRA adapters instead of all weights.")

    @model_validator(mode="after")
    def _one_source(self):
        if (self.path is None) == (self.new is None):
            raise ValueError("give exactly one of model.path (a checkpoint) or model.new (a fresh model)")
        return self


# --------------------------------------------------------------------------- data
class DatasetSpec(_Strict):
    """A dataset file (parquet or JSONL, in the data_source/prompt/reward_model/extra_info format)."""

    path: str = Field(description="parquet/JSONL file, 'dare://' packaged asset, or hub dataset id.")
    split: str = Field("train", description="Split, for hub datasets.")
    offset: int = Field(0, ge=0, description="Skip the first N rows (with limit: rows offset .. offset+limit-1), e.g. to "
                        "hold rows out for eval.validation.")
    limit: int | None = Field(None, gt=0, description="Use only the first N rows (after offset).")
    prompt_template: str | None = Field(
        None, description="Jinja template over row fields giving the user message, e.g. '{{ extra_info.puzzle }}'."
    )
    response_template: str | None = Field(
        None, description="Jinja template giving the target response (supervised training)."
    )
    chat_template: bool = Field(True, description="Wrap the prompt with the tokenizer's chat template.")
    system_prompt: str | None = Field(None, description="System message prepended when chat_template is on.")


class DataSpec(_Strict):
    train: DatasetSpec | None = None
    eval: DatasetSpec | None = Field(None, description="Held-out rows for in-training metrics.")


# --------------------------------------------------------------------------- components
class ComponentSpec(_Strict):
    name: str = Field(description="Installed component name (see `dare plugins`).")
    params: dict[str, Any] = Field(default_factory=dict, description="Validated by the component's own Params model.")


class RewardSpec(ComponentSpec):
    weight: float = Field(1.0, description="Weight in the summed reward.")


# --------------------------------------------------------------------------- train / eval / output
class TrainSpec(_Strict):
    """Optimisation settings shared by every trainer."""

    learning_rate: float = Field(gt=0, description="Peak learning rate (AdamW).")
    max_steps: int = Field(gt=0, description="Optimizer steps.")
    per_device_batch_size: int = Field(8, gt=0, description="Examples (or prompts, for RL) per device per step.")
    gradient_accumulation_steps: int = Field(1, gt=0)
    seed: int = 0
    lr_scheduler: Literal["constant", "constant_with_warmup", "linear", "cosine"] = "constant"
    warmup_ratio: float = Field(0.0, ge=0.0, lt=1.0)
    weight_decay: float = Field(0.0, ge=0.0)
    adam_beta1: float = Field(0.9, ge=0.0, lt=1.0)
    adam_beta2: float = Field(0.999, ge=0.0, lt=1.0)
    max_grad_norm: float = Field(1.0, gt=0.0, description="Gradient clipping (global norm).")
    logging_steps: int = Field(10, gt=0)
    save_steps: int = Field(500, gt=0, description="Checkpoint every N steps (official format + trainer state).")
    save_total_limit: int | None = Field(2, gt=0)
    eval_steps: int | None = Field(
        None, gt=0, description="Evaluate every N steps during training: eval.validation when given, else the first eval benchmark."
    )
    eval_limit: int | None = Field(None, gt=0, description="Rows of that benchmark used for in-training evaluation.")
    keep_best: bool = Field(
        False,
        description="End training with the weights that scored the highest eval.validation accuracy among the in-training "
        "evaluations (every eval_steps, plus one before the first step; ties keep the earliest) instead of the last "
        "step's. Needs train.eval_steps and eval.validation (never selects on a test benchmark).",
    )
    max_length: int | None = Field(None, gt=0, description="Truncate/filter sequences longer than this (tokens).")
    bf16: bool = Field(False, description="bf16 autocast.")
    resume: bool = Field(True, description="Resume from the last checkpoint in the output directory, if any.")
    num_threads: int | None = Field(None, gt=0, description="torch CPU threads (default: torch's choice).")


class BenchmarkSpec(_Strict):
    name: str = Field(description="Evaluator (benchmark) name, e.g. gsm8k, sudoku.")
    path: str | None = Field(None, description="Data file; defaults to the benchmark's file under $DARE_DATA_DIR.")
    offset: int = Field(0, ge=0, description="Skip the first N rows.")
    limit: int | None = Field(None, gt=0, description="Use only the first N rows (after offset).")
    prompt_template: str | None = None
    chat_template: bool = True
    system_prompt: str | None = None
    reward: ComponentSpec | None = Field(None, description="Override the benchmark's reward.")
    params: dict[str, Any] = Field(
        default_factory=dict,
        description="The benchmark's own params, validated by its Params model (likelihood benchmarks: mc_samples, "
        "mc_scheme, target_delimiter).",
    )


class EvalSpec(_Strict):
    benchmarks: list[Union[BenchmarkSpec, str]] = Field(description="Benchmarks (names or objects).")
    validation: BenchmarkSpec | None = Field(
        None,
        description="Held-out benchmark scored every train.eval_steps during training (instead of the first benchmark) "
        "and used by train.keep_best; give it rows that are neither trained on nor in the test benchmarks, e.g. "
        "training rows held out with data.train.limit and this offset.",
    )
    before_train: bool = Field(True, description="With `dare run`: also evaluate the model before training.")
    batch_size: int = Field(32, gt=0)
    seed: int = 0

    @property
    def resolved(self) -> list[BenchmarkSpec]:
        return [BenchmarkSpec(name=b) if isinstance(b, str) else b for b in self.benchmarks]


class OutputSpec(_Strict):
    dir: str = Field(description="Run directory (checkpoints, final model, metrics, report).")
    overwrite: bool = Field(False, description="Allow replacing a directory that holds a different run.")


class RunSpec(_Strict):
    """A whole run: model, data, algorithm, sampler, rewards, train, eval, output."""

    model: ModelSpec
    data: DataSpec | None = None
    algorithm: ComponentSpec | None = None
    sampler: ComponentSpec | None = None
    rewards: list[RewardSpec] = Field(default_factory=list)
    train: TrainSpec | None = None
    eval: EvalSpec | None = None
    output: OutputSpec


# =========================================================================== helpers
def resolve_path(path: str) -> Path:
    """Resolve ``dare://rel`` to a packaged asset; other paths are relative to the working directory."""
    if path.startswith("dare://"):
        from dare import assets

        return assets.path(path[len("dare://") :])
    return Path(os.path.expanduser(path))


def _loc_str(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _field_keys(model_cls: type[BaseModel]) -> list[str]:
    return list(model_cls.model_fields)


def _model_at(model_cls: type[BaseModel], loc: tuple) -> type[BaseModel] | None:
    """The pydantic model class reached by following ``loc`` (for listing allowed keys)."""
    import typing

    cur: Any = model_cls
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(cur, type) and issubclass(cur, BaseModel)) or part not in cur.model_fields:
            return None
        ann = cur.model_fields[part].annotation
        cands = [ann]
        while cands:
            a = cands.pop()
            if isinstance(a, type) and issubclass(a, BaseModel):
                cur = a
                break
            cands.extend(typing.get_args(a))
        else:
            return None
    return cur if isinstance(cur, type) and issubclass(cur, BaseModel) else None


def pydantic_problems(exc: ValidationError, root_cls: type[BaseModel], prefix: str = "") -> list[tuple[str, str]]:
    """Turn a pydantic error into ``(yaml_path, message)`` pairs with allowed keys for unknown ones."""
    import re

    problems = []
    for err in exc.errors():
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and ("[" in p or p.startswith("function-"))))
        loc, branch, union_has_model = _strip_union_tags(root_cls, loc)
        if branch is not None and union_has_model and isinstance(err.get("input"), dict) and not (
            isinstance(branch, type) and issubclass(branch, BaseModel)
        ):
            continue  # a mapping was given: only the errors of the union's mapping branch matter
        model_level = err["type"] == "value_error" and isinstance(err.get("input"), dict)
        if model_level:  # a model validator: point at the field its message starts with
            owner = _model_at(root_cls, loc)
            first = re.match(r"\w+", err["msg"].removeprefix("Value error, "))
            if owner is not None and first and first.group(0) in owner.model_fields:
                loc = (*loc, first.group(0))
        path = _loc_str(loc)
        if prefix:
            path = f"{prefix}.{path}" if path and not path.startswith("[") else f"{prefix}{path}"
        typ = err["type"]
        if typ == "extra_forbidden":
            parent = _model_at(root_cls, loc[:-1])
            allowed = ", ".join(_field_keys(parent)) if parent else "see `dare schema`"
            msg = f"unknown key; allowed keys here: {allowed}"
        elif typ == "missing":
            msg = "required field is missing"
        else:
            msg = err["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
            if "input" in err and typ not in ("model_type", "dict_type") and not model_level:
                shown = repr(err["input"])
                msg += f" (got {shown if len(shown) <= 80 else shown[:77] + '...'})"
        problems.append((path, msg))
    return problems


def _strip_union_tags(root_cls: type[BaseModel], loc: tuple) -> tuple[tuple, Any, bool]:
    """Drop the member tags pydantic puts in the locations of union errors (``benchmarks[0].BenchmarkSpec.limit``).

    Returns ``(loc without tags, the union member the error came from or None, whether that union has a
    model member)``.
    """
    import types
    import typing

    def unoptional(a):
        if typing.get_origin(a) in (Union, types.UnionType):
            args = [x for x in typing.get_args(a) if x is not type(None)]
            if len(args) == 1:
                return args[0]
        return a

    out: list = []
    branch, has_model = None, False
    ann: Any = root_cls
    for part in loc:
        ann = unoptional(ann)
        if isinstance(ann, type) and issubclass(ann, BaseModel) and isinstance(part, str) and part in ann.model_fields:
            ann = ann.model_fields[part].annotation
        elif isinstance(part, int) and typing.get_origin(ann) is list:
            ann = typing.get_args(ann)[0]
        elif isinstance(part, str) and typing.get_origin(ann) in (Union, types.UnionType):
            members = {getattr(a, "__name__", None): a for a in typing.get_args(ann)}
            if part in members:
                branch, ann = members[part], members[part]
                has_model = any(isinstance(a, type) and issubclass(a, BaseModel) for a in members.values())
                continue
            ann = None
        else:
            ann = None
        out.append(part)
    return tuple(out), branch, has_model


def spec_hash(spec: RunSpec) -> str:
    """SHA-256 (first 16 hex digits) of the validated spec, ignoring ``output.overwrite``/``train.resume``."""
    data = spec.model_dump(mode="json")
    data["output"].pop("overwrite", None)
    if data.get("train"):
        data["train"].pop("resume", None)
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass
class SpecContext:
    """What component ``check`` methods may consult: the spec, the registry and the model's config."""

    spec: RunSpec
    registry: Any
    source: str | None = None
    family: Any = None  # ModelFamily instance, when the model's family could be resolved
    model_config: dict[str, Any] | None = None
    components: dict[str, Any] = field(default_factory=dict)  # yaml path -> instantiated component

    @cached_property
    def tokenizer(self):
        """The tokenizer of ``model.path`` (a local directory), or None."""
        if self.spec.model.path is None:
            return None
        from dare.modeling.checkpoint import trained_model_dir

        p = trained_model_dir(resolve_path(self.spec.model.path))
        if not p.is_dir():
            return None
        if not (p / "tokenizer_config.json").is_file() and (p / "adapter_config.json").is_file():
            from dare.modeling.lora import adapter_base

            p = resolve_path(adapter_base(p))  # a LoRA adapter without tokenizer files: its base model's
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(p))


# =========================================================================== loading
def load_spec(path: str | os.PathLike, overrides: list[str] | None = None, check: bool = True) -> RunSpec:
    """Read, structurally validate and (with ``check``) cross-check a YAML run spec.

    ``overrides`` are ``dotted.key=value`` strings (value parsed as YAML) applied before validation.

    :raises SpecError: listing every problem with its YAML path.
    """
    path = Path(path)
    if not path.is_file():
        raise SpecError([("", f"spec file {str(path)!r} does not exist")])
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise SpecError([("", f"not valid YAML: {exc}")], source=str(path)) from None
    if not isinstance(raw, dict):
        raise SpecError([("", "the spec must be a mapping with sections model, data, algorithm, ...")], source=str(path))
    for ov in overrides or []:
        _apply_override(raw, ov)
    return validate_spec(raw, source=str(path), check=check)


def parse_override_value(value: str) -> Any:
    """A ``--set``/``--param`` value: YAML, or the literal string when it is not valid YAML or reads as a
    mapping from a Jinja ``{{ ... }}`` (e.g. ``prompt_template={{ extra_info.x }}``)."""
    try:
        parsed = yaml.safe_load(value)
    except yaml.YAMLError:
        return value
    if isinstance(parsed, dict) and "{{" in value:
        return value
    return parsed


def _apply_override(raw: dict, override: str) -> None:
    """Set ``dotted.key=value`` in ``raw``; list items by index (``eval.benchmarks.0.limit`` or ``[0]``)."""
    import re

    if "=" not in override:
        raise SpecError([("", f"override {override!r} must look like section.key=value")])
    key, value = override.split("=", 1)
    key = key.strip()
    where = f"--set {key}"
    parts = re.sub(r"\[(\w*)\]", r".\1", key).split(".")
    if any(not p for p in parts):
        raise SpecError([(where, "empty path segment; write e.g. eval.benchmarks.0.limit=8 or eval.benchmarks[0].limit=8")])
    cur: Any = raw
    for i, p in enumerate(parts):
        last = i == len(parts) - 1
        done = ".".join(parts[:i]) or "<root>"
        if isinstance(cur, list):
            if not p.isdigit():
                raise SpecError([(where, f"{done} is a list; address its items by index (e.g. {done}.0), not {p!r}")])
            idx = int(p)
            if idx >= len(cur):
                have = f"indices 0..{len(cur) - 1}" if cur else "no items"
                raise SpecError([(where, f"index {idx} is out of range: {done} has {len(cur)} item(s) ({have})")])
            if last:
                cur[idx] = parse_override_value(value)
                return
            if isinstance(cur[idx], str) and done.endswith("benchmarks"):
                cur[idx] = {"name": cur[idx]}  # a benchmark given by name: expand to its mapping
            cur = cur[idx]
        elif isinstance(cur, dict):
            if last:
                cur[p] = parse_override_value(value)
                return
            if cur.get(p) is None:
                cur[p] = [] if parts[i + 1].isdigit() else {}
            cur = cur[p]
        else:
            raise SpecError([(where, f"cannot override inside {done}, which is {cur!r}, not a mapping or list")])


def validate_spec(raw: dict | RunSpec, source: str | None = None, check: bool = True) -> RunSpec:
    """Validate a spec mapping (both passes). Returns the structural :class:`RunSpec`.

    :raises SpecError: listing every problem with its YAML path.
    """
    if isinstance(raw, RunSpec):
        spec = raw
    else:
        try:
            spec = RunSpec.model_validate(raw)
        except ValidationError as exc:
            raise SpecError(pydantic_problems(exc, RunSpec), source=source) from None
    if check:
        ctx = build_context(spec, source)
        problems = ctx.components.pop("__problems__")
        if problems:
            raise SpecError(problems, source=source)
    return spec


def _component(ctx: SpecContext, problems: list, kind: str, cspec: ComponentSpec, loc: str):
    from dare.errors import PluginError

    try:
        entry = ctx.registry.get(kind, cspec.name)
    except PluginError as exc:
        problems.append((f"{loc}.name", str(exc)))
        return None
    try:
        params = entry.cls.Params.model_validate(cspec.params)
    except ValidationError as exc:
        problems.extend(pydantic_problems(exc, entry.cls.Params, prefix=f"{loc}.params"))
        return None
    comp = entry.cls(params)
    ctx.components[loc] = comp
    return comp


def build_context(spec: RunSpec, source: str | None = None) -> SpecContext:
    """Second pass: resolve components, validate their params and run cross-field checks.

    Problems are collected in ``ctx.components['__problems__']``.
    """
    from dare.plugins import get_registry

    registry = get_registry()
    ctx = SpecContext(spec=spec, registry=registry, source=source)
    problems: list[tuple[str, str]] = []

    _check_model(ctx, problems)
    if spec.model.lora is not None:
        from dare.modeling.lora import lora_spec_problems

        problems.extend(lora_spec_problems(ctx))
    if spec.algorithm is not None:
        _component(ctx, problems, "objective", spec.algorithm, "algorithm")
    if spec.sampler is not None:
        _component(ctx, problems, "sampler", spec.sampler, "sampler")
    for i, r in enumerate(spec.rewards):
        _component(ctx, problems, "reward", r, f"rewards[{i}]")
    if spec.eval is not None:
        for i, b in enumerate(spec.eval.resolved):
            loc = f"eval.benchmarks[{i}]"
            ev = _component(ctx, problems, "evaluator", ComponentSpec(name=b.name, params=b.params), loc)
            if b.reward is not None:
                _component(ctx, problems, "reward", b.reward, f"{loc}.reward")
            if ev is not None:
                _check_benchmark_data(ev, b, loc, problems)
        v = spec.eval.validation
        if v is not None:
            ev = _component(ctx, problems, "evaluator", ComponentSpec(name=v.name, params=v.params), "eval.validation")
            if v.reward is not None:
                _component(ctx, problems, "reward", v.reward, "eval.validation.reward")
            if ev is not None:
                _check_benchmark_data(ev, v, "eval.validation", problems)
                _check_validation_rows(spec, ev, v, problems)
        styles = [getattr(c, "style", "generate") for loc, c in ctx.components.items()  # likelihood benchmarks
                  if loc.startswith("eval.") and c.kind == "evaluator"]                  # need no sampler
        if spec.sampler is None and (not styles or any(s != "loglikelihood" for s in styles)):
            problems.append(("sampler", "eval needs a sampler: section to generate answers"))
    if spec.data is not None:
        for split in ("train", "eval"):
            ds = getattr(spec.data, split)
            if ds is not None:
                _check_dataset(ds, f"data.{split}", problems)
    _check_output(spec, problems)
    _check_keep_best(spec, problems)

    # component cross-checks, once everything structural passed
    for loc, comp in list(ctx.components.items()):
        try:
            problems.extend(comp.check(ctx, loc))
        except DareError as exc:
            problems.append((loc, str(exc)))
    ctx.components["__problems__"] = problems
    return ctx


def _check_model(ctx: SpecContext, problems: list) -> None:
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
    local = p.exists() or path.startswith((".", "/", "~")) or path.count("/") != 1
    if not local:
        return  # hub id: checked when loading
    if not p.is_dir():
        problems.append(("model.path", f"no such directory {path!r}: model.path takes a checkpoint directory or a hub "
                                       "id (org/name)"))
        return
    from dare.modeling.checkpoint import trained_model_dir
    from dare.modeling.lora import adapter_base

    p = trained_model_dir(p)  # an earlier run's directory: its trained model/

    try:
        base = adapter_base(p)
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
    except json.JSONDecodeError as exc:
        problems.append(("model.path", f"{cfg_file} is not valid JSON: {exc}"))
        return
    ctx.model_config = cfg
    mt = cfg.get("model_type")
    entry = reg.family_for_model_type(mt) if mt else None
    if entry is None:
        known = sorted(t for e in reg.entries["model_family"].values() for t in e.cls.model_types)
        problems.append(
            ("model.path", f"config.json model_type {mt!r} is not loaded by any installed family; known: {', '.join(known)}")
        )
        return
    ctx.family = entry.create()
    try:
        tok = ctx.tokenizer
    except Exception as exc:  # noqa: BLE001 - report any tokenizer failure as a spec problem
        problems.append(("model.path", f"could not load the tokenizer from {path!r}: {exc}"))
        return
    if tok is not None:
        from transformers import AutoConfig

        try:
            config = AutoConfig.from_pretrained(str(p))
            ctx.family.special_tokens(config, tok)
        except DareError as exc:
            problems.append(("model.path", str(exc)))


def check_generate(model_path: str, sampler: str | None, params: dict[str, Any]):
    """``dare generate``'s input checks: the spec's ``model.path`` checks, then the sampler (default: the
    family's) with its params and its ``check`` against the model (attention kind, block sizes, ...).

    :returns: ``(sampler component, model family)``.
    :raises DareError: the problems, named by the command's options (``--model``, ``--sampler``, ``--param KEY``).
    """
    from dare.plugins import get_registry

    spec = RunSpec.model_construct(model=ModelSpec.model_construct(path=model_path), output=OutputSpec.model_construct(dir="."))
    ctx = SpecContext(spec=spec, registry=get_registry())
    problems: list[tuple[str, str]] = []

    def fail():
        names = {"model.path": "--model", "sampler.name": "--sampler", "sampler": "--sampler", "sampler.params": "--param"}
        out = []
        for loc, msg in problems:
            if loc.startswith("sampler.params."):
                loc = f"--param {loc[len('sampler.params.'):]}"
            out.append(f"{names.get(loc, loc)}: {msg.replace('model.path', '--model')}")
        raise DareError("; ".join(out))

    _check_model(ctx, problems)
    if problems:
        fail()
    if ctx.family is None:  # a hub id: its config.json decides the family
        from dare.modeling.checkpoint import family_of

        ctx.family = family_of(model_path, ctx.registry)
    cspec = ComponentSpec(name=sampler or ctx.family.default_sampler, params=params)
    spec.sampler = cspec
    comp = _component(ctx, problems, "sampler", cspec, "sampler")
    if comp is not None:
        try:
            problems.extend(comp.check(ctx, "sampler"))
        except DareError as exc:
            problems.append(("sampler", str(exc)))
    if problems:
        fail()
    return comp, ctx.family


def _check_dataset(ds: DatasetSpec, loc: str, problems: list, need_prompt: bool = True) -> None:
    from dare.data import dataset_columns, template_fields

    try:
        cols = dataset_columns(ds.path)
    except DareError as exc:
        problems.append((f"{loc}.path", str(exc)))
        return
    if cols is None:  # hub dataset: checked at load time
        return
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
    for col, where in needed.items():
        if col not in cols:
            problems.append((where, f"{ds.path} has no column {col!r}; its columns are: {', '.join(cols)}"))
    if ds.offset:
        n = _parquet_rows(ds.path)
        if n is not None and ds.offset >= n:
            problems.append((f"{loc}.offset", f"offset {ds.offset} skips every row: {ds.path} has {n} rows; use an "
                                              f"offset below {n}"))


def _parquet_rows(path: str) -> int | None:
    """Row count of a local parquet file (from its footer), else None."""
    try:
        p = resolve_path(path)
        if p.suffix != ".parquet" or not p.is_file():
            return None
        import pyarrow.parquet as pq

        return pq.ParquetFile(p).metadata.num_rows
    except Exception:  # noqa: BLE001 - unreadable files are reported by the column check
        return None


def _check_benchmark_data(ev, b: BenchmarkSpec, loc: str, problems: list) -> None:
    from dare.eval.runner import benchmark_path

    try:
        path = benchmark_path(ev, b)
    except DareError as exc:
        problems.append((f"{loc}.path", str(exc)))
        return
    ds = DatasetSpec(path=str(path), prompt_template=b.prompt_template, offset=b.offset)
    _check_dataset(ds, loc, problems)


def _rows(offset: int, limit: int | None) -> tuple[float, float]:
    """Half-open row range ``[offset, offset + limit)`` (``inf`` without a limit)."""
    return offset, offset + limit if limit is not None else float("inf")


def _row_range(offset: int, limit: int | None) -> str:
    return f"{offset}..{offset + limit - 1}" if limit is not None else f"{offset}..end"


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return max(a[0], b[0]) < min(a[1], b[1])


def _check_validation_rows(spec: RunSpec, ev, v: BenchmarkSpec, problems: list) -> None:
    """``eval.validation`` must share rows with neither an ``eval.benchmarks`` entry (the test set) nor
    ``data.train`` (same file, overlapping ``offset``/``limit`` ranges)."""
    from dare.eval.runner import benchmark_path

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
            problems.append(("eval.validation", f"rows {_row_range(v.offset, v.limit)} of {vpath.name} are also rows of "
                                                f"eval.benchmarks[{i}] (the test set): checkpoints would be selected on "
                                                "test data; point eval.validation.path at held-out training rows "
                                                "(e.g. the training file with data.train.limit and this offset)"))
            return
    train = spec.data.train if spec.data is not None else None
    if train is None or resolve_path(train.path).resolve() != vpath:
        return
    if _overlap(_rows(train.offset, train.limit), vrows):
        hint = (f"e.g. data.train.limit: {v.offset}" if train.offset == 0 and v.offset > 0 else
                "give data.train and eval.validation disjoint offset/limit ranges")
        problems.append(("eval.validation", f"rows {_row_range(v.offset, v.limit)} of {train.path} are also training rows "
                                            f"(data.train rows {_row_range(train.offset, train.limit)}): a validation "
                                            f"score on trained rows cannot select a checkpoint; hold them out, {hint}"))


def _check_keep_best(spec: RunSpec, problems: list) -> None:
    t = spec.train
    if t is None or not t.keep_best:
        return
    if spec.eval is None or spec.eval.validation is None:
        problems.append(("train.keep_best", "keep_best selects the final weights on eval.validation, which is not set; add "
                                            "eval.validation (held-out training rows, never the test benchmark)"))
    if t.eval_steps is None:
        problems.append(("train.keep_best", "keep_best needs in-training evaluations; set train.eval_steps (e.g. 10)"))
    elif t.eval_steps > t.max_steps:
        problems.append(("train.eval_steps", f"eval_steps {t.eval_steps} > max_steps {t.max_steps}: keep_best would only "
                                             "see the evaluation before training; lower train.eval_steps"))


def _check_output(spec: RunSpec, problems: list) -> None:
    """``output.dir`` rules of :mod:`dare.rundir` (the ``train.resume`` check is the run's, when it trains)."""
    from dare.rundir import plan_output_dir

    _, found = plan_output_dir(spec.output.dir, spec_hash(spec), spec.output.overwrite, train=False)
    problems.extend(found)


# =========================================================================== JSON schema
def json_schema(registry=None) -> dict[str, Any]:
    """One JSON Schema of the run spec, with every installed component's params.

    ``algorithm``/``sampler``/``rewards[]``/``model.new.family``/``eval.benchmarks`` become unions
    discriminated by ``name`` over the installed components.
    """
    from dare.plugins import get_registry

    registry = registry or get_registry()

    def union(kind: str, base: type[BaseModel]):
        members = []
        for entry in sorted(registry.entries[kind].values(), key=lambda e: e.name):
            cls_name = f"{kind.title().replace('_', '')}_{entry.name.replace('-', '_')}"
            m = create_model(
                cls_name,
                __base__=base,
                name=(Literal[entry.name], Field(description=entry.cls.description() or entry.name)),
                params=(entry.cls.Params, Field(default_factory=entry.cls.Params)),
            )
            members.append(m)
        if not members:
            return base
        if len(members) == 1:
            return members[0]
        return Union[tuple(members)]  # type: ignore[return-value]

    Alg = union("objective", ComponentSpec)
    Samp = union("sampler", ComponentSpec)
    Rew = union("reward", RewardSpec)
    fam_names = sorted(registry.entries["model_family"])
    bench_names = sorted(registry.entries["evaluator"])
    New = create_model(
        "NewModelSpec",
        __base__=NewModelSpec,
        family=(Literal[tuple(fam_names)] if fam_names else str, Field(description="Model family")),
    )
    Model = create_model("ModelSpec", __base__=ModelSpec, new=(New | None, None))
    Bench = create_model(
        "BenchmarkSpec",
        __base__=BenchmarkSpec,
        name=(Literal[tuple(bench_names)] if bench_names else str, Field(description="Benchmark")),
        reward=(Rew | None, None),
    )
    BenchName = Literal[tuple(bench_names)] if bench_names else str
    Eval = create_model("EvalSpec", __base__=EvalSpec, benchmarks=(list[Union[Bench, BenchName]], ...))
    Spec = create_model(
        "RunSpec",
        __base__=RunSpec,
        model=(Model, ...),
        algorithm=(Alg | None, None),
        sampler=(Samp | None, None),
        rewards=(list[Rew], Field(default_factory=list)),
        eval=(Eval | None, None),
    )
    schema = Spec.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "DARE run spec"
    return schema
