"""Relative dates against an anchor, and a stay said as its length.

The anchor is the date the conversation happens on (a system message's date; see
``data_gen.importers.chat.placement``). Against it:

| words | date |
|---|---|
| today, tonight | the anchor |
| tomorrow; the day after tomorrow | +1; +2 |
| Friday, this Friday, on Friday, coming Friday | the first Friday after the anchor |
| next Friday | that one or the one a week later (both count: people mean either) |
| this weekend, the weekend; next weekend | the first Saturday after a weekday anchor; next: or a week later |
| in three days, in 2 weeks, in a week, a week from today | the anchor plus the days |
| the 3rd, on the fifteenth (not before a noun) | that day of the anchor's month, or of the next when it has passed |
| the 3rd of next month, of this month | that day of that month |

and :func:`nights` reads "for three nights" (a check-out date is a check-in date plus the nights). Month names with
days ("March 9th") are read by ``data_gen.determinable.value_forms`` without an anchor.
"""

from __future__ import annotations

import datetime
import re

from data_gen.readings import Mention, Word
from data_gen.spoken import MONTHS, ORDINAL_WORDS, WEEKDAYS

__all__ = ["date_mentions", "iso_date", "nights"]

_ORDINAL = re.compile(r"^(\d{1,2})(st|nd|rd|th)$")
# What may follow "the 3rd" when it is a date, not "the 3rd floor": a pause, or one of these.
_AFTER_DAY = frozenset(
    ["at", "for", "in", "please", "and", "or", "then", "through", "till", "until", "to", "from", "morning", "evening",
     "afternoon", "night", "instead", "is", "would", "works", "if", "around", "by"]
)  # fmt: skip
_ISO = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")


def iso_date(value: object) -> datetime.date | None:
    """The date an ISO ``YYYY-MM-DD`` string names, or ``None``."""
    match = _ISO.match(value.strip()) if isinstance(value, str) else None
    if not match:
        return None
    try:
        return datetime.date(int(match.group(1)), int(match.group(2)), int(match.group(3)))
    except ValueError:
        return None


def _day_of_month(year: int, month: int, day: int) -> datetime.date | None:
    try:
        return datetime.date(year, month, day)
    except ValueError:
        return None


def _next_month(date: datetime.date) -> tuple[int, int]:
    return (date.year + 1, 1) if date.month == 12 else (date.year, date.month + 1)


def _day_number(word: Word) -> int | None:
    # An ordinal as written: "3rd" or "third"/"twenty third" (the canonical text holds its number).
    if _ORDINAL.match(word.raw) or word.raw in ORDINAL_WORDS:
        return int(word.text) if word.text.isdigit() else None
    return None


def date_mentions(words: list[Word], anchor: datetime.date) -> list[Mention]:
    """Every relative date in a turn's tokens (see the module docstring).

    Args:
        words: The turn's tokens.
        anchor: The conversation's date.

    Returns:
        The mentions, values as ISO strings.
    """
    found: list[Mention] = []

    def add(start: int, end: int, *dates: datetime.date | None) -> None:
        values = frozenset(date.isoformat() for date in dates if date is not None)
        if values:
            found.append(Mention(values, start, end, "date"))

    def text(index: int) -> str:
        return words[index].text if 0 <= index < len(words) else ""

    day = datetime.timedelta(days=1)
    for index, word in enumerate(words):
        current, before = word.text, text(index - 1)
        if current in ("today", "tonight"):
            if not (before == "from" and text(index - 2) in ("day", "days", "week", "weeks")):  # "a week from today"
                add(index, index, anchor)
        elif current == "tomorrow":
            if before == "after" and text(index - 2) == "day":
                add(index - 2 - (text(index - 3) == "the"), index, anchor + 2 * day)
            else:
                add(index, index, anchor + day)
        elif current in WEEKDAYS:
            ahead = (WEEKDAYS.index(current) - anchor.weekday()) % 7 or 7
            first = anchor + ahead * day
            if before in ("last", "past", "previous"):
                continue
            start = index - (before in ("this", "on", "coming", "next"))
            add(start, index, first, first + 7 * day if before == "next" else None)
        elif current == "weekend" and anchor.weekday() < 5 and before in ("this", "the", "next"):
            saturday = anchor + (5 - anchor.weekday()) * day
            add(index - 1, index, saturday, saturday + 7 * day if before == "next" else None)
        elif current in ("day", "days", "week", "weeks") and index >= 1:
            count = before if before.isdigit() else "1" if before == "a" else None  # "one" is already "1"
            unit = 7 if current.startswith("week") else 1
            if count is not None and text(index - 2) == "in":
                add(index - 2, index, anchor + int(count) * unit * day)
            elif count is not None and text(index + 1) == "from" and text(index + 2) in ("today", "now"):
                add(index - 1, index + 2, anchor + int(count) * unit * day)
        else:
            number = _day_number(word)
            if number is None or before != "the":
                continue
            following = text(index + 1)
            if following == "of" and text(index + 3) == "month" and text(index + 2) in ("next", "this"):
                year, month = _next_month(anchor) if text(index + 2) == "next" else (anchor.year, anchor.month)
                add(index - 1, index + 3, _day_of_month(year, month, number))
            elif following in MONTHS or following == "of":
                continue  # "the 9th of March": a month-day form, read without an anchor
            elif word.pause or index + 1 == len(words) or following in _AFTER_DAY:
                year, month = (anchor.year, anchor.month) if number >= anchor.day else _next_month(anchor)
                add(index - 1, index, _day_of_month(year, month, number))
    return found


def nights(words: list[Word]) -> list[tuple[int, int]]:
    """Stays said as their length: ``(nights, index of the "nights" token)`` for "three nights", "a night", "2 nights".

    Args:
        words: The turn's tokens.

    Returns:
        The lengths in order.
    """
    found = []
    for index, word in enumerate(words[1:], start=1):
        if word.text in ("night", "nights"):
            count = words[index - 1].text
            if count.isdigit():
                found.append((int(count), index))
            elif count == "a":  # "one" is already "1"
                found.append((1, index))
    return found
