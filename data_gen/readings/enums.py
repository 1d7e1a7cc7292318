"""Enum members said in words: by their own words, with the parameter's noun, or by the description's cue words.

A parameter's JSON schema may list its values (``"enum": ["ECONOMY", "PREMIUM_ECONOMY", "BUSINESS", "FIRST"]``).
A member is heard:

- by its words followed by one of the parameter's nouns (the words of its name: ``first class`` for
  ``cabin_class``);
- by its words alone (``premium economy``, ``business``) where a pause, the end, or a word that cannot start a
  noun phrase of another sense follows, and the words are not a number ("first" is often an ordinal, so FIRST
  needs its noun), and no other member's words run on from them ("economy" within "premium economy" is not
  ECONOMY);
- by the cue words its description gives (``"rating_desc: best rated first; price_asc: cheapest first"``,
  ``"rating_desc (best rated first)"``, ``"rating_desc = best rated first"``).

"the business meeting" is then no BUSINESS: ``meeting`` follows the member's word and is not a noun of the parameter.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from data_gen.readings import Mention, Word

__all__ = ["enum_mentions"]

# Words after a member's words that leave it the member ("business please", "economy for two"), beyond pauses.
_LINKS = frozenset(
    ["please", "for", "to", "on", "and", "or", "if", "with", "seat", "seats", "ticket", "tickets", "fare", "fares",
     "cabin", "option", "mode", "one", "ones", "then", "from", "at", "in", "this", "that", "instead", "is", "would"]
)  # fmt: skip


def _cues(description: str, member: str, members: list[str]) -> list[str]:
    # The phrase the description gives a member: after "member:" / "member =" up to ; , . or the next member, or
    # inside "member (...)".
    found = []
    escaped = re.escape(member)
    for match in re.finditer(rf"(?<![\w]){escaped}(?![\w])\s*(?:\(([^)]*)\)|[:=]\s*([^;,.\n]*))", description):
        phrase = (match.group(1) or match.group(2) or "").strip()
        for other in members:
            if other != member:
                phrase = re.split(rf"(?<![\w]){re.escape(other)}(?![\w])", phrase)[0]
        if phrase.strip():
            found.append(phrase.strip())
    return found


def enum_mentions(
    words: list[Word], members: list[str], parameter: str, description: str, tokens: Callable[[str], list[str]]
) -> list[Mention]:
    """Every mention of the members of one enum in a turn (see the module docstring).

    Args:
        words: The turn's tokens.
        members: The enum's string members.
        parameter: The parameter's name (its words are its nouns).
        description: The parameter's description (cue phrases), or ``""``.
        tokens: The normaliser of ``data_gen.determinable`` (a value's canonical tokens).

    Returns:
        The mentions, values the members as written.
    """
    texts = [word.text for word in words]
    forms = {member: tokens(member) for member in members}
    nouns = set(tokens(parameter)) - {token for form in forms.values() for token in form}
    found: list[Mention] = []

    def occurrences(form: list[str]):
        size = len(form)
        for start in range(len(texts) - size + 1):
            if texts[start : start + size] == form:
                yield start, start + size - 1

    for member, form in forms.items():
        if not form:
            continue
        numeric = all(token.isdigit() for token in form)
        longer = [other for other in forms.values() if len(other) > len(form) and other[-len(form) :] == form]
        for start, end in occurrences(form):
            if any(start >= len(o) - len(form) and texts[start - len(o) + len(form) : end + 1] == o for o in longer):
                continue  # "economy" as the end of "premium economy"
            following = texts[end + 1] if end + 1 < len(texts) else None
            if following in nouns:
                found.append(Mention(frozenset({member}), start, end + 1, "enum"))
            elif not numeric and (following is None or words[end].pause or following in _LINKS):
                if following is not None and any(o[: len(form) + 1] == [*form, following] for o in forms.values()):
                    continue  # "premium" before "economy": wait for the member the words run on to
                found.append(Mention(frozenset({member}), start, end, "enum"))
        for cue in _cues(description, member, members):
            for start, end in occurrences(tokens(cue)):
                found.append(Mention(frozenset({member}), start, end, "enum"))
    return found
