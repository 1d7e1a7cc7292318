"""The journal of an evaluation in progress: each finished session's log, one JSON line, so that an interrupted
``clocktune eval`` resumes where it stopped instead of replaying sessions that took a model minutes.

A journal is a folder holding ``settings.json`` (what the evaluation was started with) and one ``<policy>.jsonl``
per policy run. Lines are appended and flushed as sessions end, so a killed process loses at most the line it was
writing; that partial last line is ignored on resume and its session replayed. The evaluation removes the folder
once its report is written.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import fields
from pathlib import Path
from typing import Any

from clocktune.runtime.session import SessionLog
from clocktune.settings_stamp import stamp_settings
from clocktune.timeline.bounded_json import loads_bounded
from clocktune.timeline.io import TimelineFormatError, timeline_from_record, timeline_to_record


class JournalError(ValueError):
    """Raised when a journal cannot be resumed: other settings, or a line that is not a session log."""


def log_to_json(index: int, log: SessionLog) -> str:
    """One journal line: the session's place in the evaluation and its log.

    Args:
        index: Position of the session's timeline in the evaluated list.
        log: The session's log.

    Returns:
        A line of JSON without its newline.
    """
    record = {f.name: getattr(log, f.name) for f in fields(log) if f.name != "timeline"}
    return json.dumps({"index": index, "timeline": timeline_to_record(log.timeline), **record})


def log_from_json(line: str, path: str, line_no: int) -> tuple[int, SessionLog]:
    """Parses one journal line.

    Args:
        line: The line.
        path: The journal file, for errors.
        line_no: The line's number, for errors.

    Returns:
        The session's index and its log.

    Raises:
        JournalError: When the line is not a session log (naming the file, line and field).
    """
    try:
        # Bounded: a corrupt line nested thousands deep must be a JournalError naming it, not a RecursionError.
        record = loads_bounded(line)
        index = record.pop("index")
        timeline = timeline_from_record(record.pop("timeline"), path, line_no)
        return index, SessionLog(timeline=timeline, **record)
    except TimelineFormatError as error:
        raise JournalError(f"{path}: not a session log: {error}") from None
    except (ValueError, KeyError, TypeError) as error:
        raise JournalError(f"{path}:{line_no}: not a session log ({error!r})") from None


class RunJournal:
    """The finished sessions of one policy run.

    Args:
        path: The run's ``<policy>.jsonl`` (created on the first append).
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def load(self) -> dict[int, SessionLog]:
        """The sessions already finished, by index; drops a last line cut off mid-write (its session is replayed).

        Returns:
            ``{index: log}``; empty when the file does not exist.

        Raises:
            JournalError: For a complete line that is not a session log.
        """
        if not self.path.exists():
            return {}
        data = self.path.read_bytes()
        complete = data.rfind(b"\n") + 1
        if complete < len(data):
            # A kill while a line was being written: cut it off, or the next append would glue onto it.
            os.truncate(self.path, complete)
        finished = {}
        for line_no, line in enumerate(data[:complete].decode("utf-8").splitlines(), start=1):
            if line.strip():
                index, log = log_from_json(line, str(self.path), line_no)
                finished[index] = log
        return finished

    def append(self, index: int, log: SessionLog) -> None:
        """Records a finished session: one line, flushed at once.

        Args:
            index: Position of the session's timeline in the evaluated list.
            log: The session's log.
        """
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(log_to_json(index, log) + "\n")


class EvalJournal:
    """The journal folder of one evaluation: its settings and a :class:`RunJournal` per policy.

    Args:
        folder: The journal folder (``OUT/journal`` for ``clocktune eval``).
        settings: Everything that decides the sessions' outcomes (policies, models, profile, timelines, ...),
            JSON-ready; a journal started with other settings is not resumed.
    """

    def __init__(self, folder: str | Path, settings: dict[str, Any]):
        self.folder = Path(folder)
        self.settings = settings

    def open(self) -> None:
        """Starts the journal, or checks that the one in the folder was started with the same settings.

        Raises:
            JournalError: When the folder holds a journal of other settings, naming the settings that differ.
        """
        stamp_settings(
            self.folder / "settings.json",
            self.settings,
            remedy=f"rerun it with the same arguments to resume it, or delete {self.folder} to start over",
            error=JournalError,
        )

    def run(self, policy: str) -> RunJournal:
        """The journal of one policy's run.

        Args:
            policy: The run's name.

        Returns:
            Its journal.
        """
        return RunJournal(self.folder / f"{policy}.jsonl")

    def close(self) -> None:
        """Removes the journal: the report it served is written."""
        shutil.rmtree(self.folder, ignore_errors=True)


def checkpoint_stamp(model: str) -> str | None:
    """A short hash of the names, sizes and modification times of a local checkpoint's files.

    An interrupted evaluation is resumed only with the same settings; the stamp makes a checkpoint trained again
    in the same folder count as other settings.

    Args:
        model: A ``--model`` value.

    Returns:
        The stamp; ``None`` for scripted policies, endpoints and Hub repo ids.
    """
    from clocktune.runtime.policy_factories import is_checkpoint

    folder = Path(model)
    if not is_checkpoint(model) or not folder.is_dir():
        return None
    stats = ((path, path.stat()) for path in folder.rglob("*") if path.is_file())
    files = sorted((str(path.relative_to(folder)), stat.st_size, stat.st_mtime_ns) for path, stat in stats)
    return hashlib.sha256(json.dumps(files).encode()).hexdigest()[:16]
