"""Clock times as people say them, settled only once the part of the day is.

A value ``HH:MM`` (24-hour; ``HH:MM:00`` too) is heard in:

| words | settled at |
|---|---|
| 6:30 pm, 6pm, 7 a.m., six thirty pm | ``pm`` / ``am`` |
| half past six in the evening, quarter to eight tonight, ten past seven in the morning | the part of the day |
| seven o'clock in the evening, at 7 tonight, 9 at night | the part of the day |
| noon, midday, midnight | the word |
| 18:30, 07:00 (24-hour: an hour from 13, or a leading zero) | the time |

"at 6:30" alone is not a time yet: it may be morning or evening, and a call placed there could be wrong, so a value
said only that way stays at the end of the turn. Between the time and its part of the day only filler may stand
("in the", "this", "tomorrow", a weekday).
"""

from __future__ import annotations

import re

from data_gen.readings import CORRECTIONS, Mention, Word
from data_gen.spoken import WEEKDAYS

__all__ = ["clock_time", "time_mentions"]

_VALUE = re.compile(r"^([01]?\d|2[0-3]):([0-5]\d)(?::00)?$")
_TWENTY_FOUR = re.compile(r"^(?:(0\d|1[3-9]|2[0-3])):([0-5]\d)\b")
_FILLER = frozenset(["in", "the", "this", "at", "o", "clock", "on", "tomorrow", "today", *WEEKDAYS])
# How far after a time its part of the day may come, and what may not stand between.
_LATER_PART = 8
_NOT_BETWEEN = frozenset(["at", "half", "quarter", "past", "noon", "midnight", "midday", "am", "pm", "o", "clock"])
_EVENING = frozenset(["pm", "afternoon", "evening", "tonight"])
_MORNING = frozenset(["am", "morning"])


def clock_time(value: object) -> str | None:
    """A time value as ``HH:MM``, or ``None`` when it is not one."""
    match = _VALUE.match(value.strip()) if isinstance(value, str) else None
    return f"{int(match.group(1)):02d}:{match.group(2)}" if match else None


def _hour(text: str) -> int | None:
    return int(text) if text.isdigit() and 1 <= int(text) <= 12 else None


def _part_of_day(words: list[Word], after: int) -> tuple[str, int] | None:
    # The part of the day said after token ``after`` and its token's index: right after it (filler between), or a
    # few words later as "in the evening" / "tonight" when nothing between could be another time or a correction
    # ("at six thirty for two people, in the evening").
    index = after + 1
    while index < len(words) and words[index].text in _FILLER:
        index += 1
    if index >= len(words):
        return None
    text = words[index].text
    if text in ("a", "p") and index + 1 < len(words) and words[index + 1].text == "m":
        return ("am" if text == "a" else "pm"), index + 1
    if text in _EVENING or text in _MORNING or text == "night":
        return text, index
    for later in range(index, min(len(words), after + 1 + _LATER_PART)):
        text = words[later].text
        if text in _NOT_BETWEEN or text in CORRECTIONS:
            return None
        if text == "tonight" or text in ("morning", "afternoon", "evening") and words[later - 1].text == "the":
            return text, later
    return None


def _on_clock(hour: int, minute: int, part: str) -> str:
    if part in _MORNING:
        hour = 0 if hour == 12 else hour
    elif part == "night":
        hour = hour + 12 if 6 <= hour < 12 else 0 if hour == 12 else hour
    else:
        hour = hour if hour == 12 else hour + 12
    return f"{hour:02d}:{minute:02d}"


def time_mentions(words: list[Word], spoken: list[str]) -> list[Mention]:
    """Every clock time in a turn (see the module docstring).

    Args:
        words: The turn's tokens.
        spoken: The turn's words as written (for 24-hour times, whose leading zero the tokens lose).

    Returns:
        The mentions, values as ``HH:MM``.
    """
    found: list[Mention] = []

    def text(index: int) -> str:
        return words[index].text if 0 <= index < len(words) else ""

    for index, word in enumerate(words):
        current = word.text
        if current in ("noon", "midday", "midnight"):
            found.append(Mention(frozenset({"00:00" if current == "midnight" else "12:00"}), index, index, "time"))
            continue
        # "half past six", "quarter to eight", "ten past seven": minutes, a direction, an hour.
        if current in ("past", "after", "to") and index >= 1 and _hour(text(index + 1)) is not None:
            minutes = {"half": 30, "quarter": 15}.get(text(index - 1))
            if minutes is None and text(index - 1).isdigit() and 1 <= int(text(index - 1)) < 60:
                minutes = int(text(index - 1))
            if minutes is None or (current == "to" and minutes == 30):
                continue
            hour = _hour(text(index + 1))
            if current == "to":
                hour, minutes = (hour - 2) % 12 + 1, 60 - minutes
            part = _part_of_day(words, index + 1)
            if part is not None:
                found.append(Mention(frozenset({_on_clock(hour, minutes, part[0])}), index - 1, part[1], "time"))
            continue
        hour = _hour(current)
        if hour is None or text(index - 1) in ("half", "quarter", "past", "to"):
            continue
        if index >= 1 and _hour(text(index - 1)) is not None and words[index - 1].word == word.word:
            continue  # the minutes of "6:30"
        minute, last = 0, index
        following = text(index + 1)
        if (
            following.isdigit()
            and int(following) < 60
            and (words[index + 1].word == word.word or len(following) == 2 or int(following) >= 10)
        ):
            minute, last = int(following), index + 1  # "6:30", "six thirty", "7 15"
        part = _part_of_day(words, last)
        if part is not None:
            found.append(Mention(frozenset({_on_clock(hour, minute, part[0])}), index, part[1], "time"))
    for position, said in enumerate(spoken):
        match = _TWENTY_FOUR.match(said.strip("([{\"'"))
        if match:
            token = next((i for i, w in enumerate(words) if w.word == position), None)
            if token is not None:
                value = f"{int(match.group(1)):02d}:{match.group(2)}"
                found.append(Mention(frozenset({value}), token, token + 1, "time"))
    return found
