"""The clock: the three models that set every time stamp (docs/design.md §2).

- speech: when each recogniser update of the user's words arrives;
- tools: how long each call takes and whether it fails (``LatencyModel`` on each tool schema);
- agent compute: how long the agent takes to read new events and to emit an action, from a device profile.

The generator and the runtime both use these functions, so a generated timeline is what the runtime would
have produced under the same seed. Nothing here reads the wall clock.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import ConfigDict, Field, GetCoreSchemaHandler
from pydantic_core import CoreSchema

from clocktune.timeline.events import LatencyModel
from clocktune.yaml_config import (
    Probability,
    check_fields,
    every_field_required,
)

_STRICT = ConfigDict(extra="forbid")


def _between(low: float, high: float) -> Any:
    # A finite number in [low, high]. Every rate and duration of a config has a credible upper (or lower) end: a
    # value past it (a 1e9 s pause, a speaker at 1e-9 words/s, a device decoding 1e-300 tokens/s) would make a
    # session on the virtual clock run for ever, or overflow, while passing as "a positive number".
    return Annotated[float, Field(ge=low, le=high, allow_inf_nan=False)]


# The slowest credible speaker says a word every two seconds; the fastest auctioneers reach about 10 words/s.
WordsPerSecond = _between(0.5, 10.0)
# The longest silence inside an utterance, recogniser delay or gap between turns a config may ask for: a minute.
ShortSeconds = _between(0.0, 60.0)
# The widest log-space spread of a tool's latency: sigma 3 already puts one call in a hundred 1000x off its median,
# and exp() of a larger one overflows within a few thousand draws.
LogSpread = _between(0.0, 3.0)
# The largest slowdown of a tail call.
Slowdown = _between(1.0, 100.0)
# How far users' speaking rates spread, in words/s.
RateSpread = _between(0.0, 10.0)
# How much every tool's median latency may be scaled.
MedianScale = _between(0.01, 100.0)
# A device's rates, in tokens/s: the slowest credible one decodes a token a second and prefills ten.
PrefillRate = _between(10.0, 1e7)
DecodeRate = _between(1.0, 1e6)
# A fixed cost per action, in seconds.
OverheadSeconds = _between(0.0, 10.0)
# The most words in one recogniser update.
ChunkWords = Annotated[int, Field(ge=1, le=100)]


@dataclass
class SpeechConfig:
    """How users speak and how the recogniser reports it.

    Args:
        words_per_s: Mean speaking rate over users (conversational speech is about 3 words/s), in [0.5, 10].
        words_per_s_sd: Spread of the rate between users.
        word_jitter: Relative spread of single word durations.
        pause_prob: Probability of a pause after a word.
        pause_min_s: Shortest pause.
        pause_max_s: Longest pause.
        chunk_words_min: Fewest words in one recogniser update.
        chunk_words_max: Most words in one recogniser update.
        recognizer_lag_s: Delay between the end of a word and the update that contains it.
        revision_rate: Probability that an update is a wrong partial that a later update revises.
        revision_delay_s: Delay between a wrong partial and its revision.
        start_min_s: Earliest start of the first utterance.
        start_max_s: Latest start of the first utterance.
        turn_gap_min_s: Shortest gap between the agent's answer and the user's next utterance.
        turn_gap_max_s: Longest such gap.

    Every duration lies in [0, 60] s and every chunk size in [1, 100] words: a config past these ends describes no
    speaker, and would stall the virtual clock.
    """

    __pydantic_config__ = _STRICT

    words_per_s: WordsPerSecond = 3.0
    words_per_s_sd: RateSpread = 0.4
    word_jitter: Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)] = 0.25  # 1 or more: words of no length
    pause_prob: Probability = 0.08
    pause_min_s: ShortSeconds = 0.15
    pause_max_s: ShortSeconds = 0.6
    chunk_words_min: ChunkWords = 1
    chunk_words_max: ChunkWords = 3
    recognizer_lag_s: ShortSeconds = 0.12
    revision_rate: Probability = 0.05
    revision_delay_s: ShortSeconds = 0.25
    start_min_s: ShortSeconds = 0.2
    start_max_s: ShortSeconds = 0.8
    turn_gap_min_s: ShortSeconds = 0.8
    turn_gap_max_s: ShortSeconds = 2.0

    def __post_init__(self) -> None:
        check_fields(self)
        for low, high in (
            ("pause_min_s", "pause_max_s"),
            ("chunk_words_min", "chunk_words_max"),
            ("start_min_s", "start_max_s"),
            ("turn_gap_min_s", "turn_gap_max_s"),
        ):
            if getattr(self, low) > getattr(self, high):
                raise ValueError(f"{low} ({getattr(self, low)}) must not exceed {high} ({getattr(self, high)})")


@dataclass(slots=True)
class SpeechChunk:
    """One recogniser update: ``words[start:end]`` of the utterance, heard at ``t``.

    ``garbled`` marks a wrong partial whose text differs from the words; the next chunk revises it.
    """

    t: float
    text: str
    start: int
    end: int
    final: bool
    garbled: bool = False


def speaker_rate(config: SpeechConfig, rng: random.Random) -> float:
    """Draws one user's speaking rate in words per second (kept within 40-160% of the mean)."""
    rate = rng.gauss(config.words_per_s, config.words_per_s_sd)
    return min(max(rate, 0.4 * config.words_per_s), 1.6 * config.words_per_s)


def _garble(word: str) -> str:
    # A recogniser's typical slip: a near-homophone, here a truncated or extended word.
    return word[:-1] if len(word) > 3 else word + "h"


def speak(
    words: list[str], start_s: float, rate: float, config: SpeechConfig, rng: random.Random
) -> list[SpeechChunk]:
    """Times an utterance and splits it into recogniser updates.

    Args:
        words: The utterance.
        start_s: When the user starts speaking.
        rate: The user's speaking rate (words/s), from :func:`speaker_rate`.
        config: Speech model.
        rng: Random generator for word durations, pauses, chunking and revisions.

    Returns:
        Updates ordered by time; the last is final. A garbled partial is followed by its revision.
    """
    ends, t = [], start_s
    for _ in words:
        t += (1.0 / rate) * rng.uniform(1 - config.word_jitter, 1 + config.word_jitter)
        ends.append(t)
        if rng.random() < config.pause_prob:
            t += rng.uniform(config.pause_min_s, config.pause_max_s)
    chunks, start, last_t = [], 0, start_s
    while start < len(words):
        end = min(len(words), start + rng.randint(config.chunk_words_min, config.chunk_words_max))
        # A revision delays the updates after it: the recogniser reports in order.
        t = last_t = max(ends[end - 1] + config.recognizer_lag_s, last_t)
        final = end == len(words)
        text = " ".join(words[start:end])
        if not final and rng.random() < config.revision_rate:
            garbled = " ".join(words[start : end - 1] + [_garble(words[end - 1])])
            chunks.append(SpeechChunk(t, garbled, start, end, False, garbled=True))
            t = last_t = t + config.revision_delay_s
        chunks.append(SpeechChunk(t, text, start, end, final))
        start = end
    return chunks


@dataclass
class ToolLatencyConfig:
    """Defaults applied to every tool's latency model; each tool keeps its own median, scaled here.

    Args:
        median_scale: Multiplies every tool's median latency (1.0 keeps medians around 600 ms), in [0.01, 100].
        sigma: Log-space spread of the lognormal body, in [0, 3].
        tail_prob: Probability of a slow call.
        tail_scale: Largest slowdown of a slow call, in [1, 100].
        failure_rate: Probability that a call fails.
    """

    __pydantic_config__ = _STRICT

    median_scale: MedianScale = 1.0
    sigma: LogSpread = 0.45
    tail_prob: Probability = 0.05
    tail_scale: Slowdown = 4.0
    failure_rate: Probability = 0.0

    def __post_init__(self) -> None:
        check_fields(self)

    def apply(self, median_s: float) -> LatencyModel:
        """Returns the latency model of a tool whose catalogue median is ``median_s``."""
        return LatencyModel(
            median_s=round(median_s * self.median_scale, 3),
            sigma=self.sigma,
            tail_prob=self.tail_prob,
            tail_scale=self.tail_scale,
            failure_rate=self.failure_rate,
        )


def sample_latency(model: LatencyModel, rng: random.Random) -> float:
    """Draws one call's latency in seconds: lognormal around the median, times a slowdown for tail calls."""
    latency = model.median_s * math.exp(rng.gauss(0.0, model.sigma))
    if rng.random() < model.tail_prob:
        latency *= rng.uniform(1.0, model.tail_scale)
    return latency


def sample_failure(model: LatencyModel, rng: random.Random) -> bool:
    """Whether one call fails."""
    return rng.random() < model.failure_rate


# The tokens a model decodes before the user hears an answer: the answer marker and a first word of up to two
# tokens (the header and clock token before them are fed, not decoded). The rest of the answer decodes while
# those words are spoken, so response latency charges these and no more.
FIRST_WORDS_TOKENS = 3


@dataclass
class DeviceProfile:
    """How fast the agent's model reads and writes on a device.

    Read from a file (``clocktune eval --profile FILE``, a generator config's ``device``), every field is required:
    a profile is a set of measurements, and one a file misses must not silently take another device's figure. Built
    in Python, the fields default to the ``h200-3b`` profile's.

    Args:
        name: Profile name.
        prefill_tokens_per_s: Tokens per second when reading new events into the context, in [10, 1e7].
        decode_tokens_per_s: Tokens per second when generating an action, in [1, 1e6] (the slowest credible
            device decodes a token a second).
        action_overhead_s: Fixed cost per action (scheduling, parsing, dispatch), in [0, 10] s.
    """

    __pydantic_config__ = _STRICT

    name: str = "h200-3b"
    prefill_tokens_per_s: PrefillRate = 20000.0
    decode_tokens_per_s: DecodeRate = 150.0
    action_overhead_s: OverheadSeconds = 0.01

    def __post_init__(self) -> None:
        check_fields(self)

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return every_field_required(handler(source), handler)

    def prefill_s(self, tokens: int) -> float:
        """Seconds to read ``tokens`` new context tokens."""
        return tokens / self.prefill_tokens_per_s

    def action_s(self, tokens: int) -> float:
        """Seconds to emit an action of ``tokens`` tokens, overhead included."""
        return self.action_overhead_s + tokens / self.decode_tokens_per_s

    def first_words_s(self, tokens: int) -> float:
        """Seconds from the start of an answer until its first words are out.

        Args:
            tokens: The answer's length in tokens.

        Returns:
            The overhead and the answer's first ``FIRST_WORDS_TOKENS`` tokens (all of a shorter one).
        """
        return self.action_s(min(tokens, FIRST_WORDS_TOKENS))


# Rough batch-1 figures for a 3B model in bf16 on an H200, a 3B model quantised on a laptop CPU, and the
# 135M embedded model on a phone. Users with measurements should pass their own profile.
PROFILES: dict[str, DeviceProfile] = {
    "h200-3b": DeviceProfile("h200-3b", 20000.0, 150.0, 0.01),
    "laptop-cpu-3b": DeviceProfile("laptop-cpu-3b", 400.0, 20.0, 0.03),
    "phone-135m": DeviceProfile("phone-135m", 800.0, 40.0, 0.05),
}


def estimate_tokens(text: str) -> int:
    """Token count of ``text`` for the compute model (about four characters per token, as BPE vocabularies give)."""
    return 2 + len(text) // 4
