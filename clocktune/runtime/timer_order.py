"""Timers that fire in the order they were scheduled when their times are equal.

asyncio keeps its timers in a heap ordered by time alone, and a heap does not keep equal keys in insertion order:
in a direct test 113 of 200 pairs of equal-time timers fired reversed. A session schedules every chunk of an
utterance and every tool result as a timer, and equal times are common (a revision and the final chunk of the
same recogniser update, a result and a chunk on the same millisecond), so without a tie-break a revision could
arrive after the final chunk it revises, and a session's log would depend on what else was in the heap: on the
number of concurrent sessions, or on whether an evaluation was resumed. These loops break ties by a sequence
number, on the virtual clock and the wall clock alike.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from typing import Any

__all__ = ["OrderedEventLoop", "OrderedTimerHandle", "OrderedTimersMixin"]


class OrderedTimerHandle(asyncio.TimerHandle):
    """A timer ordered by ``(when, sequence)``: of two timers due at the same time, the one scheduled first fires
    first."""

    __slots__ = ("_key",)

    def __init__(self, when: float, callback: Any, args: tuple, loop: Any, context: Any, sequence: int) -> None:
        super().__init__(when, callback, args, loop, context)
        # Built once: a heap of thousands of sessions' timers compares each many times, and two tuples built per
        # comparison cost 2,000 concurrent scripted sessions 13% of their time (scripts/bench_timer_order.py).
        self._key = (when, sequence)

    def __lt__(self, other: object) -> bool:
        if isinstance(other, OrderedTimerHandle):
            return self._key < other._key
        return super().__lt__(other)

    def __gt__(self, other: object) -> bool:
        if isinstance(other, OrderedTimerHandle):
            return self._key > other._key
        return super().__gt__(other)


class OrderedTimersMixin:
    """Makes an asyncio event loop schedule :class:`OrderedTimerHandle` timers (``call_later`` goes through
    ``call_at``)."""

    _scheduled: list

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._timer_sequence = itertools.count()

    def call_at(self, when: float, callback: Any, *args: Any, context: Any = None) -> asyncio.TimerHandle:
        """Schedules ``callback(*args)`` at loop time ``when``, after every timer already scheduled for that time.

        Args:
            when: Loop time.
            callback: The callback.
            *args: Its arguments.
            context: The ``contextvars`` context to run it in.

        Returns:
            The timer (cancellable).
        """
        if when is None:
            raise TypeError("when cannot be None")
        self._check_closed()  # type: ignore[attr-defined]
        timer = OrderedTimerHandle(when, callback, args, self, context, next(self._timer_sequence))
        heapq.heappush(self._scheduled, timer)
        timer._scheduled = True
        return timer


class OrderedEventLoop(OrderedTimersMixin, asyncio.SelectorEventLoop):
    """The wall clock's loop: a selector loop on real time with ordered timers."""
