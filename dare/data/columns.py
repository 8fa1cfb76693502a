"""Column types a dataset's rows must have where DARE reads a column itself.

Without a ``prompt_template`` the ``prompt`` column must be a string or a list of chat messages
(``{role, content}`` with string values); without a ``response_template`` the response column
(``response``/``completion``/``answer``) must be a string. (Template fields may have any type: Jinja renders
them.) :func:`column_type_problems` reads a parquet file's schema (every row has its type) or checks
sampled rows of a JSONL file; :func:`value_type_problem` checks one value as rows are loaded.
"""

from __future__ import annotations

from typing import Any

from dare.data.rows import _local

__all__ = ["value_type_problem", "column_type_problems"]


def _type_name(value: Any) -> str:
    if isinstance(value, list):
        inner = sorted({_type_name(v) for v in value[:8]})
        return f"list of {'/'.join(inner)}" if inner else "empty list"
    return {"str": "string", "int": "integer", "float": "float", "bool": "boolean", "dict": "mapping",
            "NoneType": "null"}.get(type(value).__name__, type(value).__name__)


def _a(noun: str) -> str:
    return f"an {noun}" if noun[:1] in "aeiou" else f"a {noun}"


def _is_messages(value: Any) -> bool:
    return (isinstance(value, list) and bool(value)
            and all(isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                    for m in value))


def value_type_problem(column: str, value: Any) -> str | None:
    """Why ``value`` cannot be column ``column`` (``prompt``: string or chat messages; a response column:
    string), or None."""
    if isinstance(value, str):
        return None
    if column == "prompt":
        if _is_messages(value):
            return None
        return (f"column 'prompt' holds {_a(_type_name(value))}, expected a string or a list of chat messages "
                "({role, content} with string values)")
    return f"column {column!r} holds {_a(_type_name(value))}, expected a string"


def _arrow_type_problem(column: str, typ) -> str | None:
    import pyarrow as pa

    if pa.types.is_string(typ) or pa.types.is_large_string(typ) or pa.types.is_null(typ):
        return None
    if column == "prompt" and (pa.types.is_list(typ) or pa.types.is_large_list(typ)):
        item = typ.value_type
        if pa.types.is_struct(item):
            fields = {item.field(i).name: item.field(i).type for i in range(item.num_fields)}
            if all(k in fields and (pa.types.is_string(fields[k]) or pa.types.is_large_string(fields[k]))
                   for k in ("role", "content")):
                return None
    expected = "a string or a list of chat messages ({role, content} strings)" if column == "prompt" else "a string"
    return f"column {column!r} has type {typ}, expected {expected}"


def column_type_problems(path: str, columns: list[str], rows: list[dict] | None = None) -> list[tuple[str, str]]:
    """``(column, message)`` for each of ``columns`` whose type is wrong (module docstring): from a parquet
    file's schema, then (a column the schema allows, e.g. a string column holding a null) from ``rows`` (a sample;
    the message then names the row)."""
    p = _local(path)
    out: list[tuple[str, str]] = []
    if p is not None and p.is_file() and p.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            schema = pq.read_schema(p)
        except Exception:  # noqa: BLE001 - reported by the dataset check
            return out
        for col in columns:
            if col in schema.names and (why := _arrow_type_problem(col, schema.field(col).type)) is not None:
                out.append((col, f"{path}: {why}"))
    for col in (c for c in columns if c not in {c for c, _ in out}):
        for i, row in enumerate(rows or []):
            if col in row and (why := value_type_problem(col, row[col])) is not None:
                out.append((col, f"{path} (sampled row {i}): {why}"))
                break
    return out
