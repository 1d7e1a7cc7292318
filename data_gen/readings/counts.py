"""Numbers said as counts of what an argument is named for: "two adults and a child", "a couple of rooms".

An integer argument whose name holds a counted noun (``adults``, ``num_children``, ``rooms``, ``party_size``,
``guests``, ...) is heard where a count stands before that noun or one of its synonyms, with at most one other word
between ("a double room"):

| count | value |
|---|---|
| 2, two, twenty five | the number |
| a, an | 1 |
| a couple of, a pair of; a dozen | 2; 12 |
| both of us, four of us; a table for four (people only) | 2, 4; 4 |

When the turn names the noun at all, only such counts settle the argument: the bare "two" of "two nights, two adults"
is not ``adults: 2``.
"""

from __future__ import annotations

from data_gen.readings import Mention, Word

__all__ = ["COUNTED", "count_mentions", "counted_noun"]

# Each counted thing: the words that name it in an argument and in speech.
COUNTED: dict[str, frozenset[str]] = {
    "adults": frozenset(["adult", "adults", "grownup", "grownups"]),
    "children": frozenset(["child", "children", "kid", "kids"]),
    "infants": frozenset(["infant", "infants", "baby", "babies"]),
    "rooms": frozenset(["room", "rooms"]),
    "nights": frozenset(["night", "nights"]),
    "tickets": frozenset(["ticket", "tickets"]),
    "seats": frozenset(["seat", "seats"]),
    "people": frozenset(
        [
            "people",
            "person",
            "persons",
            "guest",
            "guests",
            "traveler",
            "travelers",
            "traveller",
            "travellers",
            "passenger",
            "passengers",
            "party",
        ]
    ),  # fmt: skip
}
# Words that make "a ... kids" no count of one ("a few kids"), or that are counts themselves.
_NOT_BETWEEN = frozenset(["few", "lot", "lots", "bunch", "handful", "number", "couple", "pair", "dozen", "of"])
_PEOPLE_AFTER_FOR = frozenset(["at", "on", "tonight", "tomorrow", "today", "please", "this", "next", "in", "and"])


def counted_noun(parameter: str, tokens) -> str | None:
    """The counted thing an argument's name ends in (``num_children`` → ``children``; ``party_size``, ``seat_count``
    too), or ``None``: ``ticket_id`` names a ticket, it does not count them.

    Args:
        parameter: The argument's name.
        tokens: The normaliser of ``data_gen.determinable``.

    Returns:
        A key of :data:`COUNTED`, or ``None``.
    """
    words = tokens(parameter)
    if len(words) >= 2 and words[-1] in ("size", "count", "total"):
        words = words[:-1]
    for thing, names in COUNTED.items():
        if words and words[-1] in names:
            return thing
    return None


def _count(words: list[Word], end: int) -> tuple[int, int] | None:
    # The count whose last token is ``end``: (value, first token).
    text = words[end].text
    if text.isdigit():
        return int(text), end
    if text in ("a", "an"):
        return 1, end
    if text == "dozen":
        return 12, end - (end >= 1 and words[end - 1].text == "a")
    if text == "of" and end >= 1 and words[end - 1].text in ("couple", "pair"):
        return 2, end - 1 - (end >= 2 and words[end - 2].text == "a")
    return None


def count_mentions(words: list[Word], thing: str) -> list[Mention]:
    """Every count of ``thing`` (a key of :data:`COUNTED`) in a turn (see the module docstring).

    Args:
        words: The turn's tokens.
        thing: What is counted.

    Returns:
        The mentions, values as integers.
    """
    names = COUNTED[thing]
    found: list[Mention] = []
    for index, word in enumerate(words):
        if word.text in names and index >= 1:
            count = _count(words, index - 1)
            if count is None and index >= 2 and words[index - 1].text not in _NOT_BETWEEN:
                count = _count(words, index - 2)  # one word between: "a double room", "two more adults"
            if count is not None:
                found.append(Mention(frozenset({count[0]}), count[1], index, "count"))
        if thing != "people":
            continue
        following = words[index + 1].text if index + 1 < len(words) else None
        if word.text == "both" and following == "of" and index + 2 < len(words) and words[index + 2].text == "us":
            found.append(Mention(frozenset({2}), index, index + 2, "count"))
        elif word.text.isdigit() and following == "of" and index + 2 < len(words) and words[index + 2].text == "us":
            found.append(Mention(frozenset({int(word.text)}), index, index + 2, "count"))
        elif word.text == "for" and following is not None and following.isdigit():
            after = words[index + 2].text if index + 2 < len(words) else None
            if after is None or words[index + 1].pause or after in _PEOPLE_AFTER_FOR:
                found.append(Mention(frozenset({int(following)}), index, index + 1, "count"))
    return found
