"""Many sessions on the virtual clock, each on its own time, with the model work of all waiting sessions batched.

On one shared virtual loop every session lives on the loop's one clock, so two sessions could share a model forward
only if they decided at the same virtual millisecond: waiting for a batch would let the clock, and so the other
sessions' speech and tool results, move on. Here each session runs on a loop of its own (``VirtualClockLoop``), and
while it waits for the model its loop is *held*: no virtual time passes for it. The driver steps every loop in turn
until it is done or held (:meth:`VirtualClockLoop.run_until_blocked`), then has each engine run one batched forward
of the waiting sessions' work (:meth:`Engine.step`), which releases the sessions whose action is decoded, and repeats.

A session's log therefore depends on nothing but its own timeline, seed and policy: it is the same at any batch size
and width as played alone (docs/design.md §5), and the engine's batch is every session that waits for the model at
once, whatever its virtual time. Policies that do not use an engine (scripted, endpoints) never hold their loop: each
session runs to its end in one pass, as on a loop of its own.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from clocktune.runtime.virtual_clock import VirtualClockLoop

if TYPE_CHECKING:  # torch loads only with a model
    from clocktune.runtime.engine import Engine, EngineSession, ModelWork

T = TypeVar("T")

__all__ = ["SessionDriver", "model_work"]


async def model_work(engine: Engine, session: EngineSession, work: ModelWork) -> tuple[Any, BaseException | None]:
    """Runs a session's model work on its engine, batched with other sessions' when the session's loop is stepped by a
    :class:`SessionDriver`, alone otherwise.

    Args:
        engine: The engine.
        session: The session's cache in it.
        work: The work (``ModelPolicy.act_work``).

    Returns:
        ``(result, error)``: the work's result, or the exception it raised (the session's alone; the batch goes on).
    """
    loop = asyncio.get_running_loop()
    driver = getattr(loop, "driver", None)
    if driver is None:
        try:
            return engine.run(session, work), None
        except Exception as error:  # noqa: BLE001 - the caller turns it into the session's notice
            return None, error
    future: asyncio.Future = loop.create_future()

    def done(result: Any, error: BaseException | None) -> None:
        loop.release()
        future.set_result((result, error))

    loop.hold()  # no virtual time passes for this session while the model works
    driver.engines.add(engine)
    engine.submit(session, work, done)
    return await future


class SessionDriver:
    """Plays coroutines (sessions) on loops of their own, ``width`` at a time, stepping the engines they wait on.

    Args:
        width: Most sessions in play at once (for sessions of a model: the engine's batch, at most).
    """

    def __init__(self, width: int) -> None:
        if width < 1:
            raise ValueError(f"width must be at least 1, not {width}")
        self.width = width
        self.engines: set[Engine] = set()
        self._free: list[VirtualClockLoop] = []

    def _loop(self) -> VirtualClockLoop:
        # Loops are reused: creating one (a selector and its self-pipe) costs a twentieth of a generated dialogue.
        loop = self._free.pop() if self._free else VirtualClockLoop()
        loop.driver = self
        return loop

    def _retire(self, loop: VirtualClockLoop) -> None:
        # What run_virtual does after each run: unwind what the session left (its watchdog), then time 0 again.
        leftover = [task for task in asyncio.all_tasks(loop) if not task.done()]
        for task in leftover:
            task.cancel()
        loop.run_until_blocked()
        loop.reset()
        self._free.append(loop)

    def run(
        self,
        jobs: list[Callable[[], Coroutine[Any, Any, T]]],
        finished: Callable[[int, T], None] | None = None,
    ) -> list[T]:
        """Plays every job (a function that makes a session's coroutine) to its end.

        Args:
            jobs: The sessions, each started on a loop of its own at time 0.
            finished: Called with ``(index, result)`` as each session ends (a journal, a progress bar).

        Returns:
            The results, in job order.

        Raises:
            RuntimeError: When a session waits on something that is neither a timer nor the model.
            Exception: The first error a session's coroutine raised, after every loop is unwound.
        """
        results: list[Any] = [None] * len(jobs)
        todo = deque(enumerate(jobs))
        active: dict[VirtualClockLoop, tuple[int, asyncio.Task]] = {}

        def advance(loop: VirtualClockLoop, index: int, task: asyncio.Task) -> None:
            # Run the session until it ends or waits for the model; an ended one gives its loop back at once, so
            # sessions that never wait (scripted policies) reuse one loop however many there are.
            loop.run_until_blocked()
            if not task.done():
                active[loop] = (index, task)
                return
            active.pop(loop, None)
            self._retire(loop)
            result = task.result()  # raises the session's error
            results[index] = result
            if finished is not None:
                finished(index, result)

        try:
            while todo or active:
                while todo and len(active) < self.width:
                    index, job = todo.popleft()
                    loop = self._loop()
                    advance(loop, index, loop.create_task(job()))
                if not active:
                    continue
                if not sum(engine.step() for engine in self.engines):
                    stuck = [task.get_name() for loop, (_, task) in active.items() if not loop.held]
                    raise RuntimeError(f"sessions wait on neither a timer nor the model: {stuck}")
                for loop, (index, task) in list(active.items()):
                    if not loop.held:  # the engine has decoded its action
                        advance(loop, index, task)
        finally:
            if active:  # a session failed: drop the others' work and unwind them
                for engine in self.engines:
                    engine.waiting.clear()
                for loop in active:
                    self._retire(loop)
        return results

    def close(self) -> None:
        """Closes the loops kept for reuse."""
        for loop in self._free:
            loop.close()
        self._free.clear()
