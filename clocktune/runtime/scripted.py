"""Scripted policies: agents that follow a recorded timeline's plan, with the timing of a given strategy.

Every scripted policy knows what the user wants (the recorded teacher's final calls and answer of each turn) and
differs only in *when* it acts, so that comparing them on the same timelines isolates the latency that a
strategy saves (docs/design.md §5):

- ``sync``: turn-based. Waits for the end of speech, then one call at a time with resolved arguments, each after
  the previous result; commits each state-changing call as it goes; answers when all results are in.
- ``sync_parallel``: turn-based, but issues every call whose inputs are known at once (as tool-calling APIs with
  parallel calls allow), round after round.
- ``async``: streaming and parallel, no speculation: at the end of speech it issues every call at once, dependent
  ones with ``$ref`` inputs that the executor resolves, commits, and answers as soon as the results are in.
- ``speculative``: replays the recorded speculative teacher's actions, wrong guesses, modifies and cancels
  included, each as soon as the events the teacher had seen before it have arrived.
- ``oracle``: issues each final call, with no wrong guess first, as soon as the user has said as many words as
  the teacher had heard when it settled that call; commits at the end of speech; answers when the results are
  in. This is the bound for a policy that acts on the same evidence.

The final answer is the recorded one, or an apology naming the error when a call of the turn failed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from clocktune.actions import Action
from clocktune.clock import estimate_tokens
from clocktune.runtime.policy import Decision
from clocktune.timeline.events import Event, Timeline
from clocktune.timeline.refs import iter_refs, resolve_refs

SCRIPTED_POLICIES = ("sync", "sync_parallel", "async", "speculative", "oracle")

# What the teacher had seen before an action: chunks of the turn, and per call id the version it had issued last
# (0 for the call, +1 per modify) and whether that version's result had arrived.
Trigger = tuple[int, dict[str, tuple[int, bool]]]


@dataclass
class ScriptCall:
    """A call as the recorded teacher finally issued it.

    Args:
        call_id: Recorded call id (reused, so references stay valid).
        name: Tool name.
        arguments: Final arguments, references unresolved.
        side_effect: Whether the tool changes state.
        settled_after_chunks: Chunks of its turn the teacher had heard when it issued the final version.
    """

    call_id: str
    name: str
    arguments: dict[str, Any]
    side_effect: bool
    settled_after_chunks: int


@dataclass
class ScriptTurn:
    """One turn of the plan: its final calls in issue order, its answer, and the teacher's actions."""

    calls: list[ScriptCall] = field(default_factory=list)
    answer: str = ""
    actions: list[tuple[Trigger, Action]] = field(default_factory=list)


def _action(event: Event) -> Action:
    return Action(event.kind, event.call_id, event.name, event.arguments, event.text, event.final)


def dialogue_script(timeline: Timeline) -> list[ScriptTurn]:
    """Reads the plan of a recorded timeline, turn by turn.

    Args:
        timeline: A recorded timeline (any teacher; the ``speculative`` policy needs a speculative one to
            speculate).

    Returns:
        The turns.
    """
    side_effect = {tool.name: tool.side_effect for tool in timeline.tools}
    turns = [ScriptTurn()]
    chunks = 0
    seen: dict[str, tuple[int, bool]] = {}
    calls: dict[str, ScriptCall] = {}
    for event in timeline.events:
        turn = turns[-1]
        if event.kind == "user_chunk":
            chunks += 1
        elif event.kind == "tool_result":
            seen[event.call_id] = (seen[event.call_id][0], True)
        elif event.source == "agent":
            if event.kind != "wait":  # waiting is what a replay does between actions anyway
                turn.actions.append(((chunks, dict(seen)), _action(event)))
            if event.kind == "tool_call":
                seen[event.call_id] = (0, False)
            elif event.kind == "tool_modify":
                seen[event.call_id] = (seen[event.call_id][0] + 1, False)
            if event.kind in ("tool_call", "tool_modify"):
                previous = calls.get(event.call_id)
                name = event.name if previous is None else previous.name
                call = ScriptCall(event.call_id, name, event.arguments, side_effect.get(name, False), chunks)
                calls[event.call_id] = call
                if previous is None:
                    turn.calls.append(call)
                else:
                    turn.calls[:] = [call if c.call_id == call.call_id else c for c in turn.calls]
            elif event.kind == "tool_cancel":
                turn.calls[:] = [c for c in turn.calls if c.call_id != event.call_id]
            elif event.kind == "say" and event.final:
                turn.answer = event.text or ""
                turns.append(ScriptTurn())
                chunks = 0
    if not turns[-1].actions:
        turns.pop()
    return turns


class ScriptedPolicy:
    """A policy that follows a recorded timeline's plan with the timing of ``strategy``.

    Args:
        timeline: The recorded timeline.
        strategy: One of :data:`SCRIPTED_POLICIES`.
    """

    io_bound = False

    def __init__(self, timeline: Timeline, strategy: str) -> None:
        if strategy not in SCRIPTED_POLICIES:
            raise ValueError(f"unknown scripted policy {strategy!r}; choose from {SCRIPTED_POLICIES}")
        self.name = strategy
        self.strategy = strategy
        self.script = dialogue_script(timeline)
        self._turn = 0
        self._chunks = 0
        self._final_heard = False
        self._issued: set[str] = set()
        self._committed: set[str] = set()
        self._results: dict[str, list[tuple[Any, str | None]]] = {}
        self._cursor = 0  # next recorded action of the turn (``speculative``)
        self._versions: dict[str, int] = {}  # call id -> version last issued (replay triggers)

    def close(self) -> None:
        """Nothing to release: the plan is plain data."""

    # Observation ----------------------------------------------------------------------------------------------

    def observe(self, events: list[Event]) -> int:
        """Updates what the policy knows; returns the tokens it read (agent events cost none: it wrote them)."""
        tokens = 0
        for event in events:
            if event.kind == "user_chunk":
                self._chunks += 1
                self._final_heard = self._final_heard or bool(event.final)
                tokens += estimate_tokens(event.text or "")
            elif event.kind == "tool_result":
                self._results.setdefault(event.call_id, []).append((event.content, event.error))
                tokens += estimate_tokens(event.error or json.dumps(event.content))
            elif event.kind == "notice":
                tokens += estimate_tokens(event.text or "")
            elif event.kind in ("tool_call", "tool_modify"):
                self._issued.add(event.call_id)
                self._versions[event.call_id] = self._versions.get(event.call_id, -1) + 1
                self._results.pop(event.call_id, None)  # a new version: old results no longer count
                if event.kind == "tool_modify":
                    self._committed.discard(event.call_id)
            elif event.kind == "commit":
                self._committed |= self._issued
            elif event.kind == "say" and event.final:
                self._turn += 1
                self._chunks, self._final_heard, self._cursor = 0, False, 0
        return tokens

    # Decisions ------------------------------------------------------------------------------------------------

    def act(self, t: float) -> Decision:
        """The next action under the policy's strategy."""
        if self._turn >= len(self.script):
            return self._decision(Action("wait"))
        turn = self.script[self._turn]
        if self.strategy == "speculative":
            action = self._replay(turn)
        elif not self._final_heard and self.strategy != "oracle":
            action = Action("wait")
        else:
            action = self._plan(turn)
        return self._decision(action)

    def _decision(self, action: Action) -> Decision:
        if action.kind in ("tool_call", "tool_modify"):
            tokens = estimate_tokens(json.dumps({"name": action.name, "arguments": action.arguments}))
        else:
            tokens = estimate_tokens(action.text or action.call_id or "")
        return Decision(action, tokens)

    def _result(self, call_id: str) -> tuple[Any, str | None] | None:
        results = self._results.get(call_id)
        return results[-1] if results else None

    def _answer(self, turn: ScriptTurn) -> Action:
        for call in turn.calls:
            result = self._result(call.call_id)
            if result is not None and result[1] is not None:
                return Action("say", text=f"Sorry, I couldn't complete that: {result[1]}.", final=True)
        return Action("say", text=turn.answer, final=True)

    def _plan(self, turn: ScriptTurn) -> Action:
        issued = [call for call in turn.calls if call.call_id in self._issued]
        uncommitted = self._final_heard and any(
            call.side_effect and call.call_id not in self._committed for call in issued
        )
        in_flight = any(self._result(call.call_id) is None for call in issued)
        if self.strategy == "sync" and in_flight:
            return Action("commit") if uncommitted else Action("wait")
        for call in turn.calls:
            if call.call_id in self._issued:
                continue
            targets = list(dict.fromkeys(iter_refs(call.arguments)))
            if any(target not in self._issued for target in targets):
                continue  # its inputs are issued first
            if self.strategy == "oracle" and not self._final_heard and self._chunks < call.settled_after_chunks:
                continue
            if self.strategy in ("async", "oracle"):
                return Action("tool_call", call.call_id, call.name, call.arguments)
            inputs = [self._result(target) for target in targets]
            if any(result is None for result in inputs):
                continue  # next round, once its inputs are back
            if any(result[1] is not None for result in inputs):
                return self._answer(turn)  # an input failed: the rest cannot run
            arguments = resolve_refs(call.arguments, lambda target: self._result(target)[0])
            return Action("tool_call", call.call_id, call.name, arguments)
        if uncommitted:
            return Action("commit")
        if self._final_heard and len(issued) == len(turn.calls) and not in_flight:
            return self._answer(turn)
        return Action("wait")

    def _has_seen(self, call_id: str, version: int, result: bool) -> bool:
        mine = self._versions.get(call_id, -1)
        return mine > version or (mine == version and (not result or call_id in self._results))

    def _replay(self, turn: ScriptTurn) -> Action:
        while self._cursor < len(turn.actions):
            (chunks, seen), action = turn.actions[self._cursor]
            if self._chunks < chunks or not all(self._has_seen(key, *state) for key, state in seen.items()):
                return Action("wait")
            self._cursor += 1
            if action.kind == "say" and action.final:
                return self._answer(turn)
            return action
        return Action("wait")
