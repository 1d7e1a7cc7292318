"""A conversation as the task the teacher plays: each call at its earliest determinable point, answers with facts.

Each turn's calls are placed with :func:`data_gen.determinable.place` (the rule is stated there): a call is read
at the first prefix of the user's words that holds every argument value. A value the turn's words do not hold is
looked for, in this order,

1. in the context: the system messages (one text) and the user's earlier turns, each its own text (a number run does
   not join the end of one to the start of the next); it stays a literal, known from the start;
2. in the result of an earlier call (an earlier turn's, or an earlier round of this turn's: calls of one assistant
   message ran in parallel and could not see each other's results), the latest first: it becomes
   ``{"$ref": "<key>.<path>"}`` into that result, the path found by searching the result for a leaf equal to the
   value (same JSON type; the whole result when it is the value). The expert resolves it when the result is in,
   so conversation logs and ground truth carry the resolved value;

and a value found nowhere (the assistant paraphrased or knew it) places the call at the end of the turn. Readings
accumulate (:func:`data_gen.determinable.accumulate_readings`), all with confidence 1.0.

The answer of a turn is the assistant's recorded text; its facts are the result values the text repeats: each
string or number leaf of the conversation's results so far that the text holds after normalisation, written as the
text writes it (so that "three rooms" yields the fact ``three`` for a result ``3``, which the answer contains).
Strings of one character are left out: they match by chance.
"""

from __future__ import annotations

import datetime
import itertools
import re
from collections.abc import Iterator
from typing import Any

from clocktune.timeline.events import CallPlacement
from data_gen.determinable import (
    MISSING,
    Setting,
    Utterance,
    accumulate_readings,
    call_placement,
    leaf_key,
    leaves,
    place,
    tokens,
    value_forms,
)
from data_gen.importers.chat.conversation import Conversation, RecordedCall
from data_gen.readings.dates import iso_date
from data_gen.spoken import MONTHS
from data_gen.task import Answer, PlannedCall, Task, Turn

__all__ = ["answer_facts", "build_task", "date_in_text", "find_path", "responses"]


def find_path(result: Any, value: Any) -> str | None:
    """The dotted path of the first leaf of ``result`` equal to ``value`` (same JSON type), or ``None``.

    Args:
        result: A recorded result.
        value: The value looked for.

    Returns:
        ``""`` when the result is the value itself, else ``"items.0.id"``-style paths; keys holding a dot, or
        empty ones, cannot be written in a reference and are skipped.
    """
    return next((path for path, leaf in _reference_leaves(result) if _same(leaf, value)), None)


def _same(leaf: Any, value: Any) -> bool:
    return type(leaf) is type(value) and leaf == value


def _reference_leaves(result: Any) -> Iterator[tuple[str, Any]]:
    # The leaves a reference can name: leaves() joins keys with dots, so a key that holds one (or an empty key)
    # would split into a path that does not exist.
    for path, leaf in leaves(result):
        parts = path.split(".") if path else []
        if path and not all(parts) or _has_dotted_key(result, parts):
            continue
        yield path, leaf


def _has_dotted_key(result: Any, parts: list[str]) -> bool:
    value = result
    for part in parts:
        if isinstance(value, list):
            value = value[int(part)]
        elif isinstance(value, dict) and part in value:
            value = value[part]
        else:
            return True
    return False


def answer_facts(text: str, results: list[Any]) -> list[str]:
    """The result values an answer repeats, as it writes them.

    Args:
        text: The answer.
        results: Recorded results.

    Returns:
        Distinct facts (case-insensitively), in the order of the results.
    """
    index = _FactIndex()
    for result in results:
        index.add(result)
    return index.facts(text)


class _FactIndex:
    """The values of the results so far, indexed by their normalised forms, for the facts of each answer.

    An answer is matched against the index by its own runs of tokens (of the lengths some form has), so each turn
    costs time in its answer's length, not in the size of every result seen so far.
    """

    def __init__(self) -> None:
        self._first: dict[tuple[type, Any], int] = {}  # value -> its position in _values
        self._values: list[Any] = []  # distinct values, in the order of their first leaf
        self._by_form: dict[tuple[str, ...], list[int]] = {}
        self._lengths: set[int] = set()

    def add(self, result: Any) -> None:
        """Indexes the values of one more result (after those already added)."""
        for _, value in leaves(result):
            key = leaf_key(value)
            if key is None or key in self._first:
                continue
            self._first[key] = len(self._values)
            self._values.append(value)
            if isinstance(value, str) and len(value.strip()) < 2:
                continue  # one character matches by chance
            for form in value_forms(value):
                self._by_form.setdefault(tuple(form), []).append(self._first[key])
                self._lengths.add(len(form))

    def facts(self, text: str) -> list[str]:
        """The facts of an answer (see :func:`answer_facts`)."""
        answer = Utterance.of(text)
        words = [token.text for token in answer.tokens]
        heard: set[int] = set()
        for size in self._lengths:
            for start in range(len(words) - size + 1):
                heard.update(self._by_form.get(tuple(words[start : start + size]), ()))
        facts: list[str] = []
        seen: set[str] = set()  # facts, lower-cased
        for position in sorted(heard):
            span = answer.span(self._values[position])
            if span and span.lower() not in seen:
                facts.append(span)
                seen.add(span.lower())
        return facts


# Keys under which a result names the thing whose identifier sits beside them ("the Grand Plaza" for its id).
NAME_KEYS = frozenset({"name", "title", "label", "display_name", "full_name"})
_ISO_IN_TEXT = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_MONTH_DAY_YEAR = re.compile(
    r"\b(january|february|march|april|may|june|july|august|september|october|november|december)\s+(\d{1,2})"
    r"(?:st|nd|rd|th)?,?\s+(\d{4})\b",
    re.IGNORECASE,
)


def date_in_text(text: str) -> datetime.date | None:
    """The first date a text writes out (``2026-03-09`` or ``March 9, 2026``), or ``None``."""
    found = []
    for match in _ISO_IN_TEXT.finditer(text):
        found.append((match.start(), iso_date(match.group())))
    for match in _MONTH_DAY_YEAR.finditer(text):
        month = MONTHS.index(match.group(1).lower()) + 1
        try:
            found.append((match.start(), datetime.date(int(match.group(3)), month, int(match.group(2)))))
        except ValueError:
            continue
    found = [item for item in found if item[1] is not None]
    return min(found, key=lambda item: item[0])[1] if found else None


def _anchors(conversation: Conversation) -> Iterator[datetime.date | None]:
    """The date each turn's relative dates are read against: the system messages' date, else the first one written in
    an earlier turn, else the latest date argument of an earlier call (each text read once)."""
    written = date_in_text(conversation.system)
    called = None
    for turn in conversation.turns:
        yield written or called
        written = written or date_in_text(turn.text)
        for call in turn.calls:
            for _, leaf in leaves(call.arguments):
                called = iso_date(leaf) or called


def _names(result: Any) -> Iterator[tuple[Any, str]]:
    # (identifier, name) for each object of a result that names itself beside other scalars.
    stack = [result]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            names = [
                value for key, value in item.items() if key in NAME_KEYS and isinstance(value, str) and tokens(value)
            ]
            for key, value in item.items():
                if isinstance(value, (dict, list)):
                    stack.append(value)
                elif key not in NAME_KEYS and value_forms(value):
                    yield from ((value, name) for name in names if name != value)


def build_task(conversation: Conversation, kind: str) -> Task:
    """The task of a conversation.

    Each text is tokenised once and each result indexed once (the context is the system messages and every turn
    read as one text, each turn seeing the prefix before it), so the task takes time linear in the conversation's
    size rather than in the product of its messages' lengths or in its number of turns times its length.

    Args:
        conversation: The checked conversation.
        kind: The task kind (the dataset's name).

    Returns:
        The task; call keys are ``t<turn>c<n>``.
    """
    spoken = [chat_turn.text.split() for chat_turn in conversation.turns]
    system = conversation.system.split()
    starts = list(itertools.accumulate((len(words) for words in spoken), initial=len(system)))
    context = Utterance(system + [word for words in spoken for word in words], breaks=starts)
    sources: list[tuple[str, RecordedCall]] = []  # every call, in order: the first ``visible`` can be referenced
    latest: dict[tuple[type, Any], str] = {}  # leaf -> reference into the latest indexed result holding it
    indexed = 0
    results = _FactIndex()
    turns = []
    placements: list[CallPlacement] = []
    schemas = {tool.name: tool for tool in conversation.tools}
    names: dict[tuple[type, Any], list[str]] = {}  # identifiers an earlier result named
    for turn_index, (chat_turn, anchor) in enumerate(zip(conversation.turns, _anchors(conversation), strict=True)):
        words = spoken[turn_index]
        utterance = Utterance(words)
        placed: list[tuple[int, PlannedCall]] = []
        visible, round_ = len(sources), None
        for number, call in enumerate(chat_turn.calls):
            key = f"t{turn_index}c{number}"
            if call.round != round_:
                # Earlier turns' calls and this turn's earlier rounds: calls come in the order made, round by round.
                visible, round_ = len(sources), call.round
            sources.append((key, call))
            for source_key, source in sources[indexed:visible]:
                for value, name in _names(source.result):
                    key_of = leaf_key(value)
                    if key_of is not None and name not in names.setdefault(key_of, []):
                        names[key_of].append(name)
                paths: dict[tuple[type, Any], str] = {}
                for path, leaf in _reference_leaves(source.result):
                    reference_key = leaf_key(leaf)
                    if reference_key is not None:
                        paths.setdefault(reference_key, f"{source_key}.{path}" if path else source_key)
                latest.update(paths)
            indexed = max(indexed, visible)

            def available(value: Any, heard_before: int = starts[turn_index]) -> Any:
                heard = context.heard_at(value)
                if heard is not None and heard <= heard_before:
                    return value
                reference = latest.get(leaf_key(value))
                return MISSING if reference is None else {"$ref": reference}

            tool = schemas.get(call.name)
            setting = Setting(anchor, tool.parameters if tool is not None else {}, names)
            placement = place(call.arguments, utterance, available, setting)
            at = placement.at_word if placement.at_word is not None else len(words)
            placements.append(call_placement(key, call.name, turn_index, placement, len(words)))
            placed.append((at, PlannedCall(key, call.name, placement.arguments)))
        for call in chat_turn.calls:
            results.add(call.result)
        answer = Answer(chat_turn.answer, results.facts(chat_turn.answer))
        turns.append(Turn(words, accumulate_readings(placed, len(words)), lambda _results, a=answer: a))
    return Task(kind, turns, placements)


def responses(conversation: Conversation) -> list[dict[str, Any]]:
    """The recorded responses a :class:`~data_gen.importers.chat.backend.RecordedBackend` serves.

    Args:
        conversation: The checked conversation.

    Returns:
        ``{"name", "arguments", "content"}`` per call, in order.
    """
    return [
        {"name": call.name, "arguments": call.arguments, "content": call.result}
        for turn in conversation.turns
        for call in turn.calls
    ]
