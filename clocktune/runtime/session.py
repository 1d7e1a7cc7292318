"""One live session: the user's speech (replayed from a timeline, or spoken from words), the tool executor, and a
policy, on one clock.

The generator writes its timelines by running its expert in this loop (``data_gen.generate``), so a policy meets
exactly the situations it was trained on: events that arrive while the agent is busy enter its context together at
the next action boundary (speech first, then results, each in order of arrival), reading them costs prefill time,
every action costs decode time (virtual clock: charged through the device profile; wall clock: the time it really
took), and new events interrupt the policy between actions.

Invalid actions (unparsable output, unknown call ids, a commit before the user has finished, ...) are not
executed: the session logs a ``notice`` saying why and asks again, at most ``max_retries`` times in a row, and ends
a session that has used up ``max_notices``. The session logs every event it feeds the policy; the log is a
timeline that renders to exactly the ids a model policy was fed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from clocktune.actions import Action
from clocktune.clock import DeviceProfile
from clocktune.runtime.clocks import Clock, VirtualClock
from clocktune.runtime.executor import ToolExecutor
from clocktune.runtime.policy import Policy
from clocktune.runtime.speech import LiveSpeech, RecordedSpeech, SpeechSource, SpokenChunk
from clocktune.runtime.virtual_clock import GRID_DIGITS, session_seconds
from clocktune.timeline.events import MAX_TIMELINE_S, Event, Timeline
from clocktune.timeline.refs import iter_refs
from clocktune.tools import ToolBackend


@dataclass
class SessionConfig:
    """How a session runs.

    Args:
        device: Compute profile charged on the virtual clock.
        clock: :class:`~clocktune.runtime.clocks.VirtualClock` (reproducible, charged compute) or
            :class:`~clocktune.runtime.clocks.WallClock` (real time).
        failure_rate: Injected probability that a tool call fails.
        tool_timeout_s: Calls slower than this fail with a timeout.
        max_retries: Invalid actions in a row before the session stops asking until the next event.
        max_notices: Notices after which the session gives up.
        turn_limit_s: Seconds after the end of speech after which an unanswered turn ends the session.
    """

    device: DeviceProfile = field(default_factory=DeviceProfile)
    clock: Clock = field(default_factory=VirtualClock)
    failure_rate: float = 0.0
    tool_timeout_s: float | None = 10.0
    max_retries: int = 2
    max_notices: int = 12
    turn_limit_s: float = 60.0


@dataclass
class SessionLog:
    """What one session produced.

    Args:
        timeline: The recorded timeline's header with the session's own events.
        final_state: Backend state at the end.
        answered: Whether every turn got a final answer.
        notices: Number of notices given.
        dispatches: Tool requests started.
        wasted_dispatches: Requests whose results were cancelled, superseded or never used.
        wasted_tool_s: Tool time spent on aborted requests.
        end_reason: ``done``, ``gave_up`` (too many notices) or ``timeout`` (a turn went unanswered).
        speech_ends: When each utterance's final chunk arrived: the end of speech that response latency counts
            from. The chunk's ``t`` in the log is when it entered the agent's context, later than this when the
            agent was still emitting an action as the user finished.
        first_words: When the first words of each final answer were out: response latency ends here. On the
            virtual clock that is the answer's ``t`` (when the agent started writing it) plus the decode of its
            first words (``DeviceProfile.first_words_s``); on the wall clock, when the policy handed the whole
            answer over.
    """

    timeline: Timeline
    final_state: dict[str, Any]
    answered: bool
    notices: int
    dispatches: int
    wasted_dispatches: int
    wasted_tool_s: float
    end_reason: str
    speech_ends: list[float]
    first_words: list[float]


class Session:
    """Runs one timeline's user side against a policy.

    Args:
        timeline: Recorded timeline: its tools, initial state and user speech are replayed.
        policy: The agent.
        config: Session config.
        backend: The session's own tool backend, in the timeline's initial state (from a
            :data:`~clocktune.tools.BackendFactory`).
        speech: Where the user's speech comes from; defaults to the timeline's own user chunks
            (:class:`~clocktune.runtime.speech.RecordedSpeech`). The generator passes the words of a task
            (:class:`~clocktune.runtime.speech.SpokenWords`) with a timeline that has no events yet; a live session
            (``clocktune serve``) passes :class:`~clocktune.runtime.speech.LiveSpeech` and feeds :meth:`hear`.
        on_event: Called with every event as the session logs it (a live session streams its log to the user).

    Raises:
        ValueError: When the timeline has no user speech and no ``speech`` is given, or holds an event past
            :data:`~clocktune.timeline.events.MAX_TIMELINE_S` (validation refuses such a timeline; a caller that
            skipped it must not get a session whose virtual clock runs for ever).
    """

    def __init__(
        self,
        timeline: Timeline,
        policy: Policy,
        config: SessionConfig,
        backend: ToolBackend,
        speech: SpeechSource | None = None,
        on_event: Callable[[Event], None] | None = None,
    ) -> None:
        for index, event in enumerate(timeline.events):
            if not event.t <= MAX_TIMELINE_S:  # also NaN
                raise ValueError(
                    f"timeline {timeline.id!r}: events.{index}.t: {event.t} s is past the longest timeline, "
                    f"{MAX_TIMELINE_S:.0f} s"
                )
        self.timeline = timeline
        self.policy = policy
        self.config = config
        self.backend = backend
        self.tools = {tool.name: tool for tool in timeline.tools}
        self.speech = speech if speech is not None else RecordedSpeech(timeline)
        self._live = getattr(self.speech, "live", False)
        self._on_event = on_event
        self.events: list[Event] = []
        self._inbox: list[dict[str, Any]] = []
        self._wake = asyncio.Event()
        self._speech_pending = 0
        self._turn = 0
        self._heard_final = False
        self._final_heard_at = 0.0
        self._done = False
        self._answered_turns = 0
        self._notices = 0
        self._end_reason = "done"
        self._last_chunk_id: dict[str, str] = {}  # the speech source's chunk id -> logged id (for revisions)
        self._speech_ends: list[float] = []
        self._first_words: list[float] = []

    # Event sources ------------------------------------------------------------------------------------------

    def _arrive(self, fields: dict[str, Any]) -> None:
        if fields["kind"] == "user_chunk":
            self._speech_pending -= 1
            if fields["final"]:
                self._speech_ends.append(self.now())
        self._inbox.append(fields)
        self._wake.set()

    def _schedule_speech(self, chunks: list[SpokenChunk]) -> None:
        for chunk in chunks:
            self._speech_pending += 1
            fields = {"kind": "user_chunk", "text": chunk.text, "final": chunk.final, "recorded": chunk.id}
            if chunk.revises is not None:
                fields["revises"] = chunk.revises
            self._loop.call_at(self._t0 + chunk.t, self._arrive, fields)

    def hear(self, chunk: SpokenChunk) -> None:
        """A live user's recogniser update, arriving now (its ``t`` is ignored: it is heard when it is heard).

        Args:
            chunk: The update; ``revises`` names an earlier update's ``id`` of this session.

        Raises:
            RuntimeError: When the session's speech is not :class:`~clocktune.runtime.speech.LiveSpeech`.
        """
        if not isinstance(self.speech, LiveSpeech):
            raise RuntimeError("only a live session hears speech as it comes; this one replays its speech")
        self.speech.heard(chunk.final)
        self._speech_pending += 1  # _arrive counts it off
        fields = {"kind": "user_chunk", "text": chunk.text, "final": chunk.final, "recorded": chunk.id}
        if chunk.revises is not None:
            fields["revises"] = chunk.revises
        self._arrive(fields)

    def finish(self, reason: str = "done") -> None:
        """Ends a live session (the user left); what is in flight is dropped.

        Args:
            reason: The session's ``end_reason``.
        """
        if not self._done:
            self._end(reason)

    @property
    def done(self) -> bool:
        """Whether the session has ended."""
        return self._done

    def _deliver(self, call_id: str, content: Any, error: str | None) -> None:
        version = self.executor.calls[call_id].version
        self._arrive(
            {"kind": "tool_result", "call_id": call_id, "version": version, "content": content, "error": error}
        )

    def _drop_stale_results(self) -> None:
        # A result that arrived while the agent was writing a modify or cancel of its call (or of a call it depends
        # on) is of a version the action supersedes: the agent must never read it after the action that dropped it.
        def current(fields: dict[str, Any]) -> bool:
            call = self.executor.calls[fields["call_id"]]
            return not call.cancelled and call.version == fields["version"]

        self._inbox[:] = [fields for fields in self._inbox if fields["kind"] != "tool_result" or current(fields)]

    # Log ----------------------------------------------------------------------------------------------------

    def now(self) -> float:
        """Seconds since the session started."""
        return session_seconds(self._loop.time(), self._t0)

    def _log(self, t: float, kind: str, source: str, **fields: Any) -> Event:
        event = Event(f"e{len(self.events)}", t, kind, source, **fields)
        self._record(event)
        return event

    def _record(self, event: Event) -> None:
        self.events.append(event)
        if self._on_event is not None:
            self._on_event(event)

    def _ingest(self) -> list[Event]:
        t = self.now()
        logged = []
        # Speech first, then results, each in order of arrival: a replayed log delivers a chunk at the boundary it was
        # logged at, later than it first arrived, so only this order is the same in the log and in its replay.
        for fields in sorted(self._inbox, key=lambda fields: fields["kind"] != "user_chunk"):
            kind = fields["kind"]
            if kind == "user_chunk":
                revises = self._last_chunk_id.get(fields.get("revises", ""))
                event = self._log(t, "user_chunk", "user", text=fields["text"], final=fields["final"], revises=revises)
                self._last_chunk_id[fields["recorded"]] = event.id
                if fields["final"]:
                    self._heard_final = True
                    self._final_heard_at = t
            else:
                event = self._log(
                    t,
                    "tool_result",
                    "tool",
                    call_id=fields["call_id"],
                    content=fields["content"],
                    error=fields["error"],
                )
            logged.append(event)
        self._inbox.clear()
        return logged

    def _notice(self, t: float, text: str) -> Event:
        self._notices += 1
        return self._log(t, "notice", "system", text=text)

    # Validation ---------------------------------------------------------------------------------------------

    def _check_arguments(self, name: str, arguments: Any) -> str | None:
        if not isinstance(arguments, dict):
            return f"arguments of {name} must be an object"
        parameters = self.tools[name].parameters
        properties = parameters.get("properties", {})
        missing = [key for key in parameters.get("required", []) if key not in arguments]
        if missing:
            return f"{name} needs argument(s) {missing}"
        if parameters.get("additionalProperties") is False:
            unknown = [key for key in arguments if key not in properties]
            if unknown:
                return f"{name} has no argument(s) {unknown}"
        for target in iter_refs(arguments):
            call = self.executor.calls.get(target)
            if call is None or call.cancelled:
                return f"$ref to unknown or cancelled call {target!r}"
        return None

    def _check(self, action: Action) -> str | None:
        """Why the action cannot be executed now, or ``None``."""
        kind = action.kind
        if kind == "tool_call":
            if action.name not in self.tools:
                return f"unknown tool {action.name!r}; tools: {sorted(self.tools)}"
            if action.call_id in self.executor.calls:
                return f"call id {action.call_id!r} is already used; pick a new one"
            return self._check_arguments(action.name, action.arguments)
        if kind in ("tool_modify", "tool_cancel"):
            call = self.executor.open_call(action.call_id)
            if call is None:
                return f"call {action.call_id!r} is unknown, cancelled or already committed"
            if kind == "tool_modify":
                if action.call_id in iter_refs(action.arguments):
                    return f"call {action.call_id!r} cannot reference itself"
                return self._check_arguments(call.name, action.arguments)
            return None
        if kind == "commit" and not self._heard_final:
            return "commit only after the user has finished speaking"
        if kind == "say" and action.final and not self._heard_final:
            return "the user has not finished speaking; answer after the final chunk"
        return None

    # Agent loop ---------------------------------------------------------------------------------------------

    def _nothing_can_arrive(self) -> bool:
        # A live user may always speak again: the agent is never told that nothing is pending.
        return not self._live and not self._inbox and self._speech_pending == 0 and self.executor.in_flight == 0

    async def _act_until_boundary(self) -> None:
        """Asks the policy for actions until it waits, ends the turn, or new events interrupt it."""
        invalid = 0
        while not self._done:
            t = self.now()
            decision = await self.config.clock.decide(self.policy, t)
            await self.config.clock.charge(self.config.device.action_s(decision.tokens))
            action = decision.action
            error = decision.error if action is None else self._check(action)
            if error is not None:
                invalid += 1
                self.policy.observe([self._notice(self.now(), f"invalid action: {error}")])
                if self._notices >= self.config.max_notices:
                    self._end("gave_up")
                    return
                if invalid > self.config.max_retries or self._inbox:
                    return
                continue
            if action.kind == "say" and action.final:
                self._first_words.append(self.config.clock.first_words(t, decision, self.config.device, self._t0))
            event = action.to_event(f"e{len(self.events)}", t)
            self._record(event)
            self.policy.observe([event])
            self._apply(action, t)
            if action.kind == "wait" or (action.kind == "say" and action.final) or self._inbox:
                return

    def _apply(self, action: Action, t: float) -> None:
        kind = action.kind
        if kind == "tool_call":
            self.executor.call(action.call_id, action.name, action.arguments)
        elif kind == "tool_modify":
            self.executor.modify(action.call_id, action.arguments)
            self._drop_stale_results()
        elif kind == "tool_cancel":
            self.executor.cancel(action.call_id)
            self._drop_stale_results()
        elif kind == "commit":
            self.executor.commit()
        elif kind == "say" and action.final:
            self._answered_turns += 1
            self._turn += 1
            self._heard_final = False
            if self._turn == self.speech.utterance_count and not self._live:
                self._end("done")
            else:
                self._schedule_speech(self.speech.after_answer(self._turn, t, self.now()))

    def _end(self, reason: str) -> None:
        self._done = True
        self._end_reason = reason
        self._wake.set()

    async def _turn_watchdog(self) -> None:
        # A policy that never answers must not hang the session (or a benchmark of thousands of them). The limit
        # counts from the user's final words of the turn, not from the turn's start: a turn whose speech lasts longer
        # than the limit still gets all of it to answer in.
        limit = self.config.turn_limit_s
        while not self._done:
            if not self._heard_final:
                await asyncio.sleep(limit)
                continue
            # On the grid of the virtual clock: a remainder under half a millisecond would be a sleep of 0 there,
            # and the watchdog would wake at the same time for ever.
            left = round(limit - (self.now() - self._final_heard_at), GRID_DIGITS)
            if left <= 0:
                self._end("timeout")
                return
            await asyncio.sleep(left)

    async def run(self) -> SessionLog:
        """Plays the session out.

        Returns:
            The session's log and outcome.
        """
        self._loop = asyncio.get_running_loop()
        self._t0 = self._loop.time()
        self.executor = ToolExecutor(
            self.timeline.tools,
            self.backend,
            self.timeline.seed,
            self._deliver,
            self.config.failure_rate,
            self.config.tool_timeout_s,
            self.backend.sequential,
        )
        self._schedule_speech(self.speech.first())
        watchdog = asyncio.ensure_future(self._turn_watchdog())
        try:
            while not self._done:
                if not self._inbox:
                    if not self._nothing_can_arrive():
                        self._wake.clear()
                        await self._wake.wait()
                        continue
                    # The policy waits for something that will never come: tell it, and let it act again.
                    tokens = self.policy.observe([self._notice(self.now(), "nothing is pending: act now")])
                    if self._notices >= self.config.max_notices:
                        self._end("gave_up")
                        break
                else:
                    tokens = self.policy.observe(self._ingest())
                await self.config.clock.charge(self.config.device.prefill_s(tokens))
                await self._act_until_boundary()
        finally:
            watchdog.cancel()
            for call in self.executor.calls.values():
                if call.timer is not None:
                    call.timer.cancel()
        log = Timeline(
            id=self.timeline.id,
            domain=self.timeline.domain,
            task=self.timeline.task,
            seed=self.timeline.seed,
            teacher=self.policy.name,
            tools=self.timeline.tools,
            initial_state=self.timeline.initial_state,
            ground_truth=self.timeline.ground_truth,
            events=self.events,
        )
        return SessionLog(
            timeline=log,
            final_state=self.backend.state(),
            answered=self._answered_turns == self.speech.utterance_count,
            notices=self._notices,
            dispatches=self.executor.dispatches,
            wasted_dispatches=self.executor.wasted_dispatches,
            wasted_tool_s=round(self.executor.wasted_tool_s, 3),
            end_reason=self._end_reason,
            speech_ends=self._speech_ends,
            first_words=self._first_words,
        )
