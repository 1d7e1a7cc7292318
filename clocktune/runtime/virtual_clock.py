"""An asyncio event loop whose clock is virtual: time jumps to the next timer instead of passing.

Sessions written against plain asyncio (``asyncio.sleep``, ``loop.call_later``, queues) run unchanged on the wall
clock for live use and on this loop for reproducible, faster-than-real-time evaluation: when every task is waiting
for a timer, the loop advances its clock to that timer at once. Blocking work inside a callback (a model forward
on the CPU) takes no virtual time; the session charges compute to the clock explicitly through a device profile.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import selectors
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from clocktune.runtime.timer_order import OrderedTimersMixin

T = TypeVar("T")


class _VirtualSelector(selectors.DefaultSelector):
    """Polls real file descriptors without blocking, and turns every timed wait into a clock jump."""

    def __init__(self, loop: VirtualClockLoop) -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list:
        ready = super().select(0)
        if ready or (timeout is not None and timeout <= 0):
            return ready
        if timeout is None:
            # No timer is scheduled: only real I/O (a thread, a socket) can wake the loop, so block on it.
            return super().select(None)
        self._loop.advance(timeout)
        return ready


# Virtual time moves on a grid of whole milliseconds, the grid of a timeline's ``t``. A float sum such as
# ``t0 + 7.341 + 0.0005`` rounds differently at different magnitudes of ``t0``, so without a grid a session's event
# times (and the order of two events due at nearly the same time) would depend on when the session started on a
# shared loop: on ``--concurrency`` and on resuming. And the grid is the log's: a finer one would let an action end
# between two logged milliseconds, so a log replayed at its logged times could deliver a chunk on the other side of
# the action boundary that met it, and the replay would diverge (docs/design.md §7).
GRID_DIGITS = 3


def session_seconds(now: float, start: float) -> float:
    """Seconds from ``start`` to ``now`` (loop times), to the millisecond, whatever the magnitude of either.

    Args:
        now: The loop's time.
        start: The loop's time when the session started.

    Returns:
        The difference in whole milliseconds.
    """
    return round((now - start) * 10**GRID_DIGITS) / 10**GRID_DIGITS


class VirtualClockLoop(OrderedTimersMixin, asyncio.SelectorEventLoop):
    """A selector event loop on virtual time (seconds from 0.0 at creation, on a grid of milliseconds); timers due
    at the same time fire in the order they were scheduled (``timer_order``)."""

    def __init__(self) -> None:
        self._now = 0.0
        self._holds = 0
        self.driver: Any = None  # the SessionDriver stepping this loop, if one is (``session_driver``)
        super().__init__(selector=_VirtualSelector(self))

    def hold(self) -> None:
        """Stops the clock until :meth:`release`: the session waits for the model, and no time may pass for it
        meanwhile (callbacks already due still run). Only a loop stepped by :meth:`run_until_blocked` can be held;
        a loop run by ``run_until_complete`` would have no one to release it."""
        self._holds += 1

    def release(self) -> None:
        """Lets the clock move again after :meth:`hold`."""
        self._holds -= 1

    @property
    def held(self) -> bool:
        """Whether the clock stands still for a session waiting on the model."""
        return self._holds > 0

    def run_until_blocked(self) -> None:
        """Runs this loop's callbacks and timers, from outside any running loop, until nothing is ready and either
        the clock is held or no timer is left (its sessions are done, or wait on the model).

        A :class:`~clocktune.runtime.session_driver.SessionDriver` steps many loops this way in one thread, one at a
        time, so that each session keeps its own virtual time while the model works for several of them at once.
        """
        asyncio.events._set_running_loop(self)  # what run_forever sets: get_running_loop() inside the callbacks
        try:
            while True:
                self._drop_cancelled_head()
                if not self._ready and (self._holds or not self._scheduled):
                    return
                self._run_once()
        finally:
            asyncio.events._set_running_loop(None)

    def time(self) -> float:
        """The virtual time in seconds."""
        return self._now

    def call_at(self, when: float, callback: Any, *args: Any, context: Any = None) -> asyncio.TimerHandle:
        """Schedules ``callback(*args)`` at virtual time ``when``, moved onto the millisecond grid."""
        return super().call_at(round(when, GRID_DIGITS), callback, *args, context=context)

    def call_later(self, delay: float, callback: Any, *args: Any, context: Any = None) -> asyncio.TimerHandle:
        """Schedules ``callback(*args)`` ``delay`` seconds from now (``asyncio.sleep`` comes here too), the delay
        moved onto the grid first: a delay halfway between two milliseconds (a compute charge of 12.5 ms) would
        otherwise round up or down with the magnitude of the time it is added to, so with the other sessions on
        the loop."""
        return self.call_at(self._due(delay), callback, *args, context=context)

    def _due(self, delay: float) -> float:
        """The grid time ``delay`` seconds from now: where a timer of that delay (a sleep) is put."""
        return round(self._now + round(delay, GRID_DIGITS), GRID_DIGITS)

    def _drop_cancelled_head(self) -> None:
        """Pops cancelled timers off the top of the heap, so that its first timer is the next one due."""
        scheduled = self._scheduled
        while scheduled and scheduled[0]._cancelled:
            self._timer_cancelled_count -= 1
            heapq.heappop(scheduled)._scheduled = False

    def _run_once(self) -> None:
        # asyncio's iteration polls the selector every time (an epoll call: a twentieth of generation's time); on
        # virtual time nothing that runs now waits on I/O while a callback or a timer is due, so this one polls only
        # when nothing else can run. The order is asyncio's: the callbacks ready at the start of the iteration and the
        # timers due at its (possibly advanced) time, in heap order, each run once.
        self._drop_cancelled_head()
        scheduled = self._scheduled
        if not self._ready and not self._stopping:
            if not scheduled:
                super()._run_once()  # only real I/O (a thread, a socket) can wake the loop: block on it
                return
            self._now = scheduled[0]._when  # the jump to the next timer, which call_at put on the grid
        while scheduled and scheduled[0]._when <= self._now:
            handle = heapq.heappop(scheduled)
            handle._scheduled = False
            self._ready.append(handle)
        for _ in range(len(self._ready)):
            handle = self._ready.popleft()
            if not handle._cancelled:
                handle._run()

    def reset(self) -> None:
        """Puts the idle loop back to time 0 with no timers and no callbacks, as a fresh loop starts."""
        for handle in self._scheduled:
            handle._scheduled = False
        self._scheduled.clear()
        self._ready.clear()
        self._timer_cancelled_count = 0
        self._timer_sequence = itertools.count()
        self._now = 0.0
        self._holds = 0

    def fast_forward(self, seconds: float) -> bool:
        """Moves the clock ``seconds`` forward at once, from inside a running callback, when a sleep of that long
        would change nothing else: no other callback is ready and no timer is due by then.

        A compute charge is a sleep, and a sleep costs a future, a timer and two passes of the loop; nearly every
        charge of a generated dialogue ends before anything else is due, and then the caller may simply go on at the
        later time. A timer due exactly then would fire before a sleep's timer (same time: scheduling order), so only
        a strictly later one lets the clock jump.

        Args:
            seconds: The charge.

        Returns:
            Whether the clock moved; if not, sleep as usual.
        """
        if self._ready or self._stopping:
            return False
        target = self._due(seconds)
        self._drop_cancelled_head()
        if self._scheduled and self._scheduled[0]._when <= target:
            return False
        self._now = target
        return True

    def advance(self, seconds: float) -> None:
        """Moves the clock forward (the loop calls this when it would otherwise sleep), onto the grid: a jump to
        the next timer lands exactly on that timer's time."""
        self._now = round(self._now + seconds, GRID_DIGITS)


async def _drain(tasks: set[asyncio.Task]) -> None:
    await asyncio.gather(*tasks, return_exceptions=True)


# One loop per thread, reused: creating a selector loop (its selector and self-pipe) cost a twentieth of a
# generated dialogue (cProfile), and the generator runs one coroutine per dialogue. Between runs the loop is put back
# to time 0 with no timers, so a run cannot tell it from a fresh loop.
_LOOPS = threading.local()


def run_virtual(main: Coroutine[Any, Any, T]) -> T:
    """Runs a coroutine to completion on a :class:`VirtualClockLoop` at time 0 (this thread's, reused).

    Args:
        main: The coroutine.

    Returns:
        Its result.
    """
    loop = getattr(_LOOPS, "loop", None)
    if loop is None or loop.is_closed():
        loop = _LOOPS.loop = VirtualClockLoop()
    try:
        return loop.run_until_complete(main)
    finally:
        # An error in one session leaves the others pending: cancel them so they unwind before the next run.
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(_drain(pending))
        if loop._asyncgens:  # sessions use none: a second run per dialogue for nothing otherwise
            loop.run_until_complete(loop.shutdown_asyncgens())
        loop.reset()
