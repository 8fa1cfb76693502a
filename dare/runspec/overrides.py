"""Reading a spec file and applying command-line overrides (``--set key=value``, ``--unset key``).

:func:`read_spec_file` returns the raw mapping of a YAML spec with every override applied; values are
parsed as YAML (:func:`parse_override_value`), list items are addressed by index
(``eval.benchmarks.0.limit`` or ``eval.benchmarks[0].limit``). ``--unset key`` removes a key (or a list
item) after every ``--set``, so the component's default applies again, e.g. ``--set algorithm.name=d1
--unset algorithm.params.shrink --unset algorithm.params.transition_grouping --unset algorithm.params.normaliser``
when switching examples/quickstart-rl.yaml from TraceRL, which has those params, to d1, which has not.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from dare.errors import SpecError
from dare.run.rundir import is_run_record
from dare.runspec.yamlload import NotYAMLError, load_yaml

__all__ = ["read_spec_file", "apply_override", "apply_unset", "parse_override_value"]


def read_spec_file(path: str | os.PathLike, overrides: list[str] | None = None,
                   unset: list[str] | None = None) -> dict[str, Any]:
    """The YAML mapping of the spec file at ``path`` with ``overrides`` (``dotted.key=value``) applied, then the
    keys ``unset`` (dotted) removed (:func:`apply_unset`).

    A run directory's ``run.json`` (:func:`dare.run.rundir.run_record`, written by ``dare run``) is read as the
    spec it holds, so ``dare eval runs/x/run.json`` evaluates that run as it was specified.

    :raises SpecError: the file is missing, not YAML, not a mapping, breaks a limit of
        :func:`dare.runspec.yamlload.load_yaml` (alias expansion, value size, duplicate key), is not UTF-8, or an
        override is malformed.
    """
    path = Path(path)
    if not path.is_file():
        raise SpecError([("", f"spec file {str(path)!r} does not exist")])
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError([("", f"spec file {str(path)!r} is not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset "
                              f"{exc.start}); save it as UTF-8")]) from None
    raw = load_yaml(text, source=str(path))
    if not isinstance(raw, dict):
        raise SpecError([("", "the spec must be a mapping with sections model, data, algorithm, ...")],
                        source=str(path))
    if is_run_record(raw):
        raw = raw["spec"]
    for ov in overrides or []:
        apply_override(raw, ov)
    for key in unset or []:
        apply_unset(raw, key)
    return raw


def parse_override_value(value: str, where: str = "") -> Any:
    """A ``--set``/``--param`` value: YAML, or the literal string when it is not valid YAML or reads as a
    mapping from a Jinja ``{{ ... }}`` (e.g. ``prompt_template={{ extra_info.x }}``).

    :raises SpecError: the value breaks a limit of :func:`dare.runspec.yamlload.load_yaml` (``where`` named)."""
    try:
        parsed = load_yaml(value, where=where)
    except NotYAMLError:
        return value
    if isinstance(parsed, dict) and "{{" in value:
        return value
    return parsed


def _parts(key: str, where: str) -> list[str]:
    parts = re.sub(r"\[(\w*)\]", r".\1", key).split(".")
    if any(not p for p in parts):
        raise SpecError([(where, "empty path segment; write e.g. eval.benchmarks.0.limit=8 or "
                                 "eval.benchmarks[0].limit=8")])
    return parts


def apply_unset(raw: dict, key: str) -> None:
    """Remove ``dotted.key`` from ``raw`` (a list item by index: ``eval.benchmarks.1``).

    :raises SpecError: naming the ``--unset`` key when it is not in the spec (a typo is not ignored), with the
        keys that are there.
    """
    key = key.strip()
    where = f"--unset {key}"
    parts = _parts(key, where)
    cur: Any = raw
    for i, p in enumerate(parts):
        done = ".".join(parts[:i]) or "the spec"
        if isinstance(cur, list) and p.isdigit() and int(p) < len(cur):
            p = int(p)
        elif not isinstance(cur, dict) or p not in cur:
            have = (f"it has {', '.join(map(str, cur))}" if isinstance(cur, dict) and cur else
                    f"it has {len(cur)} item(s)" if isinstance(cur, list) else "it is not a mapping or list")
            raise SpecError([(where, f"{done} has no {p!r} to remove ({have}); nothing was changed")])
        if i == len(parts) - 1:
            del cur[p]
            return
        cur = cur[p]


def apply_override(raw: dict, override: str) -> None:
    """Set ``dotted.key=value`` in ``raw``; list items by index (``eval.benchmarks.0.limit`` or ``[0]``).

    :raises SpecError: naming the ``--set`` key: no ``=``, an empty segment, an index out of range, or a
        path through a scalar.
    """
    if "=" not in override:
        raise SpecError([("", f"override {override!r} must look like section.key=value")])
    key, value = override.split("=", 1)
    key = key.strip()
    where = f"--set {key}"
    parts = _parts(key, where)
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
                cur[idx] = parse_override_value(value, where)
                return
            if isinstance(cur[idx], str) and done.endswith("benchmarks"):
                cur[idx] = {"name": cur[idx]}  # a benchmark given by name: expand to its mapping
            cur = cur[idx]
        elif isinstance(cur, dict):
            if last:
                cur[p] = parse_override_value(value, where)
                return
            if cur.get(p) is None:
                cur[p] = [] if parts[i + 1].isdigit() else {}
            cur = cur[p]
        else:
            raise SpecError([(where, f"cannot override inside {done}, which is {cur!r}, not a mapping or list")])
