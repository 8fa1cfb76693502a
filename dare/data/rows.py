"""Reading dataset rows from parquet, JSONL, packaged assets or the hub."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dare.errors import DataError
from dare.io import resolve_path

__all__ = ["load_rows", "dataset_columns", "dataset_rows", "to_python"]

_SUFFIXES = (".parquet", ".jsonl", ".json")


def _local(path: str) -> Path | None:
    p = resolve_path(path)
    if p.suffix in _SUFFIXES or p.exists() or path.startswith(("dare://", ".", "/", "~")):
        return p
    return None  # looks like a hub id


def to_python(value: Any) -> Any:
    """Convert numpy arrays/scalars inside a row (as pandas returns them) to lists and Python scalars."""
    if isinstance(value, dict):
        return {k: to_python(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_python(v) for v in value]
    tolist = getattr(value, "tolist", None)
    if tolist is not None:
        return to_python(tolist())
    return value


def dataset_columns(path: str) -> list[str] | None:
    """Column names of a local parquet/JSONL file without reading it whole; None for hub ids.

    :raises DataError: missing file or unsupported format.
    """
    p = _local(path)
    if p is None:
        return None
    if not p.is_file():
        raise DataError(f"dataset file {path!r} does not exist")
    if p.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            return list(pq.read_schema(p).names)
        except Exception as exc:  # noqa: BLE001
            raise DataError(f"{path!r} is not a readable parquet file: {exc}") from None
    if p.suffix in (".jsonl", ".json"):
        try:
            with p.open(encoding="utf-8") as f:
                line = next((ln for ln in f if ln.strip()), None)
        except (OSError, UnicodeDecodeError) as exc:
            raise DataError(f"{path!r} is not a readable UTF-8 JSONL file: {exc}") from None
        if line is None:
            raise DataError(f"{path!r} is empty: it has no rows (a JSONL file holds one JSON object per line)")
        try:
            first = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path!r}: first line is not JSON: {exc}") from None
        if not isinstance(first, dict):
            raise DataError(f"{path!r}: each line must be a JSON object")
        return list(first)
    raise DataError(f"{path!r}: unsupported file type {p.suffix!r}; use .parquet or .jsonl")


def dataset_rows(path: str, at_most: int | None = None) -> int | None:
    """Number of rows of a local parquet file (from its footer) or JSONL file (non-blank lines, counted up to
    ``at_most``: a bound keeps validation of a large file cheap); None for hub ids and files that cannot be
    read (:func:`dataset_columns` reports those)."""
    p = _local(path)
    if p is None or not p.is_file():
        return None
    try:
        if p.suffix == ".parquet":
            import pyarrow.parquet as pq

            return pq.ParquetFile(p).metadata.num_rows
        if p.suffix in (".jsonl", ".json"):
            n = 0
            with p.open(encoding="utf-8") as f:
                for line in f:
                    n += bool(line.strip())
                    if at_most is not None and n >= at_most:
                        break
            return n
    except Exception:  # noqa: BLE001 - unreadable files are reported by dataset_columns
        return None
    return None


def load_rows(
    path: str, limit: int | None = None, split: str = "train", columns: list[str] | None = None, offset: int = 0
) -> list[dict]:
    """Load rows as plain Python dicts: rows ``offset .. offset+limit-1`` of the file (all after ``offset``
    without ``limit``).

    :param path: parquet/JSONL path, ``dare://`` asset or hub dataset id.
    :param limit: keep only the first ``limit`` rows after ``offset``.
    :param offset: skip this many rows first (``DatasetSpec.offset``, e.g. rows held out for validation).
    :param columns: columns that must exist.
    :raises DataError: missing file, unreadable file, or a missing column.
    """
    p = _local(path)
    if p is None:
        try:
            import datasets

            ds = datasets.load_dataset(path, split=split)
        except Exception as exc:  # noqa: BLE001
            raise DataError(f"could not load hub dataset {path!r} (split {split!r}): {exc}") from None
        stop = len(ds) if limit is None else min(offset + limit, len(ds))
        if offset or limit is not None:
            ds = ds.select(range(min(offset, len(ds)), stop))
        rows = [dict(r) for r in ds]
    else:
        cols = dataset_columns(path)
        if p.suffix == ".parquet":
            import pyarrow.parquet as pq

            table = pq.read_table(p)
            if offset or limit is not None:
                table = table.slice(offset, limit)
            rows = [to_python(r) for r in table.to_pylist()]
        else:
            rows = []
            with p.open() as f:
                seen = 0
                for i, line in enumerate(f):
                    if limit is not None and len(rows) >= limit:
                        break
                    line = line.strip()
                    if not line:
                        continue
                    seen += 1
                    if seen <= offset:
                        continue
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError as exc:
                        raise DataError(f"{path!r} line {i + 1} is not JSON: {exc}") from None
        del cols
    for col in columns or []:
        if rows and col not in rows[0]:
            raise DataError(f"{path!r} has no column {col!r}; its columns are: {', '.join(rows[0])}")
    if not rows:
        raise DataError(f"{path!r} has no rows" + (f" after the first {offset} (offset)" if offset else ""))
    return rows
