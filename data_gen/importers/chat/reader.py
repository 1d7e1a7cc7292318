"""Reading conversation rows from JSON, JSON Lines, Parquet or a saved ``datasets`` dataset.

Every row is located for error messages by a number: its line for JSON Lines (1-based, blank lines counted), its
row number (1-based, so that 0 keeps meaning "the whole file", as in ``clocktune.timeline.io.Issue``) for a JSON
array, a Parquet file and a dataset saved with ``Dataset.save_to_disk`` (a saved ``DatasetDict`` reads every split,
each located as ``DIR[split]``).

Arrow (Parquet, ``datasets``) stores a list of objects as one struct type with the union of their keys, so an
object read back has ``None`` under every key some other row had: rows from Arrow sources have ``None``-valued keys
dropped again, which gives the rows JSON Lines would, equal as data (Arrow may list an object's keys in another
order, e.g. a schema's properties). A JSON ``null`` argument in an Arrow source is therefore lost; store arguments
as JSON strings, as TRL datasets do, to keep it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clocktune.timeline.bounded_json import loads_bounded
from clocktune.timeline.io import Issue

__all__ = ["Row", "fingerprint", "read_rows"]


@dataclass
class Row:
    """One conversation as read, or why it could not be read.

    Args:
        path: Where it comes from (file, or ``DIR[split]``), for error messages.
        line: Its line or row number (see the module docstring).
        index: Its position among all rows read (0-based), which seeds its dialogue.
        record: The row, or ``None`` when it is not a JSON object.
        issue: Why it could not be read, when ``record`` is ``None``.
    """

    path: str
    line: int
    index: int
    record: dict[str, Any] | None
    issue: Issue | None = None


def _drop_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _drop_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [_drop_nulls(item) for item in value]
    return value


def _jsonl(path: Path) -> Iterator[tuple[int, Any, Issue | None]]:
    with open(path, encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                yield line_no, loads_bounded(line), None
            except ValueError as error:  # json.JSONDecodeError included: a truncated line
                message = getattr(error, "msg", None) or str(error)
                yield line_no, None, Issue(str(path), line_no, "-", f"not valid JSON ({message})")


def _json(path: Path) -> Iterator[tuple[int, Any, Issue | None]]:
    text = path.read_text(encoding="utf-8")
    try:
        value = loads_bounded(text)
    except ValueError:
        yield from _jsonl(path)  # JSON Lines named .json, or a bad line in one: its line numbers say where
        return
    rows = value if isinstance(value, list) else [value]
    for number, row in enumerate(rows, start=1):
        yield number, row, None


def _arrow_rows(rows: list[Any]) -> Iterator[tuple[int, Any, Issue | None]]:
    for number, row in enumerate(rows, start=1):
        yield number, _drop_nulls(row), None


def _sources(path: Path) -> Iterator[tuple[str, Iterator[tuple[int, Any, Issue | None]]]]:
    if path.is_dir():
        if (
            (path / "dataset_dict.json").is_file()
            or (path / "dataset_info.json").is_file()
            or (path / "state.json").is_file()
        ):
            import datasets  # only a saved dataset needs it

            loaded = datasets.load_from_disk(str(path))
            if isinstance(loaded, datasets.DatasetDict):
                for split, dataset in loaded.items():
                    yield f"{path}[{split}]", _arrow_rows(dataset.to_list())
            else:
                yield str(path), _arrow_rows(loaded.to_list())
            return
        files = sorted(p for p in path.rglob("*") if p.suffix in (".jsonl", ".json", ".parquet") and p.is_file())
        if not files:
            raise ValueError(f"{path}: neither a saved dataset nor a folder with .jsonl/.json/.parquet files")
        for file in files:
            yield from _sources(file)
        return
    if not path.is_file():
        raise ValueError(f"{path}: no such file or folder")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        yield str(path), _arrow_rows(pq.read_table(path).to_pylist())
    elif path.suffix == ".json":
        yield str(path), _json(path)
    else:
        yield str(path), _jsonl(path)


def read_rows(source: str | os.PathLike, limit: int | None = None) -> list[Row]:
    """Reads every conversation row of a file or folder.

    Args:
        source: A ``.jsonl``/``.json``/``.parquet`` file, a folder saved by ``datasets`` (``save_to_disk``), or a
            folder of such files (read in name order).
        limit: Read only the first ``limit`` rows.

    Returns:
        The rows in order; unreadable ones carry their issue.

    Raises:
        ValueError: For a path that does not exist or holds nothing to read.
        OSError: For a file that cannot be read.
    """
    rows: list[Row] = []
    for where, items in _sources(Path(source)):
        for line, record, issue in items:
            if limit is not None and len(rows) >= limit:
                return rows
            if issue is None and not isinstance(record, dict):
                issue = Issue(where, line, "-", f"expected a JSON object, got {type(record).__name__}")
            rows.append(Row(where, line, len(rows), record if issue is None else None, issue))
    return rows


def fingerprint(source: str | os.PathLike) -> str:
    """A SHA-256 over the bytes of every file of a source (for the settings stamp: other input, other output).

    Args:
        source: As for :func:`read_rows`.

    Returns:
        The hex digest.
    """
    path = Path(source)
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    digest = hashlib.sha256()
    for file in files:
        digest.update(json.dumps(str(file.relative_to(path)) if path.is_dir() else file.name).encode())
        with open(file, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()
