"""Playing conversations out as timelines, and importing a whole file in the generator's dataset layout.

Each conversation's turns are spoken through the speech model; the expert of the config's teacher strategy plays the
task of ``placement.build_task`` in a runtime session on the virtual clock (``data_gen.generate.play_task``, as
generated dialogues are played) against the conversation's :class:`RecordedBackend`, and the
timeline's ground truth is what reached that backend (resolved arguments), its final state the state-changing calls
served, and the last answer's facts.

**Bad rows refuse the whole file.** Every problem of every row is collected first (unreadable lines, malformed
conversations, rows whose timeline would not validate) and raised together as :class:`ChatImportError`, which the
CLI prints as ``file:line:field: message`` lines before exiting 1, as ``clocktune-datagen validate`` does; nothing
is written, not even the settings stamp, so that the corrected file imports with the same command. Importing the good
rows and reporting the bad would give a dataset that silently differs from its source (and a stamp that then
refuses the rerun of the fixed file); a user who wants the good rows filters the file, and the listing says which.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from clocktune.atomic import atomic_write_lines
from clocktune.settings_stamp import stamp_settings
from clocktune.timeline.events import MAX_TIMELINE_S, CallPlacement, GroundTruth, Timeline
from clocktune.timeline.io import Issue, timeline_to_json
from clocktune.timeline.validate import validate_timeline
from clocktune.tools import ToolError
from data_gen.backends import RecordingBackend
from data_gen.config import GeneratorConfig, config_to_dict
from data_gen.dialogues import dialogue_seed
from data_gen.generate import GenerationError, play_task
from data_gen.importers.chat.backend import RecordedBackend
from data_gen.importers.chat.conversation import Conversation, parse_conversation
from data_gen.importers.chat.placement import build_task, responses
from data_gen.importers.chat.reader import fingerprint, read_rows
from data_gen.stats import DatasetStats
from data_gen.writer import MANIFEST

__all__ = [
    "AT_END_NAME",
    "DEFAULT_MEDIAN_S",
    "DOMAIN",
    "SHARD_NAME",
    "ChatImportError",
    "conversation_timeline",
    "import_chat",
    "placement_counts",
]

DOMAIN = "chat"
SHARD_NAME = "train-00000-of-00001.jsonl"
# The source rows whose calls all wait for the end of speech, each with its placements: what the readings miss.
AT_END_NAME = "calls_at_end.jsonl"
DEFAULT_MEDIAN_S = 0.6  # recordings state no latencies: every tool gets the project's default median


class ChatImportError(ValueError):
    """Rows that cannot be imported; ``issues`` lists every problem, one per field.

    Args:
        issues: The problems.
    """

    def __init__(self, issues: list[Issue]):
        self.issues = issues
        lines = {(issue.path, issue.line) for issue in issues}
        super().__init__(f"{len(issues)} issue(s) on {len(lines)} row(s); nothing was imported")


def conversation_timeline(conversation: Conversation, kind: str, seed: int, config: GeneratorConfig) -> Timeline:
    """Plays one conversation out with the expert of the config's teacher, in the runtime (``generate.play_task``).

    Args:
        conversation: The checked conversation.
        kind: The timeline's task (the dataset's name).
        seed: The dialogue's own seed.
        config: Generator config (speech, latencies, device, teacher).

    Returns:
        The timeline (domain ``chat``).

    Raises:
        GenerationError: When the task cannot be played out.
        ValueError: When the dialogue ends in another state than replaying its ground truth (a bug).
    """
    recorded = responses(conversation)
    side_effects = {tool.name: tool.side_effect for tool in conversation.tools}
    backend = RecordingBackend(RecordedBackend(recorded, side_effects))
    header = Timeline(
        id=conversation.id,
        domain=DOMAIN,
        task=kind,
        seed=seed,
        teacher=config.teacher,
        tools=conversation.tools,
        initial_state={"responses": recorded},
        ground_truth=GroundTruth(),
        events=[],
    )
    task = build_task(conversation, kind)
    played = play_task(header, task, backend, config)
    replay = RecordedBackend(recorded, side_effects)
    for call in backend.calls:
        try:
            replay.execute(call.name, call.arguments)
        except ToolError:  # a refusal is an outcome (an injected failure never reaches the backend)
            continue
    if replay.state() != backend.state():
        raise ValueError(f"conversation {conversation.id}: the dialogue ends in another state than its replay")
    ground_truth = GroundTruth(calls=backend.calls, final_state=backend.state(), facts=list(played.expert.facts))
    return replace(played.log.timeline, ground_truth=ground_truth, placements=task.placements)


def import_chat(
    source: str | os.PathLike,
    out_dir: str | os.PathLike,
    limit: int | None = None,
    seed: int = 0,
    config: GeneratorConfig | None = None,
    name: str | None = None,
) -> dict[str, Any]:
    """Imports conversations as timelines, in the generator's dataset layout.

    Writes ``out_dir/data/train-00000-of-00001.jsonl`` (atomically), ``out_dir/generation.json`` (what determines
    the file), ``out_dir/stats.json`` and ``out_dir/calls_at_end.jsonl`` (the rows none of whose calls the words
    settle before the end of speech, each with its placements).

    Args:
        source: A JSON Lines, JSON or Parquet file, a saved ``datasets`` dataset, or a folder of such files.
        out_dir: Output folder.
        limit: Import only the first ``limit`` rows (at least 1).
        seed: Seed of the run; row ``i`` gets its own seed from it.
        config: Generator config; defaults when ``None``.
        name: The dataset's name (the timelines' task); defaults to the source's file or folder name.

    Returns:
        ``path`` (the shard), ``written``, ``seconds``, ``stats`` (what ``stats.json`` holds), ``placement``
        (:func:`placement_counts`), ``at_end`` (rows whose calls all wait for the end) and ``at_end_path``.

    Raises:
        ChatImportError: Listing every problem of every bad row (nothing is written).
        ValueError: For a missing source, a limit below 1, a config with ``perturb`` on, or an ``out_dir`` that is a
            file or was written with other settings.
    """
    started = time.perf_counter()
    config = config or GeneratorConfig()
    if config.perturb.dialogues > 0:
        # The ground truth of a conversation is every call its backend ran, which would then include the wrong ones.
        raise ValueError(
            "perturb.dialogues must be 0 for import-chat: its ground truth is every call the dialogue ran"
        )
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be ≥ 1, got {limit}")
    if Path(out_dir).exists() and not Path(out_dir).is_dir():
        raise ValueError(f"{out_dir} is a file, not a folder")
    kind = name or Path(source).stem
    latency = config.tools.apply(DEFAULT_MEDIAN_S)
    issues: list[Issue] = []
    timelines: list[Timeline] = []
    at_end: list[str] = []  # source rows (with their placements) whose calls all wait for the end of speech
    seen: set[str] = set()
    for row in read_rows(source, limit):
        if row.record is None:
            issues.append(row.issue)
            continue
        conversation, problems = parse_conversation(row.record, f"{kind}-{row.line}", latency, row.path, row.line)
        issues += problems
        if conversation is None:
            continue
        if conversation.id in seen:
            issues.append(Issue(row.path, row.line, "id", f"id {conversation.id!r} is used by an earlier row"))
            continue
        seen.add(conversation.id)
        try:
            timeline = conversation_timeline(conversation, kind, dialogue_seed(seed, row.index), config)
        except (GenerationError, ValueError) as error:
            issues.append(Issue(row.path, row.line, "messages", f"cannot be played out: {error}"))
            continue
        if timeline.events and timeline.events[-1].t > MAX_TIMELINE_S:
            # One line for the row, not one per event past the limit (validation's listing).
            message = f"plays out in {timeline.events[-1].t:.0f} s, past the longest timeline ({MAX_TIMELINE_S:.0f} s)"
            issues.append(Issue(row.path, row.line, "messages", message))
            continue
        found = validate_timeline(timeline, row.path, row.line)
        if found:
            issues += [
                Issue(row.path, row.line, issue.field, f"(imported timeline) {issue.message}") for issue in found
            ]
            continue
        timelines.append(timeline)
        if timeline.placements and not any(_early(placement) for placement in timeline.placements):
            placements = [asdict(placement) for placement in timeline.placements]
            at_end.append(json.dumps({**row.record, "line": row.line, "placements": placements}, default=str) + "\n")
    if issues:
        raise ChatImportError(issues)
    if not timelines:
        raise ValueError(f"{source}: no conversations to import")
    out_dir = Path(out_dir)
    manifest = {
        "source": "chat",
        "input": str(Path(source)),
        "input_sha256": fingerprint(source),
        "name": kind,
        "limit": limit,
        "seed": seed,
        "format": "jsonl",
        "config": config_to_dict(config),
    }
    # Stamped only once every row has imported: a stamp left by a refused file would refuse the corrected one.
    stamp_settings(out_dir / MANIFEST, manifest)
    (out_dir / "data").mkdir(parents=True, exist_ok=True)
    stats = DatasetStats()
    for timeline in timelines:
        stats.add(timeline)
    path = out_dir / "data" / SHARD_NAME
    atomic_write_lines(path, [timeline_to_json(timeline) + "\n" for timeline in timelines])
    summary = stats.to_dict()
    atomic_write_lines(out_dir / "stats.json", [json.dumps(summary, indent=2) + "\n"])
    atomic_write_lines(out_dir / AT_END_NAME, at_end)
    return {
        "path": path,
        "written": len(timelines),
        "seconds": time.perf_counter() - started,
        "stats": summary,
        "placement": placement_counts(timelines),
        "at_end": len(at_end),
        "at_end_path": out_dir / AT_END_NAME,
    }


def _early(placement: CallPlacement) -> bool:
    return placement.at_word is not None and placement.at_word < placement.words


def placement_counts(timelines: list[Timeline]) -> dict[str, dict[str, int]]:
    """Per kind of argument value (``date``, ``time``, ``enum``, ``count``, ``number``, ``text``): how many calls with
    such an argument were placed before the end of speech (``early``) and how many stayed there (``end``).

    Args:
        timelines: Imported timelines (their ``placements``).

    Returns:
        ``{kind: {"early": n, "end": m}}``, kinds sorted.
    """
    counts: dict[str, dict[str, int]] = {}
    for timeline in timelines:
        for placement in timeline.placements:
            outcome = "early" if _early(placement) else "end"
            for kind in {argument.value_kind for argument in placement.arguments} or {"no values"}:
                counts.setdefault(kind, {"early": 0, "end": 0})[outcome] += 1
    return dict(sorted(counts.items()))
