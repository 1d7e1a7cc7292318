"""The user's side of a session: when each utterance's recogniser updates arrive.

A session asks its speech source for the first utterance when it starts and for each next one when the agent has
answered the last. Two sources exist: :class:`RecordedSpeech` replays the user chunks of a recorded timeline (how
``clocktune eval`` and every replay play a dialogue), and :class:`SpokenWords` speaks an utterance's words at a
drawn speaking rate (how the generator plays a task through its expert, ``data_gen.generate``).

A third, :class:`LiveSpeech`, has no plan at all: a live user's chunks reach the session as they are heard
(``Session.hear``), and the session ends when the user leaves (``Session.finish``), not after a known count.

The first two place the next utterance where a recorded timeline can say where it was: :class:`RecordedSpeech` measures the
pause from the final answer's ``t`` (when the agent started writing it; the log holds no other time of the answer)
and applies it from there, so a log replayed on the virtual clock puts every chunk at its logged time.
:class:`SpokenWords` draws the pause after the answer's end, as a user waits for the agent to finish.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Protocol

from clocktune.clock import SpeechConfig, speak, speaker_rate
from clocktune.runtime.virtual_clock import GRID_DIGITS
from clocktune.timeline.events import Event, Timeline

__all__ = ["LiveSpeech", "RecordedSpeech", "SpeechSource", "SpokenChunk", "SpokenWords", "utterances"]


@dataclass(frozen=True)
class SpokenChunk:
    """One recogniser update of a speech source.

    Args:
        id: The source's own id of the update (what a later update's ``revises`` names).
        t: Session seconds when it arrives.
        text: The words recognised.
        final: Whether it ends the utterance.
        revises: Id of the earlier update it replaces, if any.
    """

    id: str
    t: float
    text: str
    final: bool
    revises: str | None = None


class SpeechSource(Protocol):
    """Where a session's user speech comes from."""

    @property
    def utterance_count(self) -> int:
        """How many utterances the user speaks."""
        ...

    def first(self) -> list[SpokenChunk]:
        """The first utterance's updates, in order of arrival."""
        ...

    def after_answer(self, index: int, answer_t: float, answered_t: float) -> list[SpokenChunk]:
        """Utterance ``index`` (1 or more), once the agent has answered the one before.

        Args:
            index: The utterance.
            answer_t: When the agent started writing its final answer (the answer event's ``t``).
            answered_t: When the answer was out (after its decode).

        Returns:
            Its updates, in order of arrival.
        """
        ...


def utterances(timeline: Timeline) -> tuple[list[list[Event]], list[float]]:
    """Splits a recorded timeline's user chunks into utterances and measures the pause before each next one.

    Args:
        timeline: A recorded timeline.

    Returns:
        The chunks of each utterance, and for each utterance after the first the seconds between the previous
        turn's final answer (its ``t``) and its first chunk.
    """
    turns: list[list[Event]] = [[]]
    gaps: list[float] = []
    last_answer_t: float | None = None
    for event in timeline.events:
        if event.kind == "user_chunk":
            if not turns[-1] and len(turns) > 1:
                gaps.append(max(0.0, event.t - (last_answer_t if last_answer_t is not None else event.t)))
            turns[-1].append(event)
            if event.final:
                turns.append([])
        elif event.kind == "say" and event.final:
            last_answer_t = event.t
    if not turns[-1]:
        turns.pop()
    while len(gaps) < len(turns) - 1:
        gaps.append(1.0)
    return turns, gaps


class RecordedSpeech:
    """The user chunks of a recorded timeline, each utterance at its recorded distance from the answer before it.

    Args:
        timeline: A recorded timeline (generated, imported, or a session's log).

    Raises:
        ValueError: When the timeline has no user speech.
    """

    def __init__(self, timeline: Timeline) -> None:
        self.turns, self.gaps = utterances(timeline)
        if not self.turns:
            raise ValueError(f"timeline {timeline.id!r} has no user speech to replay")

    @property
    def utterance_count(self) -> int:
        """How many utterances the timeline holds."""
        return len(self.turns)

    def _chunks(self, index: int, start: float) -> list[SpokenChunk]:
        chunks = self.turns[index]
        offset = start - chunks[0].t
        return [
            SpokenChunk(c.id, round(c.t + offset, GRID_DIGITS), c.text or "", bool(c.final), c.revises) for c in chunks
        ]

    def first(self) -> list[SpokenChunk]:
        """The first utterance, at its recorded times."""
        return self._chunks(0, self.turns[0][0].t)

    def after_answer(self, index: int, answer_t: float, answered_t: float) -> list[SpokenChunk]:
        """Utterance ``index``, starting its recorded pause after the answer's ``t`` (see the module docstring)."""
        return self._chunks(index, answer_t + self.gaps[index - 1])


class SpokenWords:
    """Utterances spoken from their words: a speaking rate drawn per user, recogniser updates from
    :func:`clocktune.clock.speak`, a pause drawn after each answer's end.

    Args:
        turn_words: The words of each utterance.
        config: The speech model.
        seed: The dialogue's seed; the draws come from its ``speech`` stream.
    """

    def __init__(self, turn_words: list[list[str]], config: SpeechConfig, seed: int) -> None:
        if not turn_words:
            raise ValueError("a dialogue needs at least one utterance")
        self.turn_words = turn_words
        self.config = config
        self._rng = random.Random(f"{seed}:speech")
        self._rate = speaker_rate(config, self._rng)
        self._count = 0

    @property
    def utterance_count(self) -> int:
        """How many utterances the user speaks."""
        return len(self.turn_words)

    def _spoken(self, index: int, start: float) -> list[SpokenChunk]:
        chunks, last_garbled = [], None
        for chunk in speak(self.turn_words[index], start, self._rate, self.config, self._rng):
            self._count += 1
            # On the grid before the session adds its start time, for the reason of ``VirtualClockLoop.call_later``.
            t = round(chunk.t, GRID_DIGITS)
            spoken = SpokenChunk(f"s{self._count}", t, chunk.text, chunk.final, last_garbled)
            chunks.append(spoken)
            last_garbled = spoken.id if chunk.garbled else None
        return chunks

    def first(self) -> list[SpokenChunk]:
        """The first utterance, starting at a drawn time."""
        return self._spoken(0, self._rng.uniform(self.config.start_min_s, self.config.start_max_s))

    def after_answer(self, index: int, answer_t: float, answered_t: float) -> list[SpokenChunk]:
        """Utterance ``index``, a drawn pause after the answer was out."""
        gap = self._rng.uniform(self.config.turn_gap_min_s, self.config.turn_gap_max_s)
        return self._spoken(index, answered_t + gap)


class LiveSpeech:
    """A live user's speech: nothing is scheduled; chunks arrive through ``Session.hear`` as the user speaks.

    ``live`` tells the session that more speech may come at any time, so it never tells a waiting agent "nothing is
    pending", and that the dialogue ends when the user leaves rather than after a known number of utterances.
    """

    live = True

    def __init__(self) -> None:
        self.heard_utterances = 0
        self._speaking = False

    def heard(self, final: bool) -> None:
        """Counts a chunk: the first after a final (or the first of all) begins an utterance."""
        if not self._speaking:
            self.heard_utterances += 1
        self._speaking = not final

    @property
    def utterance_count(self) -> int:
        """The utterances begun so far (a live user may always say one more)."""
        return self.heard_utterances

    def first(self) -> list[SpokenChunk]:
        """Nothing: the user has not spoken yet."""
        return []

    def after_answer(self, index: int, answer_t: float, answered_t: float) -> list[SpokenChunk]:
        """Nothing: the next utterance comes when the user speaks it."""
        return []
