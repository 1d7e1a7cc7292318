"""Playing sessions: every timeline under one policy, on one clock, scored against ground truth.

:func:`run_policy` plays each timeline's user side against a fresh policy and a fresh backend per session
(concurrently: on the virtual clock each session on its own time, a model's sessions sharing its engine's forwards,
``session_driver``), optionally journaling finished sessions so that an interrupted
run resumes, and returns a :class:`PolicyRun`. Statistics, tables and plots of runs are ``report``'s.
"""

from __future__ import annotations

import asyncio
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from tqdm.auto import tqdm

from clocktune.runtime.clocks import VirtualClock
from clocktune.runtime.journal import JournalError, RunJournal
from clocktune.runtime.policy import PolicyFactory
from clocktune.runtime.scoring import DialogueResult, score_session
from clocktune.runtime.session import Session, SessionConfig, SessionLog
from clocktune.runtime.session_driver import SessionDriver
from clocktune.timeline.events import Timeline
from clocktune.tools import BackendFactory

__all__ = ["PolicyRun", "percentile", "run_policy"]


def percentile(values: list[float], q: float) -> float | None:
    """The ``q``-th percentile (inclusive method) of ``values``; ``None`` when there are none.

    Args:
        values: The sample.
        q: Percentile, 1 to 99.

    Returns:
        The percentile.
    """
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q) - 1]


@dataclass
class PolicyRun:
    """The sessions of one policy over a set of timelines.

    Args:
        name: Policy name.
        results: Scores, in timeline order.
        logs: Session logs, in timeline order.
    """

    name: str
    results: list[DialogueResult]
    logs: list[SessionLog] = field(repr=False)

    def share(self, flag: str) -> float:
        """Fraction of dialogues whose boolean result field ``flag`` (``accurate``, ``answered``) is true."""
        return sum(getattr(r, flag) for r in self.results) / len(self.results)

    def per_dialogue(self, count: str) -> float:
        """Mean over dialogues of the numeric result field ``count`` (``wasted_calls``, ``notices``, ...)."""
        return sum(getattr(r, count) for r in self.results) / len(self.results)

    def latency(self, q: float) -> float | None:
        """The ``q``-th percentile of response latency over answered dialogues (``None`` when none was)."""
        return percentile([r.latency_s for r in self.results if r.latency_s is not None], q)

    def speedup_over(self, baseline: PolicyRun) -> float | None:
        """The baseline's median latency over this run's (``None`` when either has no answered dialogue)."""
        p50, base_p50 = self.latency(50), baseline.latency(50)
        return base_p50 / p50 if p50 and base_p50 else None

    def failures(self) -> dict[str, int]:
        """How many dialogues failed for each reason (``DialogueResult.failure``), most frequent first."""
        return dict(Counter(r.failure for r in self.results if r.failure is not None).most_common())

    @property
    def violations(self) -> int:
        """Side-effect violations over all dialogues."""
        return sum(r.side_effect_violations for r in self.results)


def _play(
    timelines: dict[int, Timeline],
    factory: PolicyFactory,
    backends: BackendFactory,
    config: SessionConfig,
    concurrency: int,
    bar: tqdm,
    journal: RunJournal | None,
) -> dict[int, SessionLog]:
    async def one(timeline: Timeline) -> SessionLog:
        policy = factory(timeline)
        try:
            return await Session(timeline, policy, config, backends(timeline)).run()
        finally:
            policy.close()

    def finished(index: int, log: SessionLog) -> None:
        if journal is not None:
            journal.append(index, log)
        bar.update()

    indices = list(timelines)
    if isinstance(config.clock, VirtualClock):
        # Each session on its own virtual time; sessions waiting for a model share its forwards (session_driver).
        driver = SessionDriver(concurrency)
        try:
            jobs = [lambda timeline=timelines[index]: one(timeline) for index in indices]
            logs = driver.run(jobs, lambda position, log: finished(indices[position], log))
        finally:
            driver.close()
        return dict(zip(indices, logs, strict=True))

    async def everyone() -> list[SessionLog]:
        limit = asyncio.Semaphore(concurrency)

        async def limited(index: int, timeline: Timeline) -> SessionLog:
            async with limit:
                log = await one(timeline)
            finished(index, log)
            return log

        return await asyncio.gather(*(limited(index, timelines[index]) for index in indices))

    return dict(zip(indices, config.clock.run(everyone()), strict=True))


def run_policy(
    name: str,
    timelines: Sequence[Timeline],
    factory: PolicyFactory,
    backends: BackendFactory,
    config: SessionConfig,
    concurrency: int = 10_000,
    progress: bool = False,
    journal: RunJournal | None = None,
) -> PolicyRun:
    """Runs every timeline under one policy and scores it.

    Args:
        name: Policy name for the results.
        timelines: Recorded timelines whose user side is replayed.
        factory: Builds the policy of one session.
        backends: Builds the tool backend of one session, in the timeline's initial state
            (``data_gen.backends.make_backend`` for generated and imported timelines).
        config: Session config (clock, device profile, injected failures).
        concurrency: Sessions in flight at once. On the virtual clock each runs on its own time
            (:class:`~clocktune.runtime.session_driver.SessionDriver`), and a model's engine batches the forwards of
            those waiting for it (at most its ``batch_size``); on the wall clock model policies want fewer.
        progress: Show a progress bar of finished sessions (model policies take seconds per session).
        journal: Where finished sessions are recorded; those it already holds are not played again.

    Returns:
        The run.

    Raises:
        JournalError: When the journal holds sessions of other timelines.
    """
    logs = journal.load() if journal is not None else {}
    for index, log in logs.items():
        if index >= len(timelines) or log.timeline.id != timelines[index].id:
            raise JournalError(f"{journal.path}: session {index} ({log.timeline.id}) is not of these timelines")
    todo = {index: timeline for index, timeline in enumerate(timelines) if index not in logs}
    with tqdm(total=len(timelines), initial=len(logs), desc=name, unit="session", disable=not progress) as bar:
        if todo:
            logs.update(_play(todo, factory, backends, config, concurrency, bar, journal))
    ordered = [logs[index] for index in range(len(timelines))]
    return PolicyRun(name, [score_session(log, name) for log in ordered], ordered)
