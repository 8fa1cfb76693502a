"""The second validation pass: a structurally valid spec made into a typed :class:`ResolvedSpec`.

Every component the spec names is looked up in the plugin registry and built with its ``params``
validated by the component's own ``Params`` model; then the semantic checks of
:mod:`dare.runspec.checks` and each component's own ``check`` run. Nothing here loads weights. The
result is what :class:`dare.run.Run` consumes and what component ``check`` methods receive.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from pydantic import ValidationError

from dare.components import Evaluator, ModelFamily, Objective, ResolvedSampler, Reward, Sampler
from dare.errors import DareError, PluginError, SpecError
from dare.io import looks_local, resolve_path
from dare.modeling.locate import adapter_base, family_of, trained_model_dir
from dare.plugins.manager import get_registry, register_auto_classes
from dare.runspec.checks import (
    check_benchmark_data,
    check_dataset,
    check_gradient_checkpointing,
    check_precision,
    check_packing,
    check_report_to,
    check_keep_best,
    check_lora,
    check_model,
    check_output,
    check_validation_rows,
)
from dare.runspec.models import BenchmarkSpec, ComponentSpec, ModelSpec, OutputSpec, RunSpec
from dare.runspec.problems import pydantic_problems

log = logging.getLogger("dare.runspec")

__all__ = ["ResolvedBenchmark", "ResolvedSpec", "SpecContext", "resolve_spec", "resolve_generate"]


@dataclass
class ResolvedBenchmark:
    """One entry of ``eval.benchmarks`` (or ``eval.validation``) with its components.

    ``reward`` is the benchmark's ``reward:`` override, else the evaluator's default reward with its
    default params.
    """

    loc: str
    spec: BenchmarkSpec
    evaluator: Evaluator
    reward: Reward


@dataclass
class ResolvedSpec:
    """A validated spec with its components built (no weights loaded).

    * ``family``/``model_config``: the model's family adapter and ``config.json`` values (None when they
      did not resolve; a problem then says why);
    * ``objective``, ``sampler``: from ``algorithm:``/``sampler:``; ``rollout_sampler``: the sampler the objective's
      training decodes with and the YAML path of each of its settings (online RL; else None); ``rewards``: ``(reward,
      weight)`` pairs of ``rewards:``; ``benchmarks``/``validation``: ``eval.benchmarks``/``eval.validation``;
    * ``problems``: every ``(yaml_path, message)`` found; :meth:`raise_problems` turns them into one
      :class:`~dare.errors.SpecError`;
    * ``config_only``: ``model.path`` is a model card (config.json, maybe the weight index and tokenizer files)
      without weights: its config is checked and its tensor names against the weight index, no shard is
      required, and a tokenizer that cannot be loaded is skipped (``dare validate --config-only``).

    Component ``check(ctx, loc)`` methods receive this object (the spec, its family, config, tokenizer
    and the other resolved components).
    """

    spec: RunSpec
    registry: Any
    source: str | None = None
    family: ModelFamily | None = None
    model_config: dict[str, Any] | None = None
    objective: Objective | None = None
    sampler: Sampler | None = None
    rollout_sampler: ResolvedSampler | None = None
    rewards: list[tuple[Reward, float]] = field(default_factory=list)
    benchmarks: list[ResolvedBenchmark] = field(default_factory=list)
    validation: ResolvedBenchmark | None = None
    problems: list[tuple[str, str]] = field(default_factory=list)
    config_only: bool = False

    @cached_property
    def tokenizer(self):
        """The tokenizer of ``model.path`` (a local directory), or None (``model.new``, hub ids, and with
        ``config_only`` a model card whose tokenizer files do not load)."""
        if self.config_only:
            try:
                return self._load_tokenizer()
            except Exception:  # noqa: BLE001 - a model card may lack its tokenizer files
                return None
        return self._load_tokenizer()

    def _load_tokenizer(self):
        if self.spec.model.path is None:
            return None
        p = trained_model_dir(resolve_path(self.spec.model.path))
        if not p.is_dir():
            return None
        if not (p / "tokenizer_config.json").is_file() and adapter_base(p) is not None:
            p = resolve_path(adapter_base(p))  # a LoRA adapter without tokenizer files: its base model's
        from transformers import AutoTokenizer

        register_auto_classes()  # the families' tokenizer and config classes, for this and the model check
        return AutoTokenizer.from_pretrained(str(p))

    def components(self) -> list[tuple[str, Any]]:
        """``(yaml_path, component)`` of every resolved component, in spec order."""
        out: list[tuple[str, Any]] = []
        if self.objective is not None:
            out.append(("algorithm", self.objective))
        if self.sampler is not None:
            out.append(("sampler", self.sampler))
        out += [(f"rewards[{i}]", r) for i, (r, _) in enumerate(self.rewards)]
        for b in self.benchmarks + ([self.validation] if self.validation is not None else []):
            out += [(b.loc, b.evaluator), (f"{b.loc}.reward", b.reward)]
        return out

    def raise_problems(self) -> None:
        """:raises SpecError: listing every problem, when there are any."""
        if self.problems:
            raise SpecError(self.problems, source=self.source)


#: The name component ``check`` methods were documented with.
SpecContext = ResolvedSpec


def _component(ctx: ResolvedSpec, kind: str, cspec: ComponentSpec, loc: str, family: str | None = None):
    """Build the ``kind`` component ``cspec`` names, its params validated with the model's family (``family``, else
    ``ctx.family``) as the validation context (``{"family": name}``, e.g. ``preset: official``); None (and a problem)
    on failure."""
    try:
        entry = ctx.registry.get(kind, cspec.name)
    except PluginError as exc:
        ctx.problems.append((f"{loc}.name", str(exc)))
        return None
    # the model family, for values that depend on it (``preset: official``, dare.components.official)
    family = family or (ctx.family.name if ctx.family is not None else None)
    context = {"family": family} if family is not None else None
    try:
        params = entry.cls.Params.model_validate(cspec.params, context=context)
    except ValidationError as exc:
        ctx.problems.extend(pydantic_problems(exc, entry.cls.Params, prefix=f"{loc}.params"))
        return None
    return entry.cls(params)


def _benchmark(ctx: ResolvedSpec, b: BenchmarkSpec, loc: str) -> ResolvedBenchmark | None:
    ev = _component(ctx, "evaluator", ComponentSpec(name=b.name, params=b.params), loc)
    if ev is None:
        return None
    if b.reward is not None:
        reward = _component(ctx, "reward", b.reward, f"{loc}.reward")
    else:
        reward = _component(ctx, "reward", ComponentSpec(name=ev.reward, params=dict(ev.reward_params)),
                            f"{loc}.reward")
    check_benchmark_data(ev, b, loc, ctx.problems)
    return None if reward is None else ResolvedBenchmark(loc, b, ev, reward)


def _hub_family(ctx: ResolvedSpec, algorithm: ComponentSpec) -> str | None:
    """The family of a hub ``model.path`` (from its config.json, the hub or its cache) when the algorithm says
    ``preset: official``, whose settings depend on it; None otherwise, or when the config cannot be read (then
    the release's main family's settings apply, which is logged)."""
    path = ctx.spec.model.path
    if ctx.family is not None or path is None or (algorithm.params or {}).get("preset") != "official":
        return None
    if looks_local(path):
        return None  # a local path: check_model decided (or reported) its family
    try:
        return family_of(path, ctx.registry).name
    except DareError as exc:
        log.warning("preset: official: the family of %s is unknown (%s); the release's main family's settings apply",
                    path, exc)
        return None


def resolve_spec(spec: RunSpec, source: str | None = None, config_only: bool = False,
                 command: str | None = None) -> ResolvedSpec:
    """Resolve every component of ``spec`` and run all semantic checks (problems collected, not raised).

    :param config_only: ``model.path`` is a model card without weights (:class:`ResolvedSpec`).
    :param command: ``run``/``train``/``eval``: check ``output.dir`` by that command's rules (:func:`check_output`).
    """
    ctx = ResolvedSpec(spec=spec, registry=get_registry(), source=source, config_only=config_only)
    problems = ctx.problems
    check_model(ctx, problems)
    check_lora(ctx, problems)
    check_gradient_checkpointing(ctx, problems)
    check_precision(ctx, problems)
    check_packing(ctx, problems)
    check_report_to(ctx, problems)
    if spec.algorithm is not None:
        ctx.objective = _component(ctx, "objective", spec.algorithm, "algorithm", _hub_family(ctx, spec.algorithm))
    if spec.sampler is not None:
        ctx.sampler = _component(ctx, "sampler", spec.sampler, "sampler")
    if ctx.objective is not None and ctx.sampler is not None:
        ctx.rollout_sampler, found = ctx.objective.resolve_rollout_sampler(ctx.sampler, "algorithm")
        problems.extend(found)
    for i, r in enumerate(spec.rewards):
        reward = _component(ctx, "reward", r, f"rewards[{i}]")
        if reward is not None:
            ctx.rewards.append((reward, r.weight))
    if spec.eval is not None:
        for i, b in enumerate(spec.eval.resolved):
            rb = _benchmark(ctx, b, f"eval.benchmarks[{i}]")
            if rb is not None:
                ctx.benchmarks.append(rb)
        v = spec.eval.validation
        if v is not None:
            ctx.validation = _benchmark(ctx, v, "eval.validation")
            if ctx.validation is not None:
                check_validation_rows(spec, ctx.validation.evaluator, v, problems)
        styles = [getattr(b.evaluator, "style", "generate")  # likelihood benchmarks need no sampler
                  for b in ctx.benchmarks + ([ctx.validation] if ctx.validation is not None else [])]
        if spec.sampler is None and (not styles or any(s != "loglikelihood" for s in styles)):
            problems.append(("sampler", "eval needs a sampler: section to generate answers"))
    if spec.data is not None:
        for split in ("train", "eval"):
            ds = getattr(spec.data, split)
            if ds is not None:
                check_dataset(ds, f"data.{split}", problems)
    check_output(spec, problems, command)
    check_keep_best(spec, problems)
    for loc, comp in ctx.components():  # component cross-checks, once everything structural passed
        try:
            problems.extend(comp.check(ctx, loc))
        except DareError as exc:
            problems.append((loc, str(exc)))
    return ctx


def resolve_generate(model_path: str, sampler: str | None, params: dict[str, Any]) -> ResolvedSpec:
    """What ``dare generate`` checks before loading weights: ``model.path``'s checks, then the sampler
    (default: the family's official decoder) with its params and its ``check`` against the model.

    :returns: a :class:`ResolvedSpec` with ``family`` and ``sampler`` set, or with ``problems`` (at
        ``model.path``, ``sampler.name``, ``sampler.params.<key>``, ``sampler``) when they do not resolve.
    """
    spec = RunSpec.model_construct(model=ModelSpec.model_construct(path=model_path),
                                   output=OutputSpec.model_construct(dir="."))
    ctx = ResolvedSpec(spec=spec, registry=get_registry())
    check_model(ctx, ctx.problems)
    if ctx.problems:
        return ctx
    if ctx.family is None:  # a hub id: its config.json decides the family
        ctx.family = family_of(model_path, ctx.registry)
    cspec = ComponentSpec(name=sampler or ctx.family.default_sampler, params=params)
    spec.sampler = cspec
    ctx.sampler = _component(ctx, "sampler", cspec, "sampler")
    if ctx.sampler is not None:
        try:
            ctx.problems.extend(ctx.sampler.check(ctx, "sampler"))
        except DareError as exc:
            ctx.problems.append(("sampler", str(exc)))
    return ctx
