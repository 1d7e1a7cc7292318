"""BFCL entries as tasks: reading a category's files, splitting entries into spoken turns, the agent's answers.

BFCL has no readings of partial words. Each call is read at its earliest determinable point instead
(``data_gen.determinable``: the first prefix of the turn's words that holds every argument value; a value said in
an earlier turn of the entry is known from the start; a call with nothing to hear, or a value the words never hold,
keeps the end of the turn), and the readings accumulate up to the gold one at the last word, which holds every call
of the turn. The teacher still keeps BFCL's order (the expert's ``program_order``): before the end of speech it
issues only the turn's leading read-only calls. The calls are the turn's ground truth; its answer summarises their
results, as BFCL states no facts an answer must contain.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from clocktune.timeline.events import CallPlacement
from data_gen.determinable import MISSING, Setting, Utterance, accumulate_readings, call_placement, place
from data_gen.importers.bfcl.calls import parse_call
from data_gen.importers.bfcl.errors import BfclError
from data_gen.importers.bfcl.wheel import read_jsonl
from data_gen.task import Answer, AnswerFn, PlannedCall, Task, Turn

__all__ = [
    "ASK_FOR_DETAILS",
    "CANNOT_DO",
    "CATEGORIES",
    "build_task",
    "load_entries",
    "plan_turns",
    "summarise",
]

CATEGORIES = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")

ASK_FOR_DETAILS = "I need a bit more information to do that. Could you give me the missing details?"
CANNOT_DO = "Sorry, I can't do that with the tools I have."
_SUMMARY_CHARS = 80  # longest value quoted in an answer
_SUMMARY_ITEMS = 5  # longest list quoted item by item


def load_entries(category: str, data_dir: str | os.PathLike) -> list[tuple[dict, list]]:
    """Reads the entries of a category with their per-turn ground truth.

    Args:
        category: One of :data:`CATEGORIES`.
        data_dir: Folder holding ``BFCL_v4_<category>.json`` and ``possible_answer/BFCL_v4_<category>.json``.

    Returns:
        ``(entry, ground_truth)`` pairs in file order; ``ground_truth`` holds one list of call strings per turn.

    Raises:
        BfclError: For an unknown category, missing files, bad lines or an entry without a possible answer.
    """
    if category not in CATEGORIES:
        raise BfclError(f"unknown BFCL category {category!r}; choose one of {', '.join(CATEGORIES)}")
    data_dir = Path(data_dir)
    path = data_dir / f"BFCL_v4_{category}.json"
    answer_path = data_dir / "possible_answer" / f"BFCL_v4_{category}.json"
    answers: dict[str, Any] = {}
    for record in read_jsonl(answer_path):
        if not isinstance(record.get("id"), str) or not isinstance(record.get("ground_truth"), list):
            raise BfclError(f"{answer_path}: every line needs an id and a ground_truth list ({record.get('id')!r})")
        answers[record["id"]] = record["ground_truth"]
    pairs = []
    for line_no, entry in enumerate(read_jsonl(path), start=1):
        entry_id = entry.get("id")
        if not isinstance(entry_id, str):
            raise BfclError(f"{path}:{line_no}: entry without an id")
        for key, kind in (("question", list), ("involved_classes", list), ("initial_config", dict)):
            if not isinstance(entry.get(key), kind):
                raise BfclError(f"{path}:{line_no}: entry {entry_id}: {key} must be a {kind.__name__}")
        if entry_id not in answers:
            raise BfclError(f"{answer_path}: no ground truth for entry {entry_id}")
        pairs.append((entry, answers[entry_id]))
    return pairs


def plan_turns(
    entry: dict, ground_truth: list, parameters: Mapping[str, Sequence[str]]
) -> list[tuple[list[str], list[tuple[str, dict]]]]:
    """Splits an entry into spoken turns, each with the words and the parsed ground-truth calls.

    A turn without user words (where ``multi_turn_miss_func`` reveals the held-out function) gives its calls to
    the turn before it.

    Args:
        entry: A BFCL entry.
        ground_truth: Its per-turn call strings.
        parameters: Documented parameter names per function (for positional arguments).

    Returns:
        ``(words, [(name, arguments), ...])`` per spoken turn.

    Raises:
        BfclError: Naming the entry id and turn for mismatched turns, empty words or bad call strings.
    """
    entry_id = entry.get("id")
    question = entry["question"]
    if len(question) != len(ground_truth):
        raise BfclError(f"entry {entry_id}: {len(question)} question turns but {len(ground_truth)} ground-truth turns")
    turns: list[tuple[list[str], list[tuple[str, dict]]]] = []
    for index, (messages, calls) in enumerate(zip(question, ground_truth, strict=True)):
        if not isinstance(messages, list) or not isinstance(calls, list):
            raise BfclError(f"entry {entry_id}: turn {index}: question and ground truth must be lists")
        parsed = []
        for number, text in enumerate(calls):
            if not isinstance(text, str):
                raise BfclError(f"entry {entry_id}: turn {index} call {number}: expected a call string, got {text!r}")
            parsed.append(parse_call(text, parameters, f"entry {entry_id}: turn {index} call {number}"))
        if not messages:
            if not turns:
                raise BfclError(f"entry {entry_id}: turn {index} has no user message and no turn before it")
            turns[-1][1].extend(parsed)
            continue
        text = " ".join(
            str(message.get("content", ""))
            for message in messages
            if isinstance(message, dict) and message.get("role") == "user"
        )
        if not text.split():
            raise BfclError(f"entry {entry_id}: turn {index}: no user words")
        turns.append((text.split(), parsed))
    return turns


def _shorten(text: str) -> str:
    return text if len(text) <= _SUMMARY_CHARS else text[: _SUMMARY_CHARS - 3].rstrip() + "..."


def _describe(value: Any) -> str:
    if isinstance(value, str):
        return _shorten(" ".join(value.split()))
    if isinstance(value, list):
        if len(value) <= _SUMMARY_ITEMS and all(not isinstance(item, (list, dict)) for item in value):
            return _shorten(", ".join(str(item) for item in value)) if value else "none"
        return f"{len(value)} items"
    if isinstance(value, dict):
        return f"{len(value)} entries"
    if isinstance(value, bool) or value is None:
        return {True: "yes", False: "no", None: "none"}[value]
    return str(value)


def summarise(name: str, result: Any) -> str:
    """One sentence about a call's result for the turn's answer (empty when there is nothing to report).

    Args:
        name: Function name.
        result: Its JSON result.

    Returns:
        ``"name: key value, key value."`` with long values shortened and nested values counted.
    """
    if result in ({}, None, "", []):
        return ""
    if isinstance(result, dict):
        parts = [f"{key.replace('_', ' ')} {_describe(value)}" for key, value in result.items()]
        return f"{name}: {'; '.join(parts)}."
    return f"{name}: {_describe(result)}."


def _answer(category: str, calls: list[PlannedCall]) -> AnswerFn:
    if not calls:
        text = ASK_FOR_DETAILS if category == "multi_turn_miss_param" else CANNOT_DO
        return lambda results: Answer(text)

    def answer(results: dict[str, Any]) -> Answer:
        parts = [summarise(call.name, results.get(call.key)) for call in calls]
        parts = [part for part in parts if part]
        return Answer(" ".join(["Done."] + parts))

    return answer


def build_task(
    category: str,
    turns: list[tuple[list[str], list[tuple[str, dict]]]],
    parameters: dict[str, dict[str, Any]] | None = None,
) -> Task:
    """The task the teacher plays: per turn, the words and a reading at each call's determinable point.

    Args:
        category: BFCL category (the task kind).
        turns: From :func:`plan_turns`.
        parameters: Each tool's parameters schema (its enums, descriptions and names for the readings of
            ``data_gen.readings``); ``None``: none.

    Returns:
        The task; each turn's last reading, at its last word, holds all its calls in BFCL's order, and
        ``placements`` says where and why each call was placed.
    """
    task_turns = []
    placements: list[CallPlacement] = []
    said: list[str] = []  # the entry's earlier turns: values said there are known from the start of a turn
    for index, (words, calls) in enumerate(turns):
        utterance, context = Utterance(list(words)), Utterance(said)

        def known(value: Any, context: Utterance = context) -> Any:
            # Values said in earlier turns stay literal: BFCL's calls never reference each other's results.
            return value if context.heard_at(value) is not None else MISSING

        placed = []
        for number, (name, arguments) in enumerate(calls):
            call = PlannedCall(f"t{index}c{number}", name, arguments)
            placement = place(arguments, utterance, known, Setting(parameters=(parameters or {}).get(name, {})))
            placed.append((len(words) if placement.at_word is None else placement.at_word, call))
            placements.append(call_placement(call.key, name, index, placement, len(words)))
        planned = [call for _, call in placed]
        task_turns.append(Turn(list(words), accumulate_readings(placed, len(words)), _answer(category, planned)))
        said += words
    return Task(category, task_turns, placements)
