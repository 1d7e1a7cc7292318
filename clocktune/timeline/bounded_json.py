"""JSON parsing with a bound on nesting depth and size, for every JSON text that comes from outside the process.

Python's ``json`` module recurses once per nesting level, so a hostile or corrupt text (``[[[[...]]]]`` 10,000
deep in a timeline line, a payload string or a model's output) raises ``RecursionError``: not a ``ValueError``,
so it escapes the code that reports bad lines and kills the command with a traceback. Here the depth is measured
without recursion before ``json.loads`` runs, and a text that is too deep or too long is a plain ``ValueError``.
"""

from __future__ import annotations

import json
import re
from typing import Any

# Deepest nesting accepted. Measured: 2000 generated dialogues (seed 0) nest 4 deep in a line (strings aside) and 5
# in a payload string; timelines imported from the BFCL fixtures (tests/fixtures/bfcl) 4 in a line and 9 in a
# payload (file-system states). 100 leaves ten times the deepest real data as headroom and stays far below the
# ~1000 frames at which ``json.loads`` (and the validator's recursive walks over the parsed value) would hit the
# interpreter's recursion limit.
MAX_DEPTH = 100

# Longest text accepted, in characters. Measured: generated lines reach 21 kB, BFCL-imported lines 60 kB; BFCL's
# long-context category and journal lines (a timeline plus its session log) are a few times larger. 16 Mi characters
# keeps them all with a wide margin while bounding the memory one parse can take (a few hundred MB at worst).
MAX_CHARS = 16 * 1024 * 1024

_BRACKET = re.compile(r"[\[\]{}]")
_BRACKET_BYTES = re.compile(rb"[\[\]{}]")


def _skeleton(text: str | bytes) -> str | bytes:
    # The text without its strings, by plain str/bytes operations (linear, no regex backtracking, no recursion).
    # Dropping escaped backslashes first, left to right as JSON pairs them, leaves ``\"`` only for escaped quotes;
    # dropping those too leaves quotes that only delimit strings, so every odd piece of a split is a string.
    # For invalid JSON (an unterminated string) the figure is only an estimate, and the parse fails anyway.
    if isinstance(text, bytes):
        pieces = text.replace(b"\\\\", b"").replace(b'\\"', b"").split(b'"')
        return b"".join(pieces[::2])
    pieces = text.replace("\\\\", "").replace('\\"', "").split('"')
    return "".join(pieces[::2])


def json_depth(text: str | bytes, stop_above: int | None = None) -> int:
    """Measures how deep a JSON text nests, without recursion and without parsing it.

    Brackets inside strings do not count; for invalid JSON the figure is only an estimate.

    Args:
        text: JSON text.
        stop_above: Stop counting once the depth exceeds this (the result is then ``stop_above + 1``).

    Returns:
        The deepest nesting of arrays and objects: 0 for a scalar, 1 for ``[]`` or ``{"a": 1}``. With
        ``stop_above``, a text within the limit may get an upper bound instead (its number of opening brackets).
    """
    binary = isinstance(text, bytes)
    opens = text.count(b"[") + text.count(b"{") if binary else text.count("[") + text.count("{")
    if stop_above is not None and opens <= stop_above:
        return opens  # an upper bound that is already within the limit: no need to scan
    openers = (ord("["), ord("{")) if binary else ("[", "{")
    depth = deepest = 0
    for match in (_BRACKET_BYTES if binary else _BRACKET).finditer(_skeleton(text)):
        if match.group()[0] in openers:
            depth += 1
            if depth > deepest:
                deepest = depth
                if stop_above is not None and deepest > stop_above:
                    break
        else:
            depth -= 1
    return deepest


def check_json_bounds(text: str | bytes, max_depth: int = MAX_DEPTH, max_chars: int = MAX_CHARS) -> None:
    """Rejects a JSON text that is too long or nests too deep to parse safely.

    Args:
        text: JSON text (``bytes`` count their length in bytes).
        max_depth: Deepest nesting allowed.
        max_chars: Longest text allowed.

    Raises:
        ValueError: Naming the limit the text exceeds.
    """
    if len(text) > max_chars:
        raise ValueError(f"JSON text of {len(text):,} characters is longer than the limit of {max_chars:,}")
    if json_depth(text, stop_above=max_depth) > max_depth:
        raise ValueError(f"JSON nested deeper than {max_depth} levels")


class DuplicateKeyError(ValueError):
    """A JSON object that gives one key twice (``json`` would keep the last silently)."""

    def __init__(self, key: str):
        super().__init__(f"duplicate key {key!r}")
        self.key = key


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` for ``json.loads`` that refuses an object giving a key twice.

    Args:
        pairs: The object's key-value pairs, in the order of the text.

    Returns:
        The object as a dict.

    Raises:
        DuplicateKeyError: Naming the first key given twice.
    """
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKeyError(key)
            seen.add(key)
    return value


def loads_bounded(text: str | bytes, max_depth: int = MAX_DEPTH, max_chars: int = MAX_CHARS, **kwargs: Any) -> Any:
    """``json.loads`` that cannot raise ``RecursionError``: size and depth are checked first; keys are unique.

    Args:
        text: JSON text.
        max_depth: Deepest nesting allowed.
        max_chars: Longest text allowed.
        **kwargs: Passed on to ``json.loads`` (e.g. ``parse_constant``); ``object_pairs_hook`` defaults to
            :func:`unique_keys`.

    Returns:
        The parsed value.

    Raises:
        ValueError: For a text beyond the limits, invalid JSON (``json.JSONDecodeError``), or an object giving a key
            twice (:class:`DuplicateKeyError`).
    """
    check_json_bounds(text, max_depth, max_chars)
    kwargs.setdefault("object_pairs_hook", unique_keys)
    return json.loads(text, **kwargs)
