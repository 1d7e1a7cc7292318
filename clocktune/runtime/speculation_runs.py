"""Live sessions of a checkpoint under each drafter: acceptance, action tokens/s, greedy identity, latency.

What ``clocktune profile --data`` and ``scripts/bench_speculative_decoding.py`` measure. Every drafter plays the
same timelines, one session at a time (batch 1), interleaved session by session so that a busy spell of a shared
machine falls on all of them alike, and the sessions of one model share its system-prompt prefill. A recording
wrapper keeps the token ids of every action, so that greedy speculative decoding can be checked token for token
against plain decoding on live sessions (the policy's own actions drive them).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from clocktune.runtime.engine import Engine
from clocktune.runtime.model_policy import ModelPolicy
from clocktune.runtime.play import PolicyRun, run_policy
from clocktune.runtime.session import SessionConfig
from clocktune.runtime.speculation_costs import resolve_drafter
from clocktune.runtime.speculative import SpeculationCosts, SpeculationStats
from clocktune.timeline.events import Event, Timeline
from clocktune.tools import BackendFactory

__all__ = ["DrafterRun", "first_divergence", "live_latency_p50", "play_drafters"]

# A margin no expected speedup falls below: the drafter drafts at every step (its raw speed, not the toggle's).
ALWAYS = -1e9


class _Recording:
    """A model policy that keeps each action's token ids (``actions``)."""

    io_bound = False

    def __init__(self, inner: ModelPolicy, actions: list[list[int]]) -> None:
        self.inner, self.actions, self.name = inner, actions, inner.name

    def observe(self, events: list[Event]) -> int:
        return self.inner.observe(events)

    def act(self, t: float) -> Any:
        decision = self.inner.act(t)
        self.actions.append(list(self.inner.last_action_ids))
        return decision

    def close(self) -> None:
        self.inner.close()


@dataclass
class DrafterRun:
    """One drafter's sessions.

    Args:
        name: The drafter as asked for (``none``, ``layer_skip``, ``auto``, ...).
        drafter: The drafter used (``layer_skip:12``; ``none`` when ``auto`` chose plain decoding).
        stats: Its decoding metrics over all sessions.
        actions: Per session, per action, the token ids written.
        seconds: Wall time of its sessions.
        runs: Each session's scored run.
    """

    name: str
    drafter: str
    stats: SpeculationStats
    actions: list[list[list[int]]] = field(default_factory=list)
    seconds: float = 0.0
    runs: list[PolicyRun] = field(default_factory=list)

    @property
    def tokens_per_s(self) -> float:
        """Action tokens per second of decode time (prompt forwards excluded)."""
        return self.stats.tokens / self.stats.decode_s if self.stats.decode_s else 0.0

    @property
    def sessions_per_s(self) -> float:
        """Sessions per second of wall time (a rollout's rate, the virtual clock's waits costing nothing)."""
        return len(self.actions) / self.seconds if self.seconds else 0.0


def _factory(
    model: Any,
    tokenizer: Any,
    drafter: Any,
    costs: SpeculationCosts | None,
    stats: SpeculationStats,
    engine: Engine,
    actions: list[list[list[int]]],
    policy_options: dict[str, Any],
) -> Callable[[Timeline], _Recording]:
    def make(timeline: Timeline) -> _Recording:
        actions.append([])
        policy = ModelPolicy(
            model,
            tokenizer,
            timeline,
            name="model",
            engine=engine,
            drafter=drafter,
            costs=costs,
            decoding=stats,
            **policy_options,
        )
        return _Recording(policy, actions[-1])

    return make


def play_drafters(
    model: Any,
    tokenizer: Any,
    timelines: Sequence[Timeline],
    backends: BackendFactory,
    drafters: Sequence[str],
    costs: SpeculationCosts | None = None,
    config: SessionConfig | None = None,
    always: bool = True,
    progress: Callable[[str], None] | None = None,
    with_plain: bool = True,
    **policy_options: Any,
) -> dict[str, DrafterRun]:
    """Plays every timeline under plain decoding and each drafter, interleaved session by session.

    Args:
        model: The checkpoint's model, in eval mode.
        tokenizer: Its tokenizer.
        timelines: Held-out timelines.
        backends: Tool backends (``data_gen.backends.make_backend``).
        drafters: Drafter names (``none`` is always played first, as the reference).
        costs: Measured speculation costs (measured here per drafter when missing).
        config: Session config (default: the virtual clock, the built-in profile).
        always: Draft at every step (a drafter's raw speed); ``False`` lets the cost model's toggle decide.
        progress: Called with a line after each session.
        with_plain: Also play plain decoding (``none``), first: the reference of speed and identity.
        **policy_options: More :class:`ModelPolicy` arguments (``constrained``, ``max_new_tokens``, ...).

    Returns:
        The runs by drafter name (``none`` first, when played).
    """
    config = config or SessionConfig()
    engine = Engine(model)  # every drafter's sessions, at batch 1 (one session at a time)
    runs: dict[str, DrafterRun] = {}
    makers: dict[str, Callable[[Timeline], _Recording]] = {}
    if always:
        policy_options = {**policy_options, "margin": ALWAYS}
    for name in ["none"] * with_plain + [d for d in drafters if d != "none"]:
        drafter, drafter_costs = resolve_drafter(name, model, costs)
        resolved = drafter.name if drafter is not None else "none"
        run = runs[name] = DrafterRun(name, resolved, SpeculationStats(resolved))
        makers[name] = _factory(
            model, tokenizer, drafter, drafter_costs, run.stats, engine, run.actions, policy_options
        )
    for index, timeline in enumerate(timelines):
        for name, run in runs.items():
            started = time.perf_counter()
            played = run_policy("model", [timeline], makers[name], backends, config, concurrency=1, progress=False)
            run.seconds += time.perf_counter() - started
            run.runs.append(played)
            if progress is not None:
                summary = run.stats.summary()
                # Said per session, so that a long check stopped early still shows what it verified.
                same = "" if name == "none" or "none" not in runs else f", {_same_as_plain(run, runs['none'])}"
                progress(
                    f"session {index + 1}/{len(timelines)} {name}: {len(run.actions[-1])} actions, "
                    f"{run.tokens_per_s:.1f} tokens/s, acceptance {summary['acceptance_rate']}{same}"
                )
    return runs


def _same_as_plain(run: DrafterRun, plain: DrafterRun) -> str:
    # The latest session of each: token for token the same actions, or not.
    return "identical to plain" if run.actions[-1] == plain.actions[-1] else "DIFFERS from plain"


def first_divergence(run: DrafterRun, reference: DrafterRun) -> str | None:
    """Where a run's action tokens first differ from the reference's (greedy identity), if anywhere.

    Args:
        run: A drafter's sessions.
        reference: Plain decoding's, on the same timelines.

    Returns:
        ``None`` when every action of every session is the same token for token, else where it is not.
    """
    for session, (ours, theirs) in enumerate(zip(run.actions, reference.actions, strict=True)):
        for action, (mine, other) in enumerate(zip(ours, theirs, strict=False)):
            if mine != other:
                at = next(
                    (i for i, (a, b) in enumerate(zip(mine, other, strict=False)) if a != b),
                    min(len(mine), len(other)),
                )
                return (
                    f"session {session} action {action} token {at}: {mine[at : at + 3]} against {other[at : at + 3]}"
                )
        if len(ours) != len(theirs):
            return f"session {session}: {len(ours)} actions against {len(theirs)}"
    return None


def live_latency_p50(
    model: Any,
    tokenizer: Any,
    timelines: Sequence[Timeline],
    backends: BackendFactory,
    draft: str,
    costs: SpeculationCosts | None,
    config: SessionConfig,
    **policy_options: Any,
) -> tuple[float | None, SpeculationStats]:
    """The median response latency of live sessions on the wall clock with a drafter (the toggle deciding).

    Args:
        model: The checkpoint's model.
        tokenizer: Its tokenizer.
        timelines: Timelines to play.
        backends: Tool backends.
        draft: The drafter's name (``none`` for plain decoding).
        costs: Measured speculation costs.
        config: A session config on the wall clock.
        **policy_options: More :class:`ModelPolicy` arguments.

    Returns:
        ``(p50 seconds or None when nothing was answered, decoding metrics)``.
    """
    drafter, drafter_costs = resolve_drafter(draft, model, costs)
    stats = SpeculationStats(drafter.name if drafter is not None else "none")
    make = _factory(model, tokenizer, drafter, drafter_costs, stats, {}, [], policy_options)
    run = run_policy("model", timelines, make, backends, config, concurrency=1, progress=False)
    return run.latency(50), stats
