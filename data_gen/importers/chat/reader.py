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

**Limits.** A source file must be a regular file (a FIFO, a device such as ``/dev/zero`` or a socket is refused
before anything is read from it; ``clocktune.data_files``). JSON Lines are streamed, each line at most
:data:`MAX_LINE_BYTES` (a longer one is reported and skipped); a ``.json`` file is parsed whole only up to
:data:`MAX_JSON_BYTES`, and read as JSON Lines past it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from clocktune.data_files import open_data_file
from clocktune.timeline.bounded_json import MAX_CHARS, loads_bounded
from clocktune.timeline.io import Issue

__all__ = ["MAX_JSON_BYTES", "MAX_LINE_BYTES", "Row", "fingerprint", "read_rows"]

MAX_LINE_BYTES = 4 * MAX_CHARS
"""The longest JSON Lines line read (64 MiB): the most that ``bounded_json.MAX_CHARS`` (16 Mi) characters of UTF-8
take, so the parser's own limit, in characters, is the one a line meets first."""

MAX_JSON_BYTES = MAX_CHARS
"""The largest ``.json`` file parsed as one JSON value (16 MiB, within ``bounded_json.MAX_CHARS``); a larger one is
streamed as JSON Lines, as a ``.json`` file that does not parse whole already is."""


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


def _lines(handle: BinaryIO) -> Iterator[bytes | None]:
    # Each line, or None for one longer than MAX_LINE_BYTES (read past in blocks, never held whole).
    while line := handle.readline(MAX_LINE_BYTES + 1):
        if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
            while line and not line.endswith(b"\n"):
                line = handle.readline(1 << 20)
            yield None
        else:
            yield line


def _jsonl(path: Path) -> Iterator[tuple[int, Any, Issue | None]]:
    with open_data_file(path) as handle:
        for line_no, line in enumerate(_lines(handle), start=1):
            if line is None:
                issue = Issue(str(path), line_no, "-", f"line longer than the limit of {MAX_LINE_BYTES:,} bytes")
                yield line_no, None, issue
                continue
            if not line.strip():
                continue
            try:
                yield line_no, loads_bounded(line.decode("utf-8")), None
            except ValueError as error:  # json.JSONDecodeError and UnicodeDecodeError included: a truncated line
                message = getattr(error, "msg", None) or str(error)
                yield line_no, None, Issue(str(path), line_no, "-", f"not valid JSON ({message})")


def _json(path: Path) -> Iterator[tuple[int, Any, Issue | None]]:
    with open_data_file(path) as handle:
        data = handle.read(MAX_JSON_BYTES + 1)
    try:
        if len(data) > MAX_JSON_BYTES:
            raise ValueError("too large to parse whole")
        value = loads_bounded(data.decode("utf-8"))
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
    if not path.exists():
        raise ValueError(f"{path}: no such file or folder")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        with open_data_file(path) as handle:
            table = pq.read_table(handle)
        yield str(path), _arrow_rows(table.to_pylist())
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
        ValueError: For a path that does not exist or holds nothing to read, and
            (``clocktune.data_files.DataFileError``) for a file that is not a regular file (a FIFO, a device).
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
        with open_data_file(file) as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()
