"""Time codecs: how the clock in front of every event is written (docs/design.md §3).

A codec turns an event time into the clock text placed at the start of the event's message, and reads it back.
Three codecs are built in:

- ``text``: the time in seconds as plain digits, ``"[12.3s]\\n"``; no new vocabulary. The newline ends the clock at
  a pre-tokenizer boundary, so the clock's tokens never merge with the message text that follows.
- ``abs_bins``: absolute time as special tokens at a fixed resolution: one token for the bin within the minute,
  ``<|t_s123|>`` (12.3 s at 0.1 s), preceded by a minute token ``<|t_m3|>`` only from the first minute on, so
  that short sessions spend one token per clock. The vocabulary is bounded by ``max_minutes``; later times
  saturate at the last bin.
- ``log_delta``: time since the previous event as one special token out of log-spaced bins, ``<|dt0|>`` (zero)
  to ``<|dt32|>`` (60 s and more).

Each codec is a small frozen dataclass whose fields are its whole configuration: ``to_dict`` / ``from_dict``
round-trip it (the tokenizer stores it, see ``clocktune.encoding.tokenizer``).
"""

from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from bisect import bisect_right
from dataclasses import asdict, dataclass
from functools import cached_property
from typing import Any, ClassVar


class TimeCodec(ABC):
    """Writes and reads the clock text placed before each event."""

    name: ClassVar[str]

    @abstractmethod
    def special_tokens(self) -> list[str]:
        """Returns the tokens this codec adds to the vocabulary (empty when it writes plain text)."""

    @abstractmethod
    def encode(self, t: float, prev_t: float = 0.0) -> str:
        """Returns the clock text for an event.

        Args:
            t: Event time in seconds from session start.
            prev_t: Time of the previous event (0.0 before the first); only delta codecs use it.

        Returns:
            The clock text.

        Raises:
            ValueError: For a negative, NaN or infinite time, or a time before ``prev_t``.
        """

    @abstractmethod
    def decode(self, text: str, prev_t: float = 0.0) -> float:
        """Reads a clock back.

        Args:
            text: Clock text as ``encode`` wrote it.
            prev_t: Time of the previous event; only delta codecs use it.

        Returns:
            The time the clock states, in seconds from session start (exact up to the codec's resolution).

        Raises:
            ValueError: When ``text`` is not a clock of this codec.
        """

    def to_dict(self) -> dict[str, Any]:
        """Returns the codec's configuration as a JSON-ready dict, ``name`` included."""
        return {"name": self.name, **asdict(self)}

    @staticmethod
    def from_dict(config: dict[str, Any]) -> TimeCodec:
        """Builds a codec from ``to_dict`` output.

        Args:
            config: ``{"name": ..., **parameters}``.

        Returns:
            The codec.

        Raises:
            ValueError: For an unknown codec name or bad parameters.
        """
        params = dict(config)
        return get_codec(params.pop("name", None), **params)


def _check_times(t: float, prev_t: float) -> None:
    # Validation at load keeps NaN and inf out of timelines; this guards every other caller: an infinite time would
    # overflow ``round`` in the bin codecs (OverflowError) or be written as the clock text "[infs]".
    if not (math.isfinite(t) and t >= 0.0):
        raise ValueError(f"event time must be a finite, non-negative number of seconds, got {t!r}")
    if not math.isfinite(prev_t):
        raise ValueError(f"previous event time must be a finite number of seconds, got {prev_t!r}")
    if t < prev_t:
        raise ValueError(f"event time {t} is before the previous event's time {prev_t}")


@dataclass(frozen=True)
class TextCodec(TimeCodec):
    """Seconds in plain text, ``"[12.3s]\\n"``.

    Args:
        decimals: Digits after the decimal point (1 gives 0.1 s resolution).
    """

    name: ClassVar[str] = "text"

    decimals: int = 1
    _pattern: ClassVar[re.Pattern[str]] = re.compile(r"\[(\d+(?:\.\d+)?)s\]\n?")

    def __post_init__(self) -> None:
        if not 0 <= self.decimals <= 6:
            raise ValueError(f"text codec: decimals must be in [0, 6], got {self.decimals}")

    def special_tokens(self) -> list[str]:
        return []

    def encode(self, t: float, prev_t: float = 0.0) -> str:
        _check_times(t, prev_t)
        return f"[{t:.{self.decimals}f}s]\n"

    def decode(self, text: str, prev_t: float = 0.0) -> float:
        match = self._pattern.fullmatch(text)
        if match is None:
            raise ValueError(f"text codec: not a clock: {text!r}")
        return float(match.group(1))


@dataclass(frozen=True)
class AbsBinsCodec(TimeCodec):
    """Absolute time as special tokens: ``<|t_s123|>`` below a minute, ``<|t_m3|><|t_s123|>`` from then on.

    Args:
        resolution: Bin width in seconds; must divide a minute.
        max_minutes: Minutes the vocabulary covers; later times saturate at the last bin.
    """

    name: ClassVar[str] = "abs_bins"

    resolution: float = 0.1
    max_minutes: int = 120
    _pattern: ClassVar[re.Pattern[str]] = re.compile(r"(?:<\|t_m(\d+)\|>)?<\|t_s(\d+)\|>")

    def __post_init__(self) -> None:
        bins = round(60.0 / self.resolution) if self.resolution > 0 else 0
        if bins < 1 or abs(bins * self.resolution - 60.0) > 1e-9:
            raise ValueError(f"abs_bins codec: resolution must divide 60 s, got {self.resolution}")
        if self.max_minutes < 1:
            raise ValueError(f"abs_bins codec: max_minutes must be at least 1, got {self.max_minutes}")

    @property
    def bins_per_minute(self) -> int:
        """Number of second-bins in one minute."""
        return round(60.0 / self.resolution)

    def special_tokens(self) -> list[str]:
        # Minute 0 has no token: below a minute the second-bin alone is the clock.
        minutes = [f"<|t_m{m}|>" for m in range(1, self.max_minutes)]
        return [f"<|t_s{s}|>" for s in range(self.bins_per_minute)] + minutes

    def encode(self, t: float, prev_t: float = 0.0) -> str:
        _check_times(t, prev_t)
        per_minute = self.bins_per_minute
        total = min(round(t / self.resolution), self.max_minutes * per_minute - 1)
        minute, second = divmod(total, per_minute)
        return (f"<|t_m{minute}|>" if minute else "") + f"<|t_s{second}|>"

    def decode(self, text: str, prev_t: float = 0.0) -> float:
        match = self._pattern.fullmatch(text)
        if match is None:
            raise ValueError(f"abs_bins codec: not a clock: {text!r}")
        minute = int(match.group(1)) if match.group(1) is not None else 0
        second = int(match.group(2))
        if (match.group(1) is not None and not 1 <= minute < self.max_minutes) or second >= self.bins_per_minute:
            raise ValueError(f"abs_bins codec: clock out of range: {text!r}")
        return round((minute * self.bins_per_minute + second) * self.resolution, 9)


@dataclass(frozen=True)
class LogDeltaCodec(TimeCodec):
    """Time since the previous event as one token out of log-spaced bins plus a zero bin.

    Bin ``k >= 1`` stands for ``min_s * r**(k-1)`` with ``r = (max_s / min_s) ** (1 / (bins - 1))``; a delta goes
    to the bin nearest in log space, below ``min_s / sqrt(r)`` to the zero bin ``<|dt0|>``, and above ``max_s``
    saturates at the last bin. The relative error is at most ``sqrt(r) - 1`` (14% for the defaults).

    Args:
        min_s: Smallest non-zero bin, in seconds.
        max_s: Largest bin, in seconds.
        bins: Number of non-zero bins.
    """

    name: ClassVar[str] = "log_delta"

    min_s: float = 0.02
    max_s: float = 60.0
    bins: int = 32
    _pattern: ClassVar[re.Pattern[str]] = re.compile(r"<\|dt(\d+)\|>")

    def __post_init__(self) -> None:
        if not (0.0 < self.min_s < self.max_s and self.bins >= 2):
            raise ValueError(f"log_delta codec: need 0 < min_s < max_s and bins >= 2, got {self}")

    @cached_property
    def _ratio(self) -> float:
        return (self.max_s / self.min_s) ** (1.0 / (self.bins - 1))

    @cached_property
    def _centers(self) -> list[float]:
        return [0.0] + [self.min_s * self._ratio**k for k in range(self.bins)]

    @cached_property
    def _edges(self) -> list[float]:
        # Edge k separates bin k from bin k + 1: min_s / sqrt(r) for k = 0, the geometric midpoint of the centers
        # after that.
        half_step = math.sqrt(self._ratio)
        return [self.min_s / half_step] + [center * half_step for center in self._centers[1:-1]]

    def special_tokens(self) -> list[str]:
        return [f"<|dt{k}|>" for k in range(self.bins + 1)]

    def encode(self, t: float, prev_t: float = 0.0) -> str:
        _check_times(t, prev_t)
        return f"<|dt{bisect_right(self._edges, t - prev_t)}|>"

    def decode(self, text: str, prev_t: float = 0.0) -> float:
        match = self._pattern.fullmatch(text)
        if match is None or int(match.group(1)) > self.bins:
            raise ValueError(f"log_delta codec: not a clock: {text!r}")
        return prev_t + self._centers[int(match.group(1))]


CODECS: dict[str, type[TimeCodec]] = {codec.name: codec for codec in (TextCodec, AbsBinsCodec, LogDeltaCodec)}


def get_codec(name: str | TimeCodec, **params: Any) -> TimeCodec:
    """Returns a codec by name.

    Args:
        name: ``"text"``, ``"abs_bins"`` or ``"log_delta"``; a codec instance is returned as is.
        **params: The codec's parameters (see each codec class).

    Returns:
        The codec.

    Raises:
        ValueError: For an unknown name or bad parameters.
    """
    if isinstance(name, TimeCodec):
        if params:
            raise ValueError(f"codec parameters {sorted(params)} given with a codec instance {name!r}")
        return name
    if name not in CODECS:
        raise ValueError(f"unknown time codec {name!r}; known: {sorted(CODECS)}")
    try:
        return CODECS[name](**params)
    except TypeError as error:
        raise ValueError(f"bad parameters for time codec {name!r}: {error}") from None
