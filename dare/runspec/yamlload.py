"""The one YAML loader for run specs and ``--set`` values, with limits against crafted input.

PyYAML's safe loader builds a YAML alias (``*name``) as a reference to the anchored object, so a
"billion laughs" document (nine levels of ten aliases each) loads in milliseconds but expands to 10^9
values as soon as anything walks it (validation, ``copy.deepcopy``, writing ``run.json``): the process
grows by gigabytes and never answers. :func:`load_yaml` refuses such input before any of that:

* **aliases**: the document's *expanded* size (every alias counted as a copy of what it names) may be at
  most :data:`MAX_EXPANDED_VALUES` values and :data:`MAX_EXPANDED_CHARS` characters of strings; a
  recursive alias (an anchor used inside itself) is refused;
* **value size**: no single string (a key or a value) may exceed :data:`MAX_STRING_CHARS` characters
  (64 KiB); the error names its YAML path;
* **depth**: mappings and lists nested at most :data:`MAX_DEPTH` levels deep;
* **duplicate keys**: a key given twice in one mapping (two ``train:`` blocks) is an error naming the key
  and both line numbers; YAML merge keys (``<<: *base``) still override as YAML specifies.

Every refusal is a :class:`dare.errors.SpecError`. The limits are stated in docs/run-spec.md.
"""

from __future__ import annotations

from typing import Any

import yaml

from dare.errors import SpecError

__all__ = ["load_yaml", "NotYAMLError", "MAX_STRING_CHARS", "MAX_DEPTH", "MAX_EXPANDED_VALUES", "MAX_EXPANDED_CHARS"]

#: Longest string (key or value) a spec may hold, in characters.
MAX_STRING_CHARS = 64 * 1024
#: Most values (mappings, lists and scalars) a spec may expand to, aliases counted as copies.
MAX_EXPANDED_VALUES = 100_000
#: Deepest nesting of mappings and lists (libyaml refuses 1000; the checks here recurse)
MAX_DEPTH = 200
#: Most string characters a spec may expand to, aliases counted as copies.
MAX_EXPANDED_CHARS = 4 * 1024 * 1024

_Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: 50x faster on a large file
_MERGE_TAG = "tag:yaml.org,2002:merge"


class NotYAMLError(SpecError):
    """The text is not valid YAML (``--set`` then takes a value as a literal string)."""


class _Refused(Exception):
    """A limit was hit; ``where`` is the YAML path, ``message`` the reason."""

    def __init__(self, where: str, message: str):
        super().__init__(message)
        self.where, self.message = where, message


class _SpecLoader(_Base):  # type: ignore[misc, valid-type]
    """Safe loader that checks the composed node graph before constructing and refuses duplicate keys."""

    def get_single_node(self):
        node = super().get_single_node()
        if node is not None:
            _check_strings(node)  # first: one long string is named by its path
            _check_expansion(node)
        return node


def _line(node) -> str:
    return f"line {node.start_mark.line + 1}"


def _check_expansion(root) -> None:
    """Refuse a node graph whose expansion exceeds the limits or that contains itself (recursive alias)."""
    sizes: dict[int, tuple[int, int]] = {}
    active: set[int] = set()

    def size(node) -> tuple[int, int]:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise _Refused("", f"a recursive YAML alias ({_line(node)}): an anchor is used inside itself, "
                               "which expands without end; write the value out instead")
        if isinstance(node, yaml.ScalarNode):
            result = (1, len(node.value))
        else:
            active.add(key)
            children = [c for pair in node.value for c in pair] if isinstance(node, yaml.MappingNode) else node.value
            values, chars = 1, 0
            for child in children:
                v, c = size(child)
                values, chars = values + v, chars + c
                if values > MAX_EXPANDED_VALUES or chars > MAX_EXPANDED_CHARS:
                    raise _Refused("", f"YAML aliases (*name) expand the spec past {MAX_EXPANDED_VALUES} values or "
                                       f"{MAX_EXPANDED_CHARS // (1024 * 1024)} MiB of text (the value at "
                                       f"{_line(node)}); a run spec needs far less: write the values out or use "
                                       "fewer aliases")
            active.discard(key)
            result = (values, chars)
        sizes[key] = result
        return result

    size(root)


def _check_strings(root) -> None:
    """Refuse a string (key or value) longer than :data:`MAX_STRING_CHARS`, naming its YAML path."""
    seen: set[int] = set()
    stack: list[tuple[Any, str]] = [(root, "")]
    while stack:
        node, path = stack.pop()
        if path.count(".") >= MAX_DEPTH:
            raise _Refused(path[:80] + "...", f"values nested more than {MAX_DEPTH} levels deep ({_line(node)}); "
                                               "a run spec needs a few")
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.ScalarNode):
            if len(node.value) > MAX_STRING_CHARS:
                raise _Refused(path or "<root>", f"a value of {len(node.value)} characters ({_line(node)}); a spec "
                                                 f"value may hold at most {MAX_STRING_CHARS} (64 KiB): put long text "
                                                 "in a data file or a template file instead")
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((c, f"{path}.{i}" if path else str(i)) for i, c in enumerate(node.value))
        elif isinstance(node, yaml.MappingNode):
            lines: dict[tuple[str, str], int] = {}
            for k, v in node.value:
                name = k.value[:40] if isinstance(k, yaml.ScalarNode) else "?"
                if isinstance(k, yaml.ScalarNode) and k.tag != _MERGE_TAG:
                    first = lines.get((k.tag, k.value))
                    lines.setdefault((k.tag, k.value), k.start_mark.line + 1)
                    if first is not None:
                        raise _Refused(f"{path}.{name}" if path else name,
                                       f"the key {name!r} is given twice in one mapping (lines {first} and "
                                       f"{k.start_mark.line + 1}); YAML would keep only the second and silently drop "
                                       f"the first: merge them into one {name!r} entry")
                if isinstance(k, yaml.ScalarNode) and len(k.value) > MAX_STRING_CHARS:
                    stack.append((k, f"{path}.<key>" if path else "<key>"))
                stack.append((v, f"{path}.{name}" if path else name))


def load_yaml(text: str, source: str | None = None, where: str = "") -> Any:
    """The value of the YAML document ``text``, loaded safely and within the limits above.

    :param source: the file shown in errors (``SpecError.source``).
    :param where: the YAML path prefixed to a refused value's path (e.g. ``--set train.seed``).
    :raises NotYAMLError: the text is not YAML (line and column named).
    :raises SpecError: a limit is exceeded (the YAML path
        named), or a key is duplicated (the key and both lines named).
    """
    try:
        return yaml.load(text, Loader=_SpecLoader)  # noqa: S506 - a SafeLoader subclass
    except _Refused as exc:
        loc = ".".join(p for p in (where, exc.where) if p)
        raise SpecError([(loc, exc.message)], source=source) from None
    except RecursionError:
        raise SpecError([(where, f"values nested more than {MAX_DEPTH} levels deep; a run spec needs a few")],
                        source=source) from None
    except yaml.YAMLError as exc:
        raise NotYAMLError([(where, f"not valid YAML: {yaml_error_line(exc)}")], source=source) from None


def yaml_error_line(exc: yaml.YAMLError) -> str:
    """One line for a YAML error: where (line, column, 1-based) and what pyyaml says, without its excerpt."""
    mark = getattr(exc, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    what = " ".join(str(p) for p in (getattr(exc, "context", None), getattr(exc, "problem", None)) if p)
    return where + (what or str(exc).splitlines()[0])
