"""Reading and writing timelines as JSON Lines, one timeline per line, and the JSON Schema of a line."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from pydantic import TypeAdapter, ValidationError

from clocktune.atomic import atomic_write, atomic_write_lines
from clocktune.data_files import open_data_file
from clocktune.timeline.bounded_json import MAX_CHARS, DuplicateKeyError, loads_bounded
from clocktune.timeline.events import Timeline

TIMELINE_ADAPTER: TypeAdapter[Timeline] = TypeAdapter(Timeline)


@dataclass(frozen=True, slots=True)
class Issue:
    """One problem found in a timeline file, located precisely enough to fix by hand.

    Args:
        path: File the problem is in.
        line: 1-based line number (0 when the problem concerns the whole file).
        field: Dotted path of the offending field, e.g. ``events.3.t`` (``-`` when the line is not JSON).
        message: What is wrong.
    """

    path: str
    line: int
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.field}: {self.message}"


class TimelineFormatError(ValueError):
    """Raised when a file holds lines that are not timelines; carries every issue found."""

    def __init__(self, issues: list[Issue]):
        self.issues = issues
        shown = "\n".join(str(issue) for issue in issues[:20])
        more = f"\n... and {len(issues) - 20} more" if len(issues) > 20 else ""
        super().__init__(f"{len(issues)} invalid line(s):\n{shown}{more}")


def timeline_to_json(timeline: Timeline) -> str:
    """Serialises one timeline to its one-line JSON form (tool payloads as JSON strings).

    Args:
        timeline: The timeline to serialise.

    Returns:
        A single line of JSON without the trailing newline.
    """
    return TIMELINE_ADAPTER.dump_json(timeline).decode()


def timeline_to_record(timeline: Timeline) -> dict:
    """Returns the on-disk record of a timeline as a Python dict (what Arrow and ``datasets`` see)."""
    return TIMELINE_ADAPTER.dump_python(timeline, mode="json")


def timeline_from_json(line: str | bytes, path: str = "<string>", line_no: int = 0) -> Timeline:
    """Parses one JSON line into a timeline, checking every field's type.

    Args:
        line: One line of a timeline file.
        path: File name used in error messages.
        line_no: Line number used in error messages.

    Returns:
        The parsed timeline.

    Raises:
        TimelineFormatError: With one issue per invalid field (one issue for the line when it is not JSON, gives a
            key twice, or is too long or nests too deep to parse safely).
    """
    try:
        # Parsed here, not by pydantic: the bound keeps a hostile line from exhausting the parser's stack, and a key
        # given twice is an error (JSON parsers keep the last silently).
        record = loads_bounded(line)
    except DuplicateKeyError as error:
        raise TimelineFormatError([Issue(path, line_no, error.key, "duplicate key")]) from None
    except json.JSONDecodeError as error:
        raise TimelineFormatError([Issue(path, line_no, "-", f"not valid JSON ({error})")]) from None
    except ValueError as error:
        raise TimelineFormatError([Issue(path, line_no, "-", f"not a timeline line ({error})")]) from None
    return timeline_from_record(record, path, line_no)


def timeline_from_record(record: dict, path: str = "<record>", line_no: int = 0) -> Timeline:
    """Builds a timeline from its on-disk record (e.g. a row of a ``datasets`` dataset)."""
    try:
        return TIMELINE_ADAPTER.validate_python(record)
    except ValidationError as error:
        raise TimelineFormatError(_issues_from_pydantic(error, path, line_no)) from None


def _issues_from_pydantic(error: ValidationError, path: str, line_no: int) -> list[Issue]:
    issues = []
    for detail in error.errors(include_url=False):
        field = ".".join(str(part) for part in detail["loc"]) or "-"
        if detail["type"] == "json_invalid":
            issues.append(Issue(path, line_no, "-", f"not valid JSON ({detail['ctx']['error']})"))
        elif detail["type"] == "finite_number":
            issues.append(Issue(path, line_no, field, f"must be finite, got {detail['input']!r}"))
        else:
            issues.append(Issue(path, line_no, field, detail["msg"]))
    return issues


def iter_timeline_lines(path: str | os.PathLike) -> Iterator[tuple[int, Timeline | list[Issue]]]:
    """Yields ``(line_no, timeline)`` for each good line of a JSON Lines file and ``(line_no, issues)`` for bad ones.

    Blank lines are skipped. Nothing is raised for bad lines so that a caller can report all of them. A line is read
    up to :data:`~clocktune.timeline.bounded_json.MAX_CHARS` bytes: a longer one is an issue, and the rest of it is
    skipped without being held in memory.

    Raises:
        DataFileError: When ``path`` is not a regular file (a FIFO, a device): it is not read.
        OSError: When it cannot be opened.
    """
    with open_data_file(path) as handle:
        line_no = 0
        while line := handle.readline(MAX_CHARS + 1):
            line_no += 1
            if len(line) > MAX_CHARS and not line.endswith(b"\n"):
                while (rest := handle.readline(MAX_CHARS)) and not rest.endswith(b"\n"):
                    pass
                yield line_no, [Issue(str(path), line_no, "-", f"line longer than the limit of {MAX_CHARS:,} bytes")]
                continue
            if not line.strip():
                continue
            try:
                yield line_no, timeline_from_json(line, str(path), line_no)
            except TimelineFormatError as error:
                yield line_no, error.issues


def read_timelines(path: str | os.PathLike) -> list[Timeline]:
    """Reads every timeline of a JSON Lines or Parquet file.

    Args:
        path: A ``.jsonl`` or ``.parquet`` file.

    Returns:
        The timelines in file order.

    Raises:
        TimelineFormatError: Listing every bad line when any line is not a timeline.
    """
    timelines, issues = [], []
    for _, item in iter_timeline_file(path):
        if isinstance(item, list):
            issues.extend(item)
        else:
            timelines.append(item)
    if issues:
        raise TimelineFormatError(issues)
    return timelines


def write_timelines(path: str | os.PathLike, timelines: Iterable[Timeline]) -> int:
    """Writes timelines as JSON Lines atomically: a temporary file in the same folder, then a rename.

    Args:
        path: Destination ``.jsonl`` file; its folder must exist.
        timelines: Timelines to write.

    Returns:
        Number of timelines written.
    """
    lines = (timeline_to_json(timeline) + "\n" for timeline in timelines)
    return atomic_write_lines(path, lines)


def timeline_json_schema() -> dict:
    """Returns the JSON Schema of one line of a timeline file (the on-disk form)."""
    schema = TIMELINE_ADAPTER.json_schema(mode="serialization")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "clocktune timeline"
    return schema


def dumps_schema() -> str:
    """Returns :func:`timeline_json_schema` as indented JSON text."""
    return json.dumps(timeline_json_schema(), indent=2)


def arrow_schema():
    """The Arrow schema of a timeline record, so every Parquet shard has the same schema whatever it holds.

    Returns:
        A ``pyarrow.Schema`` (pyarrow is imported here, not at module import).
    """
    import pyarrow as pa

    string, number = pa.string(), pa.float64()
    latency = pa.struct([(name, number) for name in ("median_s", "sigma", "tail_prob", "tail_scale", "failure_rate")])
    tool = pa.struct(
        [("name", string), ("description", string), ("parameters", string), ("side_effect", pa.bool_()),
         ("latency", latency)]
    )  # fmt: skip
    ground_truth = pa.struct(
        [
            ("calls", pa.list_(pa.struct([("name", string), ("arguments", string)]))),
            ("final_state", string),
            ("facts", pa.list_(string)),
        ]
    )
    event = pa.struct(
        [("id", string), ("t", number), ("kind", string), ("source", string), ("text", string),
         ("final", pa.bool_()), ("revises", string), ("call_id", string), ("name", string),
         ("arguments", string), ("content", string), ("error", string)]
    )  # fmt: skip
    argument = pa.struct(
        [("path", string), ("kind", string), ("at_word", pa.int64()), ("words", string), ("value_kind", string)]
    )
    placement = pa.struct(
        [("key", string), ("name", string), ("turn", pa.int64()), ("at_word", pa.int64()), ("words", pa.int64()),
         ("arguments", pa.list_(argument))]
    )  # fmt: skip
    return pa.schema(
        [("id", string), ("domain", string), ("task", string), ("seed", pa.int64()), ("teacher", string),
         ("tools", pa.list_(tool)), ("initial_state", string), ("ground_truth", ground_truth),
         ("events", pa.list_(event)), ("context_only", pa.list_(string)), ("placements", pa.list_(placement))]
    )  # fmt: skip


def write_parquet(path: str | os.PathLike, timelines: Iterable[Timeline]) -> int:
    """Writes timelines as one Parquet file atomically (temporary file, then rename).

    Args:
        path: Destination ``.parquet`` file.
        timelines: Timelines to write.

    Returns:
        Number of timelines written.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    records = [timeline_to_record(timeline) for timeline in timelines]
    table = pa.Table.from_pylist(records, schema=arrow_schema())
    atomic_write(path, lambda tmp: pq.write_table(table, tmp))
    return len(records)


def iter_parquet_rows(path: str | os.PathLike) -> Iterator[tuple[int, Timeline | list[Issue]]]:
    """Like :func:`iter_timeline_lines` for a Parquet file; the "line" is the 1-based row number."""
    import pyarrow.parquet as pq

    with open_data_file(path) as handle:  # a regular file, or a clear error before pyarrow reads it
        table = pq.read_table(handle)
    for row_no, record in enumerate(table.to_pylist(), start=1):
        try:
            yield row_no, timeline_from_record(record, str(path), row_no)
        except TimelineFormatError as error:
            yield row_no, error.issues


def iter_timeline_file(path: str | os.PathLike) -> Iterator[tuple[int, Timeline | list[Issue]]]:
    """Yields ``(line, timeline or issues)`` from a ``.jsonl`` or ``.parquet`` timeline file."""
    if str(path).endswith(".parquet"):
        return iter_parquet_rows(path)
    return iter_timeline_lines(path)
