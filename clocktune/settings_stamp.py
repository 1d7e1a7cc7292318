"""The settings stamp of an output folder: what a resumable job was started with, checked before it resumes.

Generation, the BFCL import and the evaluation journal all resume into a folder they wrote before. Resuming with
other settings would mix two datasets (or two evaluations) in one folder, so each job stamps its folder with the
settings that determine its output, and a later run with other settings is refused, naming the settings that
differ.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from clocktune.atomic import atomic_write_text

__all__ = ["SettingsMismatchError", "differing_settings", "stamp_settings"]


class SettingsMismatchError(ValueError):
    """A folder already holds the output of a job started with other settings."""


def _normalised(settings: dict[str, Any]) -> dict[str, Any]:
    # What a JSON round trip gives back, so that a stamp read from disk compares equal to the one in memory.
    return json.loads(json.dumps(settings, default=str))


def differing_settings(recorded: dict[str, Any], settings: dict[str, Any]) -> list[str]:
    """The names whose values differ between settings read from disk and ``settings`` (compared as JSON gives them
    back), sorted; empty when they are the same."""
    wanted = _normalised(settings)
    return sorted(key for key in recorded.keys() | wanted.keys() if recorded.get(key) != wanted.get(key))


def stamp_settings(
    path: str | os.PathLike,
    settings: dict[str, Any],
    remedy: str = "use a new --out folder or delete it to start over",
    error: type[ValueError] = SettingsMismatchError,
) -> bool:
    """Writes the settings stamp, or checks that the one at ``path`` holds the same settings.

    Call it once the job's inputs have been checked: a stamp written for a run that then fails on bad input would
    refuse the corrected command.

    Args:
        path: The stamp file (e.g. ``OUT/generation.json``); its folder is created.
        settings: Everything that determines the job's output, JSON-ready (other values are written as ``str``).
        remedy: What the error tells the user to do.
        error: The exception class raised on a mismatch (a subclass of ``ValueError`` the caller's users know).

    Returns:
        Whether a stamp was already there (the job resumes).

    Raises:
        ValueError: Of class ``error``, when the folder was stamped with other settings; the message names the
            file and the settings that differ.
    """
    path = Path(path)
    wanted = _normalised(settings)
    if path.exists():
        try:
            recorded = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as bad:
            raise error(f"{path}: not a settings stamp ({bad}); {remedy}") from None
        if not isinstance(recorded, dict):
            raise error(f"{path}: not a settings stamp (a JSON object); {remedy}")
        if differ := differing_settings(recorded, wanted):
            raise error(f"{path}: written with other settings ({', '.join(differ)}); {remedy}")
        return True
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(wanted, indent=2) + "\n")
    return False
