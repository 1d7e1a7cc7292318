"""The training record: what a checkpoint was trained from, written beside it so that a push can say so.

A Trainer checkpoint names its base model by the path it was loaded from (for the embedded model, a cache folder on
this machine) and does not name its data at all. ``clocktune_training.json`` keeps both, as the user named them, so
the model card can give the base model's Hub id and the training data (``clocktune push`` uploads the record too).
A run with on-policy rounds (:mod:`clocktune.train.on_policy`) also records each round under ``on_policy_rounds``:
its rollout's summary (sessions, tasks completed live, decisions, agreement with the expert, examples), its steps
and where its examples are; ``max_steps`` then counts the steps of the first training and of every round.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from clocktune.atomic import atomic_write_text

__all__ = ["TRAINING_RECORD", "read_training_record", "write_training_record"]

TRAINING_RECORD = "clocktune_training.json"


def write_training_record(folder: str | os.PathLike, base_model: str, train_data: list[str], **facts: Any) -> None:
    """Writes the record into a checkpoint folder.

    Args:
        folder: The checkpoint folder.
        base_model: The model trained from, as named in the recipe (``embedded``, a Hub id or a path).
        train_data: The training data as named in the recipe (files, folders or Hub ids).
        **facts: Further JSON-ready facts (steps, the recipe's time codec, ...).
    """
    record = {"base_model": base_model, "train_data": list(train_data), **facts}
    atomic_write_text(Path(folder) / TRAINING_RECORD, json.dumps(record, indent=2) + "\n")


def read_training_record(folder: str | os.PathLike) -> dict[str, Any]:
    """The record of a checkpoint folder.

    Args:
        folder: The checkpoint folder.

    Returns:
        The record; ``{}`` when the folder has none (a checkpoint trained elsewhere).

    Raises:
        ValueError: When the record is not a JSON object.
    """
    path = Path(folder) / TRAINING_RECORD
    if not path.is_file():
        return {}
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not JSON ({error})") from None
    if not isinstance(record, dict):
        raise ValueError(f"{path}: not a JSON object")
    return record
