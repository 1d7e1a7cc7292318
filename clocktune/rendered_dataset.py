"""Rendered datasets: timelines -> a ``datasets.Dataset`` of token ids, labels and per-token metadata.

One row per timeline, with the columns of :class:`clocktune.render.Rendering` plus ``action`` (what kind of agent
action each token belongs to, for per-action metrics) and ``timeline_id``. This is what ``clocktune render`` writes
and what :class:`clocktune.collate.StreamingCollator` packs.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clocktune.timeline.events import Timeline
from clocktune.timeline.io import Issue, TimelineFormatError, iter_timeline_file
from clocktune.timeline.validate import validate_timeline

if TYPE_CHECKING:
    import datasets

# Per-token ``action`` codes: the index in this tuple. "none" for every token outside agent events.
ACTION_TYPES = ("none", "call", "modify_cancel", "wait", "say", "commit")
_ACTION_OF_KIND = {
    "tool_call": ACTION_TYPES.index("call"),
    "tool_modify": ACTION_TYPES.index("modify_cancel"),
    "tool_cancel": ACTION_TYPES.index("modify_cancel"),
    "wait": ACTION_TYPES.index("wait"),
    "say": ACTION_TYPES.index("say"),
    "commit": ACTION_TYPES.index("commit"),
}

TIMELINE_SUFFIXES = (".jsonl", ".parquet")

# Timelines rendered per Arrow record batch: bounds the Python lists alive at once (a few MB of tokens) while
# keeping the per-batch conversion overhead negligible.
_BATCH_TIMELINES = 1024


def rendered_features() -> datasets.Features:
    """Returns the column types of a rendered dataset.

    Returns:
        ``datasets.Features``: int32 ids, labels and event indices, float64 times, bool sink, int8 action, string id.
    """
    from datasets import Features, List, Value

    return Features(
        {
            "timeline_id": Value("string"),
            "input_ids": List(Value("int32")),
            "labels": List(Value("int32")),
            "time": List(Value("float64")),
            "visible_until": List(Value("float64")),
            "sink": List(Value("bool")),
            "event_index": List(Value("int32")),
            "action": List(Value("int8")),
        }
    )


def action_codes(timeline: Timeline, event_index: Sequence[int]) -> list[int]:
    """Returns the per-token action code of a rendering of ``timeline``.

    Args:
        timeline: The rendered timeline.
        event_index: The rendering's ``event_index`` column (-1 for the system prefix).

    Returns:
        For each token, the index in :data:`ACTION_TYPES` of its event's action; 0 ("none") outside agent events.
    """
    # One entry per event plus a trailing 0 that event_index -1 (the system prefix) picks up.
    per_event = [_ACTION_OF_KIND.get(event.kind, 0) for event in timeline.events] + [0]
    return [per_event[index] for index in event_index]


def _record_batches(
    timelines: Iterable[Timeline], tokenizer: Any, model_format: str | None, agent_clock_loss: bool, schema: Any
) -> Iterator[Any]:
    import pyarrow as pa

    from clocktune.render import render

    columns: dict[str, list] = {name: [] for name in schema.names}
    for timeline in timelines:
        rendering = render(timeline, tokenizer, model_format, agent_clock_loss)
        for name, values in rendering.to_dict().items():
            columns[name].append(values)
        columns["action"].append(action_codes(timeline, rendering.event_index))
        columns["timeline_id"].append(timeline.id)
        if len(columns["timeline_id"]) == _BATCH_TIMELINES:
            yield pa.RecordBatch.from_pydict(columns, schema=schema)
            columns = {name: [] for name in schema.names}
    if columns["timeline_id"]:
        yield pa.RecordBatch.from_pydict(columns, schema=schema)


def render_timelines(
    timelines: Iterable[Timeline], tokenizer: Any, model_format: str | None = None, agent_clock_loss: bool = False
) -> datasets.Dataset:
    """Renders timelines into a dataset, one row per timeline.

    Rows are converted to Arrow batch by batch (about twice as fast as ``Dataset.from_dict``, and the Python lists
    of only one batch are alive at a time).

    Args:
        timelines: The dialogues (any iterable, e.g. wrapped in a progress bar).
        tokenizer: A tokenizer extended by ``clocktune.encoding.extend_tokenizer``.
        model_format: Expected model format; ``None`` takes the tokenizer's.
        agent_clock_loss: Whether the clock of agent messages carries loss too.

    Returns:
        An in-memory dataset with the columns of :func:`rendered_features`; each row equals
        ``clocktune.render.render(timeline, tokenizer, ...)`` plus ``action`` and ``timeline_id``.

    Raises:
        ValueError: When the tokenizer carries no clocktune encoding or one of another ``model_format``.
    """
    import pyarrow as pa
    from datasets import Dataset, DatasetInfo
    from datasets.table import InMemoryTable

    features = rendered_features()
    schema = features.arrow_schema
    batches = list(_record_batches(timelines, tokenizer, model_format, agent_clock_loss, schema))
    table = pa.Table.from_batches(batches, schema=schema)
    return Dataset(InMemoryTable(table), info=DatasetInfo(features=features))


def timeline_files(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """Expands folders into the timeline files they hold.

    Args:
        paths: ``.jsonl``/``.parquet`` files or folders (searched recursively, files sorted by path).

    Returns:
        The files, in the order given.

    Raises:
        FileNotFoundError: When a path does not exist.
    """
    files = []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            files += sorted(p for p in path.rglob("*") if p.suffix in TIMELINE_SUFFIXES and p.is_file())
        elif path.exists():
            files.append(path)
        else:
            raise FileNotFoundError(f"{path}: no such file or folder")
    return files


def load_timeline_files(paths: Iterable[str | os.PathLike]) -> list[Timeline]:
    """Reads every timeline of some timeline files, parsing and validating all of them before failing.

    Each timeline is checked with :func:`clocktune.timeline.validate.validate_timeline`, the rules of
    ``clocktune-datagen validate``: what is rendered, trained on or evaluated cannot hold a NaN time, a result for
    no call or a modify of an unknown one, which would otherwise skew scores or fail deep inside a run.

    Args:
        paths: ``.jsonl``/``.parquet`` files or folders of them.

    Returns:
        The timelines, file by file in the order of :func:`timeline_files`, in file order within a file.

    Raises:
        FileNotFoundError: When a path does not exist.
        TimelineFormatError: Listing ``file:line:field`` of every bad line of every file, for parse errors and
            rule violations alike.
        ValueError: When the paths hold no timeline at all.
    """
    paths = list(paths)
    files = timeline_files(paths)
    timelines: list[Timeline] = []
    issues: list[Issue] = []
    for path in files:
        # Keep going after a bad line: report every bad line of every file at once.
        for line_no, item in iter_timeline_file(path):
            if isinstance(item, list):
                issues.extend(item)
                continue
            problems = validate_timeline(item, str(path), line_no)
            if problems:
                issues.extend(problems)
            else:
                timelines.append(item)
    if issues:
        raise TimelineFormatError(issues)
    if not timelines:
        raise ValueError(f"no timelines in {', '.join(str(p) for p in paths) or 'no paths'}")
    return timelines


def summarize(dataset: datasets.Dataset, max_length: int) -> dict[str, Any]:
    """Figures of a rendered dataset, including how well it packs.

    Args:
        dataset: A rendered dataset (:func:`render_timelines`).
        max_length: Row capacity to pack at, as the collator will.

    Returns:
        ``timelines``, ``tokens``, ``loss_tokens``, ``loss_share`` (loss tokens / tokens), ``truncated_timelines``
        (longer than ``max_length``), ``max_length``, ``packed_rows`` and ``packing_efficiency``: kept tokens /
        (rows x ``max_length``) when the whole dataset is packed with ``pack_best_fit`` (the collator packs batch
        by batch, so its rows are at most this full).
    """
    import pyarrow.compute as pc

    from clocktune.collate import IGNORE_INDEX, pack_best_fit

    # The Arrow view honours an indices mapping (after select/shuffle), unlike dataset.data.
    table = dataset.with_format("arrow", columns=["input_ids", "labels"])[:]
    lengths = pc.list_value_length(table["input_ids"]).to_pylist()
    tokens = sum(lengths)
    loss_tokens = pc.sum(pc.not_equal(pc.list_flatten(table["labels"]), IGNORE_INDEX)).as_py() or 0
    rows = pack_best_fit(lengths, max_length)
    kept = sum(min(length, max_length) for length in lengths)
    return {
        "timelines": len(lengths),
        "tokens": tokens,
        "loss_tokens": loss_tokens,
        "loss_share": loss_tokens / tokens if tokens else 0.0,
        "truncated_timelines": sum(length > max_length for length in lengths),
        "max_length": max_length,
        "packed_rows": len(rows),
        "packing_efficiency": kept / (len(rows) * max_length) if rows else 0.0,
    }
