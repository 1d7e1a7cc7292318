"""The two clocks a session can run on, behind one small interface (docs/design.md §2, §5).

- :class:`VirtualClock`: reproducible and faster than real time. The loop's time jumps to the next timer
  (``virtual_clock``); a policy computes while the clock stands still, and the session charges the compute to the
  clock through the device profile.
- :class:`WallClock`: live. Compute takes the time it really takes, on the thread that started the run
  (``wall_clock`` says why), and an answer's first words are out when the policy reports them decoded.

A session asks its clock three things: run the evaluation's coroutine (:meth:`Clock.run`), compute a decision and
charge it (:meth:`Clock.decide`, :meth:`Clock.charge`), and when an answer's first words were out
(:meth:`Clock.first_words`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from clocktune.clock import DeviceProfile
from clocktune.runtime.policy import Decision, Policy
from clocktune.runtime.virtual_clock import VirtualClockLoop, run_virtual
from clocktune.runtime.wall_clock import engine_work, on_calling_thread, run_wall

T = TypeVar("T")

__all__ = ["CLOCKS", "Clock", "VirtualClock", "WallClock", "clock_named"]


class Clock(Protocol):
    """How time passes in a session. ``name`` is ``virtual`` or ``wall`` (recorded in reports and journals)."""

    name: str

    def run(self, main: Coroutine[Any, Any, T]) -> T:
        """Runs the coroutine of an evaluation (all its sessions) to completion on this clock."""
        ...

    async def decide(self, policy: Policy, t: float) -> Decision:
        """The policy's next action at session time ``t``."""
        ...

    async def charge(self, seconds: float) -> None:
        """Lets ``seconds`` of compute (prefill, decode) pass, when this clock does not measure them itself."""
        ...

    def first_words(self, started: float, decision: Decision, device: DeviceProfile, t0: float) -> float:
        """Session time (seconds from ``t0`` on the loop's clock) when an answer begun at ``started`` was heard."""
        ...


@dataclass(frozen=True)
class VirtualClock:
    """Virtual time: compute costs what the device profile charges, and nothing else."""

    name: str = "virtual"

    def run(self, main: Coroutine[Any, Any, T]) -> T:
        """Runs ``main`` on a fresh virtual-clock loop and returns its result."""
        return run_virtual(main)

    async def decide(self, policy: Policy, t: float) -> Decision:
        """The policy's action at ``t``; the clock stands still while it computes.

        A policy with a model engine (``batchable``) hands its work to the engine: stepped by a
        :class:`~clocktune.runtime.session_driver.SessionDriver`, the session's loop is held while the engine
        batches it with other sessions' work. A failure of that work is the session's own: it becomes an invalid
        decision (a notice), and the other sessions of the batch go on.
        """
        if not getattr(policy, "batchable", False):
            return policy.act(t)
        from clocktune.runtime.session_driver import model_work

        result, error = await model_work(policy.engine, policy.engine_session(), policy.act_work(t))
        if error is not None:
            return Decision(None, 0, f"the model failed: {type(error).__name__}: {error}")
        return result

    async def charge(self, seconds: float) -> None:
        """Advances the session's time by ``seconds`` (other sessions' timers fire meanwhile)."""
        if seconds > 0:
            loop = asyncio.get_running_loop()
            if not (isinstance(loop, VirtualClockLoop) and loop.fast_forward(seconds)):
                await asyncio.sleep(seconds)

    def first_words(self, started: float, decision: Decision, device: DeviceProfile, t0: float) -> float:
        """The answer's start plus the decode of its first words (``DeviceProfile.first_words_s``)."""
        return round(started + device.first_words_s(decision.tokens), 3)


@dataclass(frozen=True)
class WallClock:
    """Real time: compute takes as long as it takes, and no charge is added to it."""

    name: str = "wall"

    def run(self, main: Coroutine[Any, Any, T]) -> T:
        """Runs ``main`` with its loop on a helper thread while this thread serves the policies' compute."""
        return run_wall(main)

    async def decide(self, policy: Policy, t: float) -> Decision:
        """Runs ``policy.act(t)`` on the calling thread, or in a worker thread when the policy is ``io_bound``.

        A policy with a model engine (``batchable``) hands its work to the engine on the calling thread, which packs
        the work of every live session waiting at once into one forward (``wall_clock.engine_work``); a failure of
        that work is the session's own notice, as on the virtual clock.
        """
        if getattr(policy, "batchable", False):
            result, error = await engine_work(policy.engine, policy.engine_session, policy.act_work(t))
            if error is not None:
                return Decision(None, 0, f"the model failed: {type(error).__name__}: {error}")
            return result
        if policy.io_bound:
            return await asyncio.to_thread(policy.act, t)  # sessions overlap their waits on the network
        return await on_calling_thread(policy.act, t)

    async def charge(self, seconds: float) -> None:
        """Nothing to add: the compute already took its time."""

    def first_words(self, started: float, decision: Decision, device: DeviceProfile, t0: float) -> float:
        """When the policy reported the first words decoded, else now (it handed the whole answer over)."""
        # The loop's clock is time.monotonic(), as asyncio's always is.
        out = decision.first_words_at if decision.first_words_at is not None else time.monotonic()
        return round(out - t0, 3)


CLOCKS: dict[str, type[VirtualClock] | type[WallClock]] = {"virtual": VirtualClock, "wall": WallClock}


def clock_named(name: str) -> Clock:
    """The clock of a ``--clock`` value.

    Args:
        name: ``virtual`` or ``wall``.

    Returns:
        A fresh clock.

    Raises:
        ValueError: For another name.
    """
    if name not in CLOCKS:
        raise ValueError(f"clock must be one of {', '.join(CLOCKS)}, not {name!r}")
    return CLOCKS[name]()
