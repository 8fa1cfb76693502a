"""The declarative run spec (YAML) and its validation.

A spec has the sections ``model / data / algorithm / sampler / rewards / train / eval / output``
(docs/run-spec.md). Validation runs before any weights are loaded, in two passes:

1. structure: :class:`RunSpec` (pydantic, ``extra="forbid"`` everywhere; :mod:`dare.runspec.models`);
2. components and semantics (:mod:`dare.runspec.resolve`, :mod:`dare.runspec.checks`): each ``name`` is
   resolved in the plugin registry and its ``params`` validated against that component's own
   ``Params`` model; then cross-field checks (files exist and have the needed columns, the model
   directory has a ``config.json`` an installed family loads, the tokenizer has a mask token, the
   sampler fits the family, the output directory does not hold a different run).

Every problem is reported as ``yaml.path: message`` (:mod:`dare.runspec.problems`); :func:`load_spec`
raises one :class:`~dare.errors.SpecError` listing all of them. The package's modules: ``models``
(structure), ``problems`` (pydantic errors as YAML paths), ``overrides`` (``--set``), ``checks``
(semantic checks), ``resolve`` (the typed :class:`ResolvedSpec`), ``schema`` (JSON Schema).
"""

from __future__ import annotations

import os

from pydantic import ValidationError

from dare.errors import SpecError
from dare.io import resolve_path
from dare.runspec.models import (
    BenchmarkSpec,
    ComponentSpec,
    DataSpec,
    DatasetSpec,
    EvalSpec,
    LoraSpec,
    ModelSpec,
    NewModelSpec,
    OutputSpec,
    RewardSpec,
    RunSpec,
    TrainSpec,
    spec_hash,
)
from dare.runspec.overrides import parse_override_value, read_spec_file
from dare.runspec.problems import mark_overrides, pydantic_problems
from dare.runspec.resolve import ResolvedBenchmark, ResolvedSpec, SpecContext, resolve_generate, resolve_spec
from dare.runspec.schema import json_schema

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
    "ResolvedSpec",
    "ResolvedBenchmark",
    "SpecContext",
    "load_spec",
    "validate_spec",
    "resolve_spec",
    "resolve_generate",
    "spec_hash",
    "json_schema",
    "parse_override_value",
    "pydantic_problems",
    "resolve_path",
]


def structure(raw: dict, source: str | None = None) -> RunSpec:
    """First pass: ``raw`` validated against :class:`RunSpec`.

    :raises SpecError: listing every structural problem with its YAML path.
    """
    try:
        return RunSpec.model_validate(raw)
    except ValidationError as exc:
        raise SpecError(pydantic_problems(exc, RunSpec), source=source) from None


def validate_spec(raw: dict | RunSpec, source: str | None = None, check: bool = True,
                  config_only: bool = False, command: str | None = None) -> RunSpec:
    """Validate a spec mapping (both passes, the second only with ``check``). Returns the :class:`RunSpec`.

    :param config_only: ``model.path`` is a model card without weights (config and weight index only).
    :param command: the command the spec is validated for (``run``, ``train``, ``eval``): the output directory is
        checked by that command's rules (:func:`dare.runspec.checks.check_output`); None accepts a directory that suits
        either a training or an evaluation-only command.
    :raises SpecError: listing every problem with its YAML path.
    """
    if isinstance(raw, RunSpec):
        spec = raw
    else:
        try:
            spec = structure(raw, source)
        except SpecError as exc:
            if check:  # every problem of every stage: the semantic checks of the sections that did parse too
                exc.problems += _checks_of_parsed_sections(raw, exc.problems, source, config_only, command)
                raise SpecError(exc.problems, source=source) from None
            raise
    if check:
        resolve_spec(spec, source, config_only=config_only, command=command).raise_problems()
    return spec


def load_spec(path: str | os.PathLike, overrides: list[str] | None = None, check: bool = True,
              unset: list[str] | None = None, config_only: bool = False, command: str | None = None) -> RunSpec:
    """Read a YAML run spec, apply ``overrides`` (``dotted.key=value``, value parsed as YAML), remove the keys
    ``unset`` (``--unset``), validate it structurally and (with ``check``) semantically (``config_only``:
    :func:`validate_spec`).

    :raises SpecError: listing every problem with its YAML path.
    """
    try:
        return validate_spec(read_spec_file(path, overrides, unset), source=str(path), check=check,
                             config_only=config_only, command=command)
    except SpecError as exc:
        if not overrides and not unset:
            raise
        raise SpecError(mark_overrides(exc.problems, overrides or [], unset), source=exc.source) from None


def _top_section(loc: str) -> str:
    return loc.split(".", 1)[0].split("[", 1)[0].strip()


def _checks_of_parsed_sections(raw: dict, problems: list[tuple[str, str]], source: str | None, config_only: bool,
                               command: str | None) -> list[tuple[str, str]]:
    """The semantic problems (second pass) of the sections of ``raw`` that passed the structural pass, found on
    the spec without the sections that failed; none when a required section (``model``, ``output``) or the
    spec's top level failed. Only problems located in a parsed section are kept (a check about a removed
    section would be a consequence of the structural problem already reported)."""
    failed = {_top_section(loc) for loc, _ in problems}
    if not isinstance(raw, dict) or "" in failed or failed & {"model", "output"}:
        return []
    try:
        spec = RunSpec.model_validate({k: v for k, v in raw.items() if k not in failed})
        found = resolve_spec(spec, source, config_only=config_only, command=command).problems
    except (ValidationError, SpecError):
        return []
    return [(loc, msg) for loc, msg in found if _top_section(loc) not in failed and (loc, msg) not in problems]
