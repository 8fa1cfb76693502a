"""Pydantic validation errors as ``(yaml_path, message)`` problems.

:func:`pydantic_problems` turns a ``ValidationError`` into the pairs every DARE spec error is made of:
the YAML path (``algorithm.params.clip_eps``, ``eval.benchmarks[0].limit``), the message, the allowed
keys for an unknown key, and the offending value.
"""

from __future__ import annotations

import re
import types
import typing
from typing import Any, Union

from pydantic import BaseModel, ValidationError

__all__ = ["pydantic_problems", "loc_str", "mark_overrides"]


def loc_str(loc: tuple) -> str:
    """``("eval", "benchmarks", 0, "limit")`` -> ``"eval.benchmarks[0].limit"``."""
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
    """Turn a pydantic error into ``(yaml_path, message)`` pairs with allowed keys for unknown ones.

    :param root_cls: the model that was validated (to list allowed keys). :param prefix: YAML path of
        that model inside the spec (e.g. ``algorithm.params``).
    """
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
        path = loc_str(loc)
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


def mark_overrides(problems: list[tuple[str, str]], overrides: list[str],
                   unset: list[str] | None = None) -> list[tuple[str, str]]:
    """``problems`` with ``" (set by --set KEY=VALUE)"`` (or ``" (removed by --unset KEY)"``) added to each one whose
    YAML path is (inside, or holds) a key given on the command line, so it is not looked for in the file; an unknown
    key of the file (e.g. a param of the component a ``--set`` replaced) names the ``--unset`` that removes it."""

    def norm(key: str) -> str:
        return re.sub(r"\[(\w*)\]", r".\1", key.strip())

    sets = [(norm(ov.split("=", 1)[0]), f"set by --set {ov.strip()}") for ov in overrides if "=" in ov]
    sets += [(norm(key), f"removed by --unset {key.strip()}") for key in unset or []]
    out = []
    for loc, msg in problems:
        n = norm(loc)
        hit = [ov for key, ov in sets if n and (n == key or n.startswith(key + ".") or key.startswith(n + "."))]
        if hit and not loc.startswith(("--set", "--unset")):
            msg = f"{msg} ({hit[-1]})"
        elif msg.startswith("unknown key") and loc:  # e.g. a param the component set by --set does not have
            msg = f"{msg} (or remove it on the command line: --unset {loc})"
        out.append((loc, msg))
    return out
