"""One JSON Schema of the run spec with every installed component's parameters (``dare schema``)."""

from __future__ import annotations

from typing import Any, Literal, Union

from pydantic import BaseModel, Field, create_model

from dare.plugins.manager import get_registry
from dare.runspec.models import BenchmarkSpec, ComponentSpec, EvalSpec, ModelSpec, NewModelSpec, RewardSpec, RunSpec

__all__ = ["json_schema"]


def json_schema(registry=None) -> dict[str, Any]:
    """One JSON Schema of the run spec, with every installed component's params.

    ``algorithm``/``sampler``/``rewards[]``/``model.new.family``/``eval.benchmarks`` become unions
    discriminated by ``name`` over the installed components.
    """
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
