"""The wall clock for live sessions: the event loop runs on a helper thread and the calling thread computes.

A live session's loop only waits (on the user's speech, on tool timers, on sockets) while a local model's
forward passes are CPU- or GPU-bound and must not stall it, so the two run on different threads. They run this
way round, not with the compute in a worker thread (``asyncio.to_thread``), because torch's CPU kernels are
parallelised with OpenMP and lose most of that parallelism off the main thread: on the 2-core machine the
BENCHMARKS name, one token of the embedded model took 66 ms from a worker thread and 39 ms from the main thread,
so the live clock charged a local model 1.7 times what the same forward costs in the main thread.

:func:`on_calling_thread` hands a function to the thread that called :func:`run_wall` and awaits its result; the
calls of all sessions are served one at a time, as one device serves one batch-1 request after another. Outside
:func:`run_wall` it falls back to a worker thread.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable, Coroutine
from contextvars import ContextVar
from typing import Any, TypeVar

from clocktune.runtime.timer_order import OrderedEventLoop

T = TypeVar("T")


class _CallingThread:
    """Requests from the loop's thread, served in order on the thread that created this."""

    def __init__(self) -> None:
        self.requests: queue.SimpleQueue = queue.SimpleQueue()

    def serve(self) -> None:
        """Runs requests until the ``None`` that ends the loop's thread."""
        while (request := self.requests.get()) is not None:
            function, args, future, loop = request
            try:
                result = function(*args)
            except BaseException as error:  # handed to the awaiting session, which decides what it means
                loop.call_soon_threadsafe(_settle, future, None, error)
            else:
                loop.call_soon_threadsafe(_settle, future, result, None)


def _settle(future: asyncio.Future, result: Any, error: BaseException | None) -> None:
    if future.done():  # the awaiting session was cancelled meanwhile
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


_CALLING_THREAD: ContextVar[_CallingThread | None] = ContextVar("clocktune_calling_thread", default=None)


async def on_calling_thread(function: Callable[..., T], *args: Any) -> T:
    """Runs ``function(*args)`` on the thread that called :func:`run_wall` (a worker thread outside it).

    Args:
        function: A blocking function (a policy's ``act``).
        *args: Its arguments.

    Returns:
        Its result; its exception is raised here.
    """
    calling = _CALLING_THREAD.get()
    if calling is None:
        return await asyncio.to_thread(function, *args)
    loop = asyncio.get_running_loop()
    future = loop.create_future()
    calling.requests.put((function, args, future, loop))
    return await future


def run_wall(main: Coroutine[Any, Any, T]) -> T:
    """Runs a coroutine on the wall clock, its loop on a helper thread, serving :func:`on_calling_thread` here.

    Args:
        main: The coroutine.

    Returns:
        Its result; its exception is raised here.
    """
    calling = _CallingThread()
    outcome: dict[str, Any] = {}

    def loop_thread() -> None:
        _CALLING_THREAD.set(calling)  # the loop's tasks copy this context, so sessions find the calling thread
        try:
            with asyncio.Runner(loop_factory=OrderedEventLoop) as runner:
                outcome["result"] = runner.run(main)
        except BaseException as error:
            outcome["error"] = error
        finally:
            calling.requests.put(None)

    # A daemon, so that an interrupt of the calling thread (Ctrl-C) ends the process instead of waiting on live
    # sessions; finished sessions are already journaled.
    thread = threading.Thread(target=loop_thread, name="clocktune-wall-clock-loop", daemon=True)
    thread.start()
    calling.serve()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]
