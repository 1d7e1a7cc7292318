"""The earliest determinable point of a call: the first prefix of the user's words that fixes all its arguments.

Importers of recorded conversations (``data_gen.importers.chat``) and of BFCL (``data_gen.importers.bfcl``) know
the calls a turn made but not when, in the user's words, each became knowable. Both place each call with this one
rule, so that the speculative teacher and the oracle may act on it before the user has finished:

**The rule.** A call's argument *values* are its scalar leaves: strings and numbers anywhere inside its arguments
(list items and nested objects included; object keys, booleans and ``null`` are not values, since nobody speaks
them, and neither is a string without letters or digits). A value is *heard* after ``k`` words when its normalised
form occurs as a contiguous run of normalised tokens within the first ``k`` words of the turn; the earliest such
``k`` counts. A value the words never hold may be *available* instead (said in an earlier turn, or held by an
earlier call's result): the importer decides that, and what the argument becomes (a literal, a ``$ref``). The call
is determinable at the largest ``k`` over its heard values, provided every value is heard or available and at least
one is heard. Otherwise (a value from nowhere, or nothing at all heard in this turn: no arguments, only flags, only
earlier values) nothing in the words marks when the intent became clear, and the call waits for the end of the
turn, where the importers placed every call before this rule.

**Normalisation** (:func:`tokens`, :func:`value_forms`):

- text is NFKC-normalised and lower-cased; tokens are runs of letters or of digits (``3.5`` is one token), so
  punctuation, quotes, underscores, hyphens and spaces only separate: ``"final_report.pdf"`` is
  ``final report pdf`` and matches the words ``'final_report.pdf'``; digits in groups of three after a comma join
  (``1,000`` is ``1000``);
- numbers are compared as numbers: ``3``, ``3.0`` and ``three`` are all ``3``; runs of number words combine
  (``twenty five`` is ``25``, ``two hundred`` is ``200``, ``one thousand five hundred`` is ``1500``); ordinals are
  their number (``third``, ``3rd`` are ``3``), and ``a``/``and`` are not numbers;
- month abbreviations are their month (``sept`` is ``september``);
- an ISO date value (``2026-03-09``) is heard as that date, as its month and day in either order (``march 9``,
  ``9th of march``, ``march ninth``), or as its weekday name (``monday``): users name days, not dates.

Matching is by first occurrence, so a value that also occurs earlier by coincidence ("one of the three rooms")
places the call early; the normalised forms of :func:`canonical` also let a recorded-response backend match a
call whose arguments differ from the recorded ones only in case, punctuation or number spelling.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from clocktune.timeline.events import ArgumentPlacement, CallPlacement
from data_gen.readings import Mention, settled_by
from data_gen.readings.clock_times import clock_time, time_mentions
from data_gen.readings.counts import COUNTED, count_mentions, counted_noun
from data_gen.readings.dates import date_mentions, iso_date, nights
from data_gen.readings.enums import enum_mentions
from data_gen.spoken import Utterance, number_text, tokens, value_forms
from data_gen.task import PlannedCall, Reading

__all__ = [
    "MISSING",
    "Placement",
    "Reason",
    "Setting",
    "Utterance",
    "accumulate_readings",
    "call_placement",
    "canonical",
    "leaf_key",
    "leaves",
    "place",
    "tokens",
    "value_forms",
    "value_kind",
]

# A leaf the importer cannot make available: ``place``'s ``available`` returns it for "not available".
MISSING: Any = object()


def leaves(arguments: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Yields ``(dotted path, value)`` for every scalar inside an arguments object (list indices as numbers).

    Args:
        arguments: Any JSON value.
        path: The path of ``arguments`` itself.

    Yields:
        The leaves, booleans and ``None`` included (:func:`value_forms` ignores them).
    """
    if isinstance(arguments, dict):
        for key, value in arguments.items():
            yield from leaves(value, f"{path}.{key}" if path else str(key))
    elif isinstance(arguments, list):
        for index, value in enumerate(arguments):
            yield from leaves(value, f"{path}.{index}" if path else str(index))
    else:
        yield path, arguments


@dataclass(frozen=True)
class Setting:
    """What a call's words are heard against, beyond the words themselves.

    Args:
        anchor: The conversation's date: relative dates are read against it (``None``: they are not read, and a date
            is heard as its weekday name alone).
        parameters: The called tool's parameters (a JSON schema): enum members, descriptions and argument names.
        names: Identifier values an earlier result gave a name, by :func:`leaf_key`: "the Grand Plaza" is ``H-44``.
    """

    anchor: datetime.date | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    names: dict[tuple[type, Any], list[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Reason:
    """How one argument value was settled.

    Args:
        path: The value's dotted path in the arguments.
        kind: ``literal`` (said as written), ``date``, ``time``, ``enum``, ``count``, ``name``, ``nights`` (heard
            in the turn), ``context`` (said before the turn), ``result`` (an earlier result's), ``unheard``.
        at_word: Words of the turn heard when it was settled (``None`` unless heard in the turn).
        words: The words that settled it, as written.
        value_kind: What the value is (:func:`value_kind`): ``date``, ``time``, ``enum``, ``count``, ``number``,
            ``text``.
    """

    path: str
    kind: str
    at_word: int | None = None
    words: str | None = None
    value_kind: str = "text"


def value_kind(path: str, value: Any, setting: Setting) -> str:
    """What a value is, for reports: ``date`` (ISO), ``time`` (``HH:MM``), ``enum`` (a member of its schema's enum),
    ``count`` (an integer named for a counted noun), ``number`` or ``text``.

    Args:
        path: The value's dotted path in the arguments.
        value: The value.
        setting: The call's setting (its schema).

    Returns:
        The kind.
    """
    parts = path.split(".") if path else []
    members = _schema_at(setting.parameters, parts).get("enum")
    if isinstance(value, str) and isinstance(members, list) and value in members:
        return "enum"
    if iso_date(value) is not None:
        return "date"
    if clock_time(value) is not None:
        return "time"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        name = next((part for part in reversed(parts) if not part.isdigit()), "")
        return "count" if isinstance(value, int) and counted_noun(name, tokens) is not None else "number"
    return "text"


@dataclass
class Placement:
    """Where a call becomes determinable, and its arguments with available values filled in.

    Args:
        at_word: The earliest determinable point, or ``None`` when the words never determine the call (then it
            belongs at the end of the turn).
        arguments: The arguments, each value that was not heard replaced by what ``available`` returned for it.
        unresolved: Paths of values neither heard nor available.
        reasons: How each value was settled, in the arguments' order (flags and nulls have none).
    """

    at_word: int | None
    arguments: Any
    unresolved: list[str] = field(default_factory=list)
    reasons: list[Reason] = field(default_factory=list)


def leaf_key(leaf: Any) -> tuple[type, Any] | None:
    """A dictionary key equal exactly for leaves of the same JSON type and value; ``None`` when unhashable."""
    try:
        hash(leaf)
    except TypeError:
        return None
    return type(leaf), leaf


def _schema_at(parameters: dict[str, Any], parts: list[str]) -> dict[str, Any]:
    # The JSON schema of the value at a path of the arguments ({} where the schema does not say).
    schema: Any = parameters
    for part in parts:
        if not isinstance(schema, dict):
            return {}
        if part.isdigit() and isinstance(schema.get("items"), dict):
            schema = schema["items"]
        else:
            properties = schema.get("properties")
            schema = properties.get(part) if isinstance(properties, dict) else None
    return schema if isinstance(schema, dict) else {}


class _Hearer:
    """Finds where in one turn each value of a call is settled, by the literal rule and by the readings."""

    def __init__(self, utterance: Utterance, setting: Setting):
        self.utterance, self.setting = utterance, setting

    def _mentions(self, key: Any, read: Callable[[], list[Mention]]) -> list[Mention]:
        # A reader's mentions in the turn, read once for all its calls.
        if key not in self.utterance.mentions:
            self.utterance.mentions[key] = read()
        return self.utterance.mentions[key]

    def _at(self, mention: Mention) -> tuple[int, str]:
        words = self.utterance.readable
        return words[mention.end].word + 1, self.utterance.words_of(mention.start, mention.end)

    def _settled(self, kind: str, value: Any, mentions: list[Mention]) -> Reason | None:
        mention = settled_by(value, mentions, self.utterance.readable, self.utterance.corrections)
        return None if mention is None else Reason("", kind, *self._at(mention))

    def _first(self, kind: str, forms: list[list[str]]) -> Reason | None:
        # The form heard first, by the literal rule.
        found = self.utterance.first_span(forms)
        if found is None:
            return None
        return Reason("", kind, self.utterance.tokens[found[1]].word + 1, self.utterance.words_of(*found))

    def hear(self, path: str, value: Any, kind: str) -> Reason | None:
        """How the turn settles the value at ``path`` (of :func:`value_kind` ``kind``), or ``None`` when it does not."""
        parts = path.split(".") if path else []
        name = next((part for part in reversed(parts) if not part.isdigit()), "")
        words = self.utterance.readable
        if kind == "enum":
            schema = _schema_at(self.setting.parameters, parts)
            strings = [member for member in schema["enum"] if isinstance(member, str)]
            description = schema.get("description") if isinstance(schema.get("description"), str) else ""
            return self._settled("enum", value, enum_mentions(words, strings, name, description, tokens))
        if kind == "time":
            times = self._mentions("time", lambda: time_mentions(words, self.utterance.words))
            return self._settled("time", clock_time(value), times)
        found: list[Reason | None] = []
        anchor = self.setting.anchor
        if kind == "date" and anchor is not None:
            dates = self._mentions(("date", anchor), lambda: date_mentions(words, anchor))
            found.append(self._settled("date", iso_date(value).isoformat(), dates))
            found.append(self._first("literal", value_forms(value, weekday=False)))
        elif kind == "count":
            thing = counted_noun(name, tokens)
            counts = count_mentions(words, thing)
            if counts or any(word.text in COUNTED[thing] for word in words):
                return self._settled("count", value, counts)
            found.append(self._first("literal", value_forms(value)))
        else:
            found.append(self._first("literal", value_forms(value)))
        found += [self._first("name", [tokens(said)]) for said in self.setting.names.get(leaf_key(value), ())]
        heard = [reason for reason in found if reason is not None]
        return min(heard, key=lambda reason: reason.at_word) if heard else None

    def nights(self, value: Any, heard: dict[str, _Heard]) -> Reason | None:
        """A check-out date said as a stay's length after another date of the call was heard ("for three nights")."""
        date = iso_date(value)
        if date is None:
            return None
        for count, index in nights(self.utterance.readable):
            for item in heard.values():
                other = iso_date(item.value)
                if other is not None and (date - other).days == count:
                    at = max(self.utterance.readable[index].word + 1, item.reason.at_word)
                    return Reason("", "nights", at, self.utterance.words_of(max(0, index - 1), index))
        return None


@dataclass(frozen=True)
class _Heard:
    value: Any
    reason: Reason


def place(
    arguments: Any,
    utterance: Utterance,
    available: Callable[[Any], Any] | None = None,
    setting: Setting | None = None,
) -> Placement:
    """Applies the rule of the module docstring, and the readings of :mod:`data_gen.readings`, to one call.

    Args:
        arguments: The call's arguments as recorded.
        utterance: The turn's words.
        available: For a value the words do not hold: what the argument becomes when the value is available
            otherwise (the value itself, a ``{"$ref": ...}``), or :data:`MISSING`. ``None``: nothing is.
        setting: The conversation's date, the tool's schema and the names of earlier results (``None``: only the
            literal rule applies).

    Returns:
        The placement.
    """
    setting = setting or Setting()
    hearer = _Hearer(utterance, setting)
    heard: dict[str, _Heard] = {}
    pending: list[tuple[str, Any]] = []  # values the words did not settle by themselves
    kinds: dict[str, str] = {}
    for path, value in leaves(arguments):
        if not value_forms(value):
            continue  # flags and nulls: nothing to hear
        kinds[path] = value_kind(path, value, setting)
        reason = hearer.hear(path, value, kinds[path])
        if reason is not None:
            heard[path] = _Heard(value, replace(reason, path=path or "$"))
        else:
            pending.append((path, value))
    reasons: dict[str, Reason] = {path: item.reason for path, item in heard.items()}
    replacements: dict[str, Any] = {}
    unresolved: list[str] = []
    for path, value in pending:
        by_length = hearer.nights(value, heard)
        if by_length is not None:
            reasons[path] = replace(by_length, path=path or "$")
            continue
        replacement = MISSING if available is None else available(value)
        if replacement is MISSING:
            unresolved.append(path or "$")
            reasons[path] = Reason(path or "$", "unheard")
        else:
            replacements[path] = replacement
            kind = "result" if isinstance(replacement, dict) and "$ref" in replacement else "context"
            reasons[path] = Reason(path or "$", kind)

    def fill(value: Any, path: str) -> Any:
        if path in replacements:
            return replacements[path]
        if isinstance(value, dict):
            return {key: fill(item, f"{path}.{key}" if path else str(key)) for key, item in value.items()}
        if isinstance(value, list):
            return [fill(item, f"{path}.{index}" if path else str(index)) for index, item in enumerate(value)]
        return value

    ordered = [replace(reasons[path], value_kind=kinds[path]) for path, _ in leaves(arguments) if path in reasons]
    at_words = [reason.at_word for reason in ordered if reason.at_word is not None]
    at_word = max(at_words) if at_words and not unresolved else None
    return Placement(at_word, fill(arguments, ""), unresolved, ordered)


def call_placement(key: str, name: str, turn: int, placement: Placement, words: int) -> CallPlacement:
    """A call's placement as the timeline records it (``Timeline.placements``).

    Args:
        key: The call's key in the task.
        name: The tool.
        turn: The user's turn.
        placement: What :func:`place` found.
        words: Words of the turn.

    Returns:
        The record.
    """
    arguments = [ArgumentPlacement(r.path, r.kind, r.at_word, r.words, r.value_kind) for r in placement.reasons]
    return CallPlacement(key, name, turn, placement.at_word, words, arguments)


def accumulate_readings(placed: list[tuple[int, PlannedCall]], words: int) -> list[Reading]:
    """Readings that add each call at its determinable point and keep every earlier one (confidence 1.0).

    Args:
        placed: ``(at_word, call)`` in the turn's order (the gold order); ``at_word`` at most ``words``.
        words: Number of words of the turn: the last reading, the gold one, is there and holds every call.

    Returns:
        The readings ordered by ``at_word``, calls in the gold order within each.
    """
    points = sorted({min(at, words) for at, _ in placed if at < words})
    readings = [Reading(k, 1.0, [call for at, call in placed if at <= k]) for k in points]
    readings.append(Reading(words, 1.0, [call for _, call in placed]))
    return readings


def canonical(value: Any) -> str:
    """A normalised JSON text of a value, equal for values that differ only as the rule allows.

    Strings become their normalised tokens joined by spaces, numbers their one spelling (so ``"three"``, ``3``
    and ``3.0`` agree), object keys are sorted; booleans and ``None`` stay as they are.

    Args:
        value: Any JSON value (e.g. a call's arguments).

    Returns:
        The canonical text.
    """

    def norm(item: Any) -> Any:
        if isinstance(item, dict):
            return {str(key): norm(sub) for key, sub in item.items()}
        if isinstance(item, list):
            return [norm(sub) for sub in item]
        if isinstance(item, bool) or item is None:
            return item
        if isinstance(item, (int, float)):
            return number_text(repr(item) if isinstance(item, float) else str(item))
        return " ".join(tokens(str(item)))

    return json.dumps(norm(value), sort_keys=True)
