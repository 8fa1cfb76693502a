"""Reading dataset rows from parquet, JSONL, packaged assets, local dataset folders or the hub.

A local folder is read through ``datasets``: a saved dataset (``Dataset.save_to_disk`` /
``DatasetDict.save_to_disk``: ``dataset_info.json``, ``state.json`` or ``dataset_dict.json`` inside) with
``datasets.load_from_disk``, a folder of ``.parquet``/``.jsonl``/``.json`` files with
``datasets.load_dataset(folder)`` (splits from the file names, e.g. ``train-*.parquet``; otherwise every
file is ``train``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from dare.errors import DataError
from dare.io import resolve_path

__all__ = ["load_rows", "lone_surrogate", "jsonl_surrogate_problem", "SCAN_LINES", "dataset_columns", "dataset_rows",
           "first_row", "sample_rows", "to_python", "SAMPLE_ROWS"]

#: rows ``dare validate`` reads (from ``offset``) to check example lengths and JSONL column types
SAMPLE_ROWS = 64

_SUFFIXES = (".parquet", ".jsonl", ".json")
_SAVED = ("dataset_info.json", "state.json", "dataset_dict.json")  # what save_to_disk writes


def _data_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.suffix in _SUFFIXES and p.is_file() and p.name not in _SAVED)


def _is_saved_dataset(folder: Path) -> bool:
    return any((folder / name).is_file() for name in _SAVED)


def _load_folder(path: str, folder: Path, split: str):
    """A ``datasets.Dataset`` of a local folder (module docstring).

    :raises DataError: neither a saved dataset nor data files, an unknown split, or an unreadable folder.
    """
    import datasets

    datasets.disable_progress_bars()  # DARE shows its own progress; no per-file bars
    try:
        if _is_saved_dataset(folder):
            ds = datasets.load_from_disk(str(folder))
        elif _data_files(folder):
            ds = datasets.load_dataset(str(folder))
        else:
            raise DataError(f"{path!r} is a folder with neither a saved dataset (dataset_info.json/state.json from "
                            "datasets' save_to_disk) nor .parquet/.jsonl files; give a data file or such a folder")
    except DataError:
        raise
    except Exception as exc:  # noqa: BLE001 - datasets raises many kinds
        raise DataError(f"could not read the dataset folder {path!r}: {type(exc).__name__}: {exc}") from None
    if isinstance(ds, datasets.DatasetDict):
        if split not in ds:
            raise DataError(f"{path!r} has no split {split!r}; its splits are: {', '.join(ds)} (set the dataset's "
                            f"split)")
        ds = ds[split]
    return ds


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


def dataset_columns(path: str, split: str = "train") -> list[str] | None:
    """Column names of a local parquet/JSONL file or dataset folder without reading it whole; None for hub ids.

    :raises DataError: missing file or unsupported format.
    """
    p = _local(path)
    if p is None:
        return None
    if p.is_dir():
        if _is_saved_dataset(p):
            return list(_load_folder(path, p, split).column_names)  # memory-mapped: nothing is read
        files = _data_files(p)
        if not files:
            _load_folder(path, p, split)  # raises the folder's error
        p = files[0]
    elif not p.is_file():
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


def first_row(path: str, split: str = "train", offset: int = 0) -> dict | None:
    """Row ``offset`` of a local dataset (a parquet file: only the row group holding it is read), or None
    (hub ids, past the end, unreadable: :func:`dataset_columns` reports those)."""
    p = _local(path)
    if p is None:
        return None
    try:
        if p.is_file() and p.suffix == ".parquet":
            import pyarrow.parquet as pq

            pf = pq.ParquetFile(p)
            for i in range(pf.num_row_groups):
                n = pf.metadata.row_group(i).num_rows
                if offset < n:
                    return to_python(pf.read_row_group(i).slice(offset, 1).to_pylist()[0])
                offset -= n
            return None
        rows = load_rows(path, limit=1, split=split, offset=offset)
    except Exception:  # noqa: BLE001
        return None
    return rows[0] if rows else None


def sample_rows(path: str, offset: int = 0, n: int = SAMPLE_ROWS) -> list[dict]:
    """Up to ``n`` rows from row ``offset`` of a local parquet (only the row groups holding them are read) or
    JSONL file; ``[]`` for other sources or unreadable files (the dataset check reports those)."""
    p = _local(path)
    if p is None or not p.is_file():
        return []
    try:
        if p.suffix == ".parquet":
            import pyarrow.parquet as pq

            pf = pq.ParquetFile(p)
            rows: list[dict] = []
            for i in range(pf.num_row_groups):
                m = pf.metadata.row_group(i).num_rows
                if offset >= m:
                    offset -= m
                    continue
                rows += [to_python(r) for r in pf.read_row_group(i).slice(offset, n - len(rows)).to_pylist()]
                offset = 0
                if len(rows) >= n:
                    break
            return rows
        return load_rows(path, limit=n, offset=offset)
    except Exception:  # noqa: BLE001
        return []


def lone_surrogate(value: Any, where: str = "") -> tuple[str, tuple[int, str]] | None:
    """The first string in a parsed JSON value that is not valid Unicode (it holds a lone UTF-16 surrogate,
    U+D800..U+DFFF, which JSON's ``\\uXXXX`` escapes can express): ``(key path, (character index, the
    surrogate))`` with the path as ``prompt[0].content``; None when every string is valid."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            return where or "(the row)", (exc.start, value[exc.start])
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            path = f"{where}.{key}" if where else str(key)
            found = lone_surrogate(key, path) or lone_surrogate(item, path)
            if found is not None:
                return found
    elif isinstance(value, list):
        for n, item in enumerate(value):
            if (found := lone_surrogate(item, f"{where}[{n}]")) is not None:
                return found
    return None


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
#: lines ``dare validate`` scans for lone surrogates when the dataset has no ``limit`` (loading checks every row)
SCAN_LINES = 100_000


def jsonl_surrogate_problem(path: str, at_most: int | None = SCAN_LINES) -> str | None:
    """The first of the first ``at_most`` lines of a local JSONL file whose parsed strings hold a lone UTF-16
    surrogate (:func:`lone_surrogate`), as the message :func:`load_rows` raises; None when there is none (or
    the file is not a local JSONL file, or cannot be read: the other checks report that). Only lines with a
    ``\\uD800``-``\\uDFFF`` escape are parsed."""
    p = _local(path)
    if p is None or not p.is_file() or p.suffix not in (".jsonl", ".json"):
        return None
    try:
        with p.open(encoding="utf-8") as f:
            for i, line in enumerate(f):
                if at_most is not None and i >= at_most:
                    break
                if not _SURROGATE_ESCAPE.search(line):
                    continue
                try:
                    bad = lone_surrogate(json.loads(line))
                except json.JSONDecodeError:
                    return None
                if bad is not None:
                    return _surrogate_message(path, i + 1, *bad)
    except (OSError, UnicodeDecodeError):
        return None
    return None


def _surrogate_message(path: str, line: int, where: str, at: tuple[int, str]) -> str:
    return (f"{path!r} line {line}, column {where!r}: the text holds a lone UTF-16 surrogate (\\u{ord(at[1]):04x} at "
            f"character {at[0]}), valid as a JSON escape but not Unicode text, which no tokenizer can encode; fix or "
            "remove that row (a surrogate pair such as \\ud83d\\ude00 is fine)")


def load_rows(
    path: str, limit: int | None = None, split: str = "train", columns: list[str] | None = None, offset: int = 0
) -> list[dict]:
    """Load rows as plain Python dicts: rows ``offset .. offset+limit-1`` of the file (all after ``offset``
    without ``limit``).

    :param path: parquet/JSONL path, ``dare://`` asset, local dataset folder (module docstring) or hub dataset id.
    :param split: the split of a hub dataset or of a local folder with several.
    :param limit: keep only the first ``limit`` rows after ``offset``.
    :param offset: skip this many rows first (``DatasetSpec.offset``, e.g. rows held out for validation).
    :param columns: columns that must exist.
    :raises DataError: missing file, unreadable file, or a missing column.
    """
    p = _local(path)
    if p is None or p.is_dir():
        if p is not None:
            ds = _load_folder(path, p, split)
        else:
            try:
                import datasets

                ds = datasets.load_dataset(path, split=split)
            except Exception as exc:  # noqa: BLE001
                raise DataError(f"could not load hub dataset {path!r} (split {split!r}): {exc}") from None
        stop = len(ds) if limit is None else min(offset + limit, len(ds))
        if offset or limit is not None:
            ds = ds.select(range(min(offset, len(ds)), stop))
        rows = [to_python(dict(r)) for r in ds]
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
                        row = json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise DataError(f"{path!r} line {i + 1} is not JSON: {exc}") from None
                    if "\\u" in line and (bad := lone_surrogate(row)) is not None:
                        raise DataError(_surrogate_message(path, i + 1, *bad))
                    rows.append(row)
        del cols
    for col in columns or []:
        if rows and col not in rows[0]:
            raise DataError(f"{path!r} has no column {col!r}; its columns are: {', '.join(rows[0])}")
    if not rows:
        raise DataError(f"{path!r} has no rows" + (f" after the first {offset} (offset)" if offset else ""))
    return rows
