"""An asyncio event loop whose clock is virtual: time jumps to the next timer instead of passing.

Sessions written against plain asyncio (``asyncio.sleep``, ``loop.call_later``, queues) run unchanged on the wall
clock for live use and on this loop for reproducible, faster-than-real-time evaluation: when every task is waiting
for a timer, the loop advances its clock to that timer at once. Blocking work inside a callback (a model forward
on the CPU) takes no virtual time; the session charges compute to the clock explicitly through a device profile.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

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


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """A selector event loop on virtual time (seconds from 0.0 at creation)."""

    def __init__(self) -> None:
        self._now = 0.0
        super().__init__(selector=_VirtualSelector(self))

    def time(self) -> float:
        """The virtual time in seconds."""
        return self._now

    def advance(self, seconds: float) -> None:
        """Moves the clock forward (the loop calls this when it would otherwise sleep)."""
        self._now += seconds


async def _drain(tasks: set[asyncio.Task]) -> None:
    await asyncio.gather(*tasks, return_exceptions=True)


def run_virtual(main: Coroutine[Any, Any, T]) -> T:
    """Runs a coroutine to completion on a fresh :class:`VirtualClockLoop`.

    Args:
        main: The coroutine.

    Returns:
        Its result.
    """
    loop = VirtualClockLoop()
    try:
        return loop.run_until_complete(main)
    finally:
        # An error in one session leaves the others pending: cancel them so they unwind before the loop closes.
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(_drain(pending))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
