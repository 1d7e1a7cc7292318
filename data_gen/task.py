"""What a task grammar produces: the user's words, what those words make likely at each point, and the answer.

A grammar (one function per kind of task, in ``data_gen/domains``) writes an utterance phrase by phrase with an
:class:`UtteranceBuilder` and attaches a :class:`Reading` wherever the words heard so far change what the user
most likely wants. The speculative expert (``data_gen/expert``, also the generator's teacher) turns readings into
actions on the clock: it issues a reading's calls as soon as its confidence reaches the threshold, modifies or
cancels them when a later reading differs, and waits for the final reading (the gold one, at the end of the
utterance) before a state-changing call is committed.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from clocktune.timeline.events import CallPlacement
from clocktune.timeline.refs import iter_refs

# Endings speakers add after the part that matters; they are what makes early calls pay off.
TAILS = (
    "please",
    "if you can",
    "thanks",
    "for me please",
    "when you get a chance",
    "thank you",
    "if that's okay",
    "real quick",
    "I'd appreciate it",
    "no rush",
)


@dataclass
class PlannedCall:
    """A call the user wants, as a grammar states it.

    Args:
        key: Role of the call within the task (``"search"``, ``"book"``); stable across readings so the expert
            can tell a changed call (modify) from a new one.
        name: Tool name.
        arguments: Literal values, or ``{"$ref": "<key>"}`` / ``{"$ref": "<key>.<path>"}`` for the result of
            another planned call of the same task (a dependency edge).
    """

    key: str
    name: str
    arguments: dict[str, Any]


def call(key: str, tool: str, /, **arguments: Any) -> PlannedCall:
    """Shorthand for :class:`PlannedCall`: ``call("w", "get_weather", city="Paris")`` (any argument name works)."""
    return PlannedCall(key, tool, arguments)


def ref(key: str, path: str = "") -> dict[str, str]:
    """A reference to planned call ``key``'s result, or to ``path`` inside it (dot-separated keys and indices)."""
    return {"$ref": f"{key}.{path}" if path else key}


def referenced_keys(arguments: Any) -> list[str]:
    """The planned calls whose results ``arguments`` reference (``{"$ref": "key.path"}``), each once, in order."""
    return list(dict.fromkeys(iter_refs(arguments)))


def rekey(arguments: Any, ids: dict[str, str]) -> Any:
    """``arguments`` with each ``$ref`` to a planned call's key turned into one to the call id standing for it.

    Args:
        arguments: A planned call's arguments (planned calls reference each other by key).
        ids: The call id of each referenced key.

    Returns:
        The arguments as a timeline call writes them (timeline calls reference call ids).
    """
    if isinstance(arguments, dict):
        if len(arguments) == 1 and isinstance(arguments.get("$ref"), str):
            key, _, path = arguments["$ref"].partition(".")
            return {"$ref": f"{ids[key]}.{path}" if path else ids[key]}
        return {name: rekey(value, ids) for name, value in arguments.items()}
    if isinstance(arguments, list):
        return [rekey(value, ids) for value in arguments]
    return arguments


@dataclass
class Reading:
    """The calls the first ``at_word`` words of an utterance make most likely, and how likely they are."""

    at_word: int
    confidence: float
    calls: list[PlannedCall]


@dataclass
class Answer:
    """The agent's final words of a turn and the facts a correct answer must contain."""

    text: str
    facts: list[str] = field(default_factory=list)


# Maps the results of a turn's gold calls (by key) to the answer.
AnswerFn = Callable[[dict[str, Any]], Answer]


@dataclass
class Turn:
    """One user utterance and how the agent should end the turn.

    Args:
        words: The utterance, one word per item.
        readings: Readings ordered by ``at_word``; the last is the gold reading at ``len(words)`` with
            confidence 1.0.
        answer: Builds the final answer from the gold calls' results.
    """

    words: list[str]
    readings: list[Reading]
    answer: AnswerFn

    @property
    def gold(self) -> Reading:
        """The reading once the whole utterance is heard."""
        return self.readings[-1]


@dataclass
class Task:
    """A whole dialogue as a grammar wrote it: one or more turns.

    Args:
        kind: The task's kind.
        turns: Its turns.
        placements: For an imported conversation, where each call was placed and why (copied into the timeline).
    """

    kind: str
    turns: list[Turn]
    placements: list[CallPlacement] = field(default_factory=list)


@dataclass
class TaskContext:
    """What a grammar may use: randomness, the backend's initial state, and the planner's threshold.

    Args:
        rng: The dialogue's random generator; grammars draw everything from it.
        state: Initial backend state (read it to choose ids that exist; do not modify it).
        threshold: Confidence at which the teacher acts on a reading.
        early_wrong_rate: Probability that a guess made before the words settle it is confident enough to act on.
    """

    rng: random.Random
    state: dict[str, Any]
    threshold: float = 0.6
    early_wrong_rate: float = 0.6

    def utterance(self) -> UtteranceBuilder:
        """Starts a new utterance."""
        return UtteranceBuilder(self)

    def confident(self) -> float:
        """A confidence at or above the threshold."""
        return round(self.rng.uniform(self.threshold, 0.97), 2)

    def unsure(self) -> float:
        """A confidence below the threshold."""
        return round(self.rng.uniform(0.2, self.threshold - 0.01), 2)

    def guess(self) -> float:
        """Confidence of a guess ahead of the words: above the threshold with probability ``early_wrong_rate``."""
        return self.confident() if self.rng.random() < self.early_wrong_rate else self.unsure()

    def pick(self, options: list | tuple) -> Any:
        """One item of ``options``, drawn with the dialogue's generator."""
        return options[self.rng.randrange(len(options))]


class UtteranceBuilder:
    """Writes one utterance phrase by phrase and records readings at the word they become true.

    Example:
        >>> u = ctx.utterance()
        >>> u.say(ctx.pick(["what's the weather", "how's the weather looking"]), "in")
        >>> u.say(city).reading([call("w", "get_weather", city=city)], confidence=1.0)
        >>> turn = u.done(answer=lambda r: Answer(f"{r['w']['temp_c']} degrees", [str(r['w']['temp_c'])]))
    """

    def __init__(self, context: TaskContext):
        self.context = context
        self.words: list[str] = []
        self.readings: list[Reading] = []

    def say(self, *phrases: str) -> UtteranceBuilder:
        """Appends the words of each phrase; empty phrases add nothing."""
        for phrase in phrases:
            self.words.extend(phrase.split())
        return self

    def reading(self, calls: list[PlannedCall], confidence: float) -> UtteranceBuilder:
        """States what the words so far make most likely (replacing any reading at the same word)."""
        if self.readings and self.readings[-1].at_word == len(self.words):
            self.readings.pop()
        self.readings.append(Reading(len(self.words), confidence, list(calls)))
        return self

    def done(self, calls: list[PlannedCall] | None = None, answer: AnswerFn | None = None, tail: float = 0.6) -> Turn:
        """Ends the utterance.

        Args:
            calls: The gold calls; defaults to the calls of the last reading.
            answer: Builds the final answer from the gold calls' results (by key). Required.
            tail: Probability of a closing phrase ("please", "thanks") after the last meaningful word, which
                lets confident readings act before the user stops.

        Returns:
            The finished turn.
        """
        if answer is None:
            raise ValueError("done() needs an answer function")
        if calls is None:
            calls = self.readings[-1].calls if self.readings else []
        if self.context.rng.random() < tail:
            self.say(self.context.pick(TAILS))
        if not self.words:
            raise ValueError("an utterance needs words")
        self.reading(calls, 1.0)
        return Turn(self.words, self.readings, answer)
