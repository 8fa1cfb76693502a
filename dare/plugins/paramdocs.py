"""A component's ``params`` as a readable table: name, type (with bounds), default, description.

What ``dare plugins NAME`` and ``dare plugins --params`` print, from the component's ``Params`` JSON
Schema (pydantic), so the table always matches what the spec accepts; for objectives with an official
release, the ``official`` column per model family (:func:`official_by_family`, :mod:`dare.components.official`) and
the files each family's values come from (:func:`official_note`).
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["param_rows", "describe_type", "official_values", "official_by_family", "official_note"]

_BOUNDS = (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="), ("exclusiveMaximum", "<"))


def describe_type(prop: dict[str, Any], defs: dict[str, Any] | None = None) -> str:
    """A JSON Schema property as text: ``integer >= 2``, ``one of grpo, drgrpo, rloo``, ``number or 'sampler'``,
    ``list of string``, ``null`` ..."""
    if "$ref" in prop:
        return prop["$ref"].rsplit("/", 1)[-1]
    if "anyOf" in prop:
        parts = [describe_type(p, defs) for p in prop["anyOf"]]
        return " or ".join(dict.fromkeys(parts))
    if "enum" in prop:
        return "one of " + ", ".join(json.dumps(v) if not isinstance(v, str) else v for v in prop["enum"])
    if "const" in prop:
        return repr(prop["const"])
    kind = prop.get("type", "any")
    if kind == "array":
        text = f"list of {describe_type(prop.get('items', {}), defs)}"
    elif kind == "object":
        text = "mapping"
    else:
        text = kind
    bounds = [f"{op} {prop[key]}" for key, op in _BOUNDS if key in prop]
    return f"{text} {', '.join(bounds)}" if bounds else text


def param_rows(params_cls) -> list[tuple[str, str, str, str]]:
    """``(name, type, default, description)`` of every field of a component's ``Params`` model, in order.

    A required field's default is ``(required)``.
    """
    schema = params_cls.model_json_schema()
    defs = schema.get("$defs", {})
    fields = params_cls.model_fields
    rows = []
    for name, prop in schema.get("properties", {}).items():
        f = fields.get(name)
        if f is None or f.is_required():
            default = "(required)" if f is not None else json.dumps(prop.get("default"))
        else:
            default = json.dumps(f.get_default(call_default_factory=True), default=str)
        rows.append((name, describe_type(prop, defs), default, prop.get("description", "")))
    return rows


def official_values(params_cls) -> dict[str, str]:
    """``{param: official value as JSON text}`` of an objective's ``Params`` (``preset: official``,
    :class:`dare.components.official.OfficialParams`); empty for components without an official table.
    ``dare plugins NAME`` prints ``–`` for a parameter without an official value (docs/algorithms.md §10)."""
    table = getattr(params_cls, "official_values", None)
    if table is None:
        return {}
    return {name: json.dumps(value, default=str) for name, value in table().items()}


def official_by_family(params_cls) -> dict[str, dict[str, Any]]:
    """``{family: {"values": {param: value as JSON text}, "files": [source file, ...]}}`` of an objective's official
    table, one entry per family its release trains (key ``""`` for a table without families: any family); empty
    for components without an official table. ``files``: where the family's rows come from
    (:func:`dare.components.official.source_file`, first use first)."""
    from dare.components.official import source_file

    families = getattr(params_cls, "official_table_families", None)
    if families is None or not params_cls.official:
        return {}
    out = {}
    for fam in families():
        rows = params_cls.official_rows(fam or None)
        out[fam] = {"values": {s.param: json.dumps(s.value, default=str) for s in rows},
                    "files": list(dict.fromkeys(source_file(s.source) for s in rows))}
    return out


def official_note(params_cls) -> str:
    """One paragraph under ``dare plugins NAME``'s table: per family, the files its official values come from, and
    what ``preset: official`` does on a family the release did not train ("" without an official table)."""
    table = official_by_family(params_cls)
    if not table:
        return ""
    lines = [f"official ({fam or 'any family'}): from {', '.join(entry['files'])}" for fam, entry in table.items()]
    if getattr(params_cls, "official_families", ()):
        lines.append(f"the official table holds {', '.join(params_cls.official_families)} only: preset: official "
                     "refuses other model families")
    return "\n".join(lines)
