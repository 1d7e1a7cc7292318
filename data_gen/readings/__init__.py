"""Values people say other than as they are written: relative dates, clock times, enum members, counted nouns.

The earliest determinable point (``data_gen.determinable``) hears a value when its written form occurs in the user's
words. Many values are never said that way: ``2026-03-13`` is "this Friday", ``18:30`` "half past six in the
evening", ``BUSINESS`` "business class", ``children: 1`` "and a child". Each module here is one small reader that
finds such *mentions* in a turn's words:

- :mod:`~data_gen.readings.dates`: relative dates against an anchor date, and a stay's length ("for three nights");
- :mod:`~data_gen.readings.clock_times`: clock times, settled only once the part of the day is;
- :mod:`~data_gen.readings.enums`: enum members by their words, with the parameter's noun, or by the cue words the
  schema's description gives them;
- :mod:`~data_gen.readings.counts`: numbers said as counts of the noun an argument is named for.

A mention is a span of the words and the values it may mean (``next Friday`` may mean two dates). Which mention
settles a value is decided here, the same way for every reader (:func:`settled_by`): the first mention that may mean
it, unless the speaker later corrects it ("no", "actually", "not", "make it", ...) by a mention of the same kind that
does not. A value only mentioned and then corrected is not settled before the end of the turn, which is where the
call then stays: placing a call before its value is settled would teach a wrong speculative call.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["CORRECTIONS", "Mention", "Word", "corrections", "settled_by"]

# Words that take back what was just said. Over-reading a correction only leaves a call at the end of the turn.
CORRECTIONS = frozenset({"no", "not", "actually", "sorry", "instead", "rather", "wait", "scratch", "change", "nope"})
_CORRECTION_PAIRS = frozenset({("make", "it"), ("make", "that"), ("or", "rather")})


@dataclass(frozen=True)
class Word:
    """One normalised token of a turn, as the readers see it.

    Args:
        text: Its canonical text (``data_gen.determinable.tokens``: numbers as digits, months in full).
        raw: The token as written, lower-cased (``3rd``, ``third``, ``6``).
        word: The index of the whitespace-separated word it ends in.
        pause: Whether punctuation follows it within its word (``"Friday,"``): a clause may end there.
    """

    text: str
    raw: str
    word: int
    pause: bool = False


@dataclass(frozen=True)
class Mention:
    """A span of a turn that may mean one or more values.

    Args:
        values: What it may mean (canonical values: ISO dates, ``HH:MM``, enum members, numbers).
        start: Index of its first token.
        end: Index of its last token: the value is heard once the word of that token is.
        kind: The reading that found it (``date``, ``clock time``, ``enum``, ``count``).
    """

    values: frozenset
    start: int
    end: int
    kind: str


def corrections(words: list[Word]) -> list[int]:
    """Indices of the tokens that start a correction ("no", "actually", "make it", ...), in order."""
    found = []
    for index, word in enumerate(words):
        following = words[index + 1].text if index + 1 < len(words) else None
        if word.text in CORRECTIONS or (word.text, following) in _CORRECTION_PAIRS:
            found.append(index)
    return found


def settled_by(value: object, mentions: Iterable[Mention], words: list[Word], taken: list[int]) -> Mention | None:
    """The mention at which ``value`` is settled: the first that may mean it, neither negated ("not Friday") nor
    corrected later by a mention that may not ("Friday, no, Saturday" settles no Friday).

    Args:
        value: The canonical value.
        mentions: Every mention of one kind in the turn (the kind whose later mentions could change the value).
        words: The turn's tokens.
        taken: The tokens that start a correction (:func:`corrections` of ``words``, found once per turn).

    Returns:
        The settling mention, or ``None``.
    """
    ordered = sorted(mentions, key=lambda mention: (mention.end, mention.start))
    # A mention is taken back when a correction follows it and a mention that may not mean the value follows that:
    # only the first correction after it and the last such mention need comparing (time linear in the mentions).
    others = [mention.start for mention in ordered if value not in mention.values]
    last_other = max(others, default=-1)
    for mention in ordered:
        if value not in mention.values:
            continue
        before = words[mention.start - 1] if mention.start > 0 else None
        if before is not None and (before.text == "not" or before.text == "no" and not before.pause):
            continue  # "not Friday", "no kids"; but "no, Saturday" corrects what came before
        after = bisect.bisect_right(taken, mention.end)
        if after < len(taken) and last_other > taken[after]:
            continue
        return mention
    return None
