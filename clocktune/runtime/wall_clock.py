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

:func:`engine_work` hands a session's model work to its engine (``runtime.engine``) on the same thread, which runs
the engine as serving engines do (continuous batching): between forwards it takes every request that has arrived,
and each forward packs the work of every session waiting at that moment. When the engine was idle, requests arriving
within :data:`GATHER_S` of the first share its forward, so live sessions that decide together are batched together.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Callable, Coroutine
from contextvars import ContextVar
from typing import Any, TypeVar

from clocktune.runtime.timer_order import OrderedEventLoop

T = TypeVar("T")


# How long an idle engine waits for more sessions' work before its first forward: a few milliseconds cost a live
# answer nothing audible and let sessions that decided together share a forward.
GATHER_S = 0.003


class _CallingThread:
    """Requests from the loop's thread, served in order on the thread that created this, with the engines' batches
    stepped between them."""

    def __init__(self) -> None:
        self.requests: queue.SimpleQueue = queue.SimpleQueue()
        self.engines: set[Any] = set()

    def _busy(self) -> bool:
        return any(engine.waiting for engine in self.engines)

    def _arrived(self) -> list[Any]:
        # Blocks for the first request only when no engine has work to step; an idle engine's first work waits
        # GATHER_S for company.
        if self._busy():
            first = None
            try:
                first = self.requests.get_nowait()
            except queue.Empty:
                return []
        else:
            first = self.requests.get()
        arrived = [first]
        deadline = time.monotonic() + GATHER_S if first is not None and first[0] == "work" else 0.0
        while True:
            left = deadline - time.monotonic()
            try:
                arrived.append(self.requests.get(timeout=left) if left > 0 else self.requests.get_nowait())
            except queue.Empty:
                return arrived

    def serve(self) -> None:
        """Runs requests and steps the engines until the ``None`` that ends the loop's thread."""
        while True:
            for request in self._arrived():
                if request is None:
                    return
                self._take(request)
            for engine in list(self.engines):
                engine.step()

    def _take(self, request: tuple) -> None:
        kind, loop, future, *rest = request
        if kind == "call":
            function, args = rest
            try:
                result = function(*args)
            except BaseException as error:  # handed to the awaiting session, which decides what it means
                loop.call_soon_threadsafe(_settle, future, None, error)
            else:
                loop.call_soon_threadsafe(_settle, future, result, None)
            return
        engine, open_session, work = rest

        def done(result: Any, error: BaseException | None) -> None:
            loop.call_soon_threadsafe(_settle, future, (result, error), None)

        try:
            session = open_session()  # the system prompt's forward, if the engine has not computed it yet
        except Exception as error:  # noqa: BLE001 - this session's failure alone
            done(None, error)
            return
        self.engines.add(engine)
        engine.submit(session, work, done)


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
    calling.requests.put(("call", loop, future, function, args))
    return await future


async def engine_work(engine: Any, open_session: Callable[[], Any], work: Any) -> tuple[Any, BaseException | None]:
    """Runs a session's model work on its engine, batched with every other live session's waiting at the same time.

    Args:
        engine: The session's :class:`~clocktune.runtime.engine.Engine`.
        open_session: Returns the session's cache in the engine (opening it runs a forward, so it is called on the
            engine's thread).
        work: The work (``ModelPolicy.act_work``): a generator, so none of it runs before the engine drives it.

    Returns:
        ``(result, error)``: the work's result, or the exception it raised (the session's alone; the batch goes on).
    """
    calling = _CALLING_THREAD.get()
    if calling is None:

        def alone() -> tuple[Any, BaseException | None]:
            try:
                return engine.run(open_session(), work), None
            except Exception as error:  # noqa: BLE001 - the caller turns it into the session's notice
                return None, error

        return await asyncio.to_thread(alone)
    loop = asyncio.get_running_loop()
    future = loop.create_future()
    calling.requests.put(("work", loop, future, engine, open_session, work))
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
