"""Spoken words as normalised tokens: the form in which a value is *heard* (``data_gen.determinable`` states the rule).

Text is NFKC-normalised and lower-cased; tokens are runs of letters or of digits; numbers are compared as numbers
(``3``, ``3.0``, ``three``; ``twenty five`` is ``25``; ordinals are their number); month abbreviations are their
month; an ISO date is heard as its month and day (or its weekday name). :class:`Utterance` finds where a value's form
is first heard in a turn, in time linear in the lengths involved, and gives the readers of ``data_gen.readings`` its
tokens.
"""

from __future__ import annotations

import bisect
import datetime
import itertools
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from data_gen.readings import Mention, Word, corrections

__all__ = ["MONTHS", "ORDINAL_WORDS", "WEEKDAYS", "Utterance", "number_text", "tokens", "value_forms"]

_TOKEN = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?(?!\d)|\d+(?:\.\d+)?(?:st|nd|rd|th)?|[^\W\d_]+")
_ORDINAL_DIGITS = re.compile(r"^(\d+)(?:st|nd|rd|th)$")

_UNITS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
          "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]  # fmt: skip
_TENS = ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_ORDINALS = ["zeroth", "first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth",
             "eleventh", "twelfth", "thirteenth", "fourteenth", "fifteenth", "sixteenth", "seventeenth", "eighteenth",
             "nineteenth"]  # fmt: skip
_SMALL: dict[str, int] = {word: value for value, word in enumerate(_UNITS)}
_SMALL.update({word: 20 + 10 * index for index, word in enumerate(_TENS)})
_SMALL.update({word: value for value, word in enumerate(_ORDINALS)})
_SMALL.update({word[:-1] + "ieth": 20 + 10 * index for index, word in enumerate(_TENS)})  # twentieth, thirtieth
ORDINAL_WORDS = frozenset(_ORDINALS) | {word[:-1] + "ieth" for word in _TENS}
_SCALES = {"hundred": 100, "thousand": 1000, "million": 1_000_000}
MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december"]  # fmt: skip
_MONTH_ALIASES = {name[:3]: name for name in MONTHS} | {"sept": "september"}
WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
_ISO_DATE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")

_PAUSES = frozenset(",.;:!?)")


def number_text(text: str) -> str:
    """One spelling per number: 3, 3.0 and 3.00 are ``3``; 3.50 is ``3.5``."""
    value = float(text)
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)


@dataclass(frozen=True)
class _Token:
    text: str
    word: int  # index of the word the token ends in
    start: int  # character span in the source text
    end: int


def _raw_tokens(text: str) -> list[tuple[str, int, int]]:
    # (token, start, end) in the lower-cased NFKC text; thousands separators are dropped from the token only.
    text = unicodedata.normalize("NFKC", text).lower()
    return [(match.group().replace(",", ""), match.start(), match.end()) for match in _TOKEN.finditer(text)]


def _number_run(raw: list[tuple[str, int, int, int]], index: int) -> tuple[int, int]:
    """Parses the number words from ``raw[index]`` on; returns (value, index after the run)."""
    total, current, last = 0, 0, index
    while last < len(raw):
        text = raw[last][0]
        if text in _SMALL:
            value = _SMALL[text]
            below_hundred = current % 100
            # "twenty five" joins; "five six", "twenty thirty" and "ten five" are separate numbers.
            joins = below_hundred == 0 or (below_hundred >= 20 and below_hundred % 10 == 0 and value < 10)
            if last > index and not joins:
                break
            current += value
            last += 1
            if text in ORDINAL_WORDS:
                break  # an ordinal ends a number ("first second" is two)
        elif text in _SCALES and last > index and (current or total):
            scale = _SCALES[text]
            if scale == 100:
                if current % 100 == 0 and current:
                    break  # "two hundred hundred"
                current = (current - current % 100) + (current % 100) * 100
            else:
                total, current = total + max(current, 1) * scale, 0
            last += 1
        else:
            break
    return total + current, last


def _canonical_tokens(raw: list[tuple[str, int, int, int]]) -> list[_Token]:
    """Turns raw (text, word, start, end) tokens into canonical ones: numbers, ordinals, months."""
    result: list[_Token] = []
    index = 0
    while index < len(raw):
        text, word, start, end = raw[index]
        if text in _SMALL:
            value, after = _number_run(raw, index)
            result.append(_Token(str(value), raw[after - 1][1], start, raw[after - 1][3]))
            index = after
            continue
        ordinal = _ORDINAL_DIGITS.match(text)
        if ordinal:
            text = ordinal.group(1)
        if text[0].isdigit():
            text = number_text(text)
        else:
            text = _MONTH_ALIASES.get(text, text)
        result.append(_Token(text, word, start, end))
        index += 1
    return result


def tokens(text: str) -> list[str]:
    """The normalised tokens of a text (see the module docstring).

    Args:
        text: Any text: a value, a sentence.

    Returns:
        The canonical tokens, e.g. ``["book", "3", "seats", "march", "9"]`` for ``"Book three seats, Mar 9th!"``.
    """
    raw = [(token, 0, start, end) for token, start, end in _raw_tokens(text)]
    return [token.text for token in _canonical_tokens(raw)]


def value_forms(value: Any, weekday: bool = True) -> list[list[str]]:
    """The token sequences that count as hearing a value.

    Args:
        value: A scalar argument value.
        weekday: Whether an ISO date is heard as its weekday name alone (without an anchor date there is nothing
            better; with one, :mod:`data_gen.readings.dates` says which Friday "Friday" is).

    Returns:
        Alternative forms (each a token list); empty when the value is not something a user says (booleans,
        ``None``, containers, strings without letters or digits).
    """
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, (int, float)):
        return [[number_text(repr(value) if isinstance(value, float) else str(value))]]
    if not isinstance(value, str):
        return []
    spoken = tokens(value)
    forms = [spoken] if spoken else []
    match = _ISO_DATE.match(value.strip())
    if match:
        try:
            date = datetime.date(int(match.group(1)), int(match.group(2)), int(match.group(3)))
        except ValueError:
            return forms
        month, day = MONTHS[date.month - 1], str(date.day)
        forms += [[month, day], [day, month], [day, "of", month]] + ([[WEEKDAYS[date.weekday()]]] if weekday else [])
    return forms


class Utterance:
    """A text as normalised tokens that remember the word they end in, for finding where a value is heard.

    Finding a value's form of one or two tokens is a dictionary look-up (first occurrences), a longer form one
    substring search from the first occurrence of its first pair, each remembered: looking up every value of a long
    result in a long message takes time linear in their lengths, not their product.

    Args:
        words: The text's words (as the speech model speaks them: whitespace-separated).
        breaks: Word indices where a new message starts (for a context read as one text): a number run does not
            cross them (``"... twenty"`` then ``"five ..."`` stays 20 and 5).
    """

    def __init__(self, words: list[str], breaks: Iterable[int] = ()):
        self.words = list(words)
        self.text = " ".join(self.words)
        raw, offset = [], 0
        for word_index, word in enumerate(self.words):
            for token, start, end in _raw_tokens(word):
                raw.append((token, word_index, offset + start, offset + end))
            offset += len(word) + 1
        self.tokens: list[_Token] = []
        begin = 0
        for cut in [*sorted(set(breaks)), len(self.words)]:
            end = begin
            while end < len(raw) and raw[end][1] < cut:
                end += 1
            self.tokens += _canonical_tokens(raw[begin:end])
            begin = end
        self._texts = [token.text for token in self.tokens]
        # First index of each token and of each pair of tokens, and the tokens joined by spaces (no token holds one)
        # with the offset at which each starts: a form of three tokens or more is then one C-level substring search
        # from the first occurrence of its first pair, not a scan in Python.
        self._first: dict[tuple[str, ...], int] = {}
        for index, text in enumerate(self._texts):
            self._first.setdefault((text,), index)
        for index, pair in enumerate(itertools.pairwise(self._texts)):
            self._first.setdefault(pair, index)
        self._joined = " " + " ".join(self._texts) + " "
        self._starts = list(itertools.accumulate((len(text) + 1 for text in self._texts[:-1]), initial=0))
        self._found: dict[tuple[str, ...], int | None] = {}
        self._readable: list[Word] | None = None
        self._corrections: list[int] | None = None
        self.mentions: dict[Any, list[Mention]] = {}  # the readers' mentions, kept for the turn's other calls

    @property
    def readable(self) -> list[Word]:
        """The tokens as the readers of :mod:`data_gen.readings` see them (built on first use)."""
        if self._readable is None:
            self._readable = []
            for index, token in enumerate(self.tokens):
                last_of_word = index + 1 == len(self.tokens) or self.tokens[index + 1].word != token.word
                pause = last_of_word and self.words[token.word][-1:] in _PAUSES
                self._readable.append(Word(token.text, self.text[token.start : token.end].lower(), token.word, pause))
        return self._readable

    @property
    def corrections(self) -> list[int]:
        """The readable tokens that start a correction (:func:`data_gen.readings.corrections`; found on first use)."""
        if self._corrections is None:
            self._corrections = corrections(self.readable)
        return self._corrections

    def words_of(self, start: int, end: int) -> str:
        """The text of tokens ``start`` to ``end``, as written."""
        return self.text[self.tokens[start].start : self.tokens[end].end]

    @classmethod
    def of(cls, text: str) -> Utterance:
        """The utterance of a text split on whitespace."""
        return cls(text.split())

    def _find(self, form: list[str]) -> int | None:
        # Index of the last token of the first occurrence of ``form``, or None.
        key = tuple(form)
        if key not in self._found:
            pairs = list(itertools.pairwise(key)) or [key]
            if not key or any(pair not in self._first for pair in pairs):
                found = None
            elif len(key) <= 2:
                found = self._first[key] + len(key) - 1
            else:
                # A match starts at a token (after a space): the offset names it.
                at = self._joined.find(" " + " ".join(key) + " ", self._starts[self._first[pairs[0]]])
                found = None if at < 0 else bisect.bisect_left(self._starts, at) + len(key) - 1
            self._found[key] = found
        return self._found[key]

    def first_span(self, forms: Iterable[list[str]]) -> tuple[int, int] | None:
        """The tokens (first, last) of the form heard first, each form at its first occurrence, or ``None``."""
        best: tuple[int, int] | None = None
        for form in forms:
            end = self._find(form)
            if end is not None and (best is None or end < best[1]):
                best = (end - len(form) + 1, end)
        return best

    def heard_at(self, value: Any) -> int | None:
        """After how many words the value has first been heard, or ``None`` if it never is.

        Args:
            value: A scalar value.

        Returns:
            ``k`` such that the first ``k`` words hold one of the value's forms, the smallest such ``k``.
        """
        found = self.first_span(value_forms(value))
        return None if found is None else self.tokens[found[1]].word + 1

    def span(self, value: Any) -> str | None:
        """The text in which the value is first heard, exactly as written (for answer facts), or ``None``."""
        found = self.first_span(value_forms(value))
        return None if found is None else self.words_of(*found)
