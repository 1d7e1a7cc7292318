"""Teacher planners of the importers: play an imported task out on the virtual clock and write the agent's side.

Generated domains and imported conversations no longer come here: ``data_gen.generate.play_task`` runs the reactive
expert in the runtime. The BFCL importer still does, for its program-order rule (docs/design.md §10), so this module
is a second implementation of the runtime's call graph, kept in step with ``clocktune.runtime.executor`` by hand.

The simulation has three actors, each timed by ``clocktune.clock``: the user's speech (recogniser updates),
the tool executor (latency, dependencies, commit), and the agent, which reads new events (prefill), then emits
one action at a time (decode). Events that arrive while the agent is emitting are placed at the next action
boundary, so every event's ``t`` is when the agent's context receives it.

Two teachers decide the agent's actions:

- ``speculative`` acts on the most likely reading of the words so far once it is confident enough: it issues
  calls while the user speaks (read-only ones run at once, state-changing ones are held by the executor),
  modifies or cancels them when later words change the reading, commits once the user has finished, may
  acknowledge, and answers as soon as the results are in.
- ``sync`` is the turn-based baseline: it waits for the end of speech, then makes one call at a time with
  resolved arguments, waiting for each result before the next.

Where each call acts on the state the earlier ones leave (BFCL), ``program_order`` makes the speculative teacher
keep the listed order of a turn's calls, issuing only a turn's leading read-only calls before the user has
finished; see :class:`Simulation`.
"""

from __future__ import annotations

import copy
import heapq
import json
import random
from dataclasses import dataclass, field
from typing import Any

from clocktune.clock import SpeechChunk, estimate_tokens, sample_failure, sample_latency, speak, speaker_rate
from clocktune.timeline.events import Event, GroundTruth, GroundTruthCall, ToolSchema
from clocktune.timeline.refs import resolve_refs
from data_gen.config import GeneratorConfig
from data_gen.domains.base import Domain, ToolError
from data_gen.expert.policy import ACKNOWLEDGEMENTS
from data_gen.task import Answer, PlannedCall, Reading, Task, Turn, referenced_keys, rekey


class PlannerError(RuntimeError):
    """A task that cannot be played out (a grammar bug): raised with the task kind and what went wrong."""


@dataclass
class _Call:
    """The executor's and the agent's view of one call."""

    call_id: str
    key: str
    name: str
    side_effect: bool
    turn: int
    arguments: dict[str, Any]
    version: int = 0
    cancelled: bool = False
    committed: bool = False
    needs_dispatch: bool = True
    executor_version: int = -1  # version whose result has reached the executor
    seen_version: int = -1  # version whose result the agent has read
    result: Any = None
    error: str | None = None
    resolved: dict[str, Any] | None = None

    @property
    def open(self) -> bool:
        """Whether the agent may still modify or cancel the call."""
        return not self.cancelled and not (self.side_effect and self.committed)


@dataclass
class Simulation:
    """One dialogue played out on the virtual clock.

    Args:
        domain: Domain whose backend executes the calls.
        tools: Tool schemas with the latency models in force.
        task: What the user wants, turn by turn.
        state: Backend state; mutated by state-changing calls.
        config: Generator config (speech, device, planner).
        seed: Seed of the speech, tool and agent random streams.
        teacher: ``speculative`` or ``sync``.
        program_order: Whether the gold calls of a turn must run in the order they are listed, each acting on the
            state the earlier ones leave (BFCL: ``cd`` then ``ls``). The ``speculative`` teacher then issues the
            calls the way a readers-writer lock would, so the order holds on any executor: a read-only call once
            every earlier state-changing call of the turn has returned, a state-changing call once every earlier
            call has; consecutive read-only calls still run in parallel. The calls are issued with their planned
            arguments, so they must not reference each other's results. Before the final chunk it issues only the
            turn's leading read-only calls, in order, once the current reading holds each as the gold one does (its
            arguments have been heard): they act on the state the earlier turns left. The ``sync`` teacher keeps
            the order anyway.
    """

    domain: Domain
    tools: list[ToolSchema]
    task: Task
    state: dict[str, Any]
    config: GeneratorConfig
    seed: int
    teacher: str
    events: list[Event] = field(default_factory=list)
    program_order: bool = False

    def __post_init__(self) -> None:
        self._speech_rng = random.Random(f"{self.seed}:speech")
        self._tool_rng = random.Random(f"{self.seed}:tools")
        self._agent_rng = random.Random(f"{self.seed}:agent")
        self._tools = {tool.name: tool for tool in self.tools}
        self._queue: list[tuple[float, int, str, Any]] = []
        self._sequence = 0
        self._calls: dict[str, _Call] = {}
        self._by_key: dict[str, _Call] = {}
        self._dependents: dict[str, list[str]] = {}
        self._rate = speaker_rate(self.config.speech, self._speech_rng)
        self._turn = 0
        self._heard = 0
        self._final = False
        self._acked = False
        self._ack_wanted = False
        self._last_chunk_id: str | None = None
        self._last_chunk_garbled = False
        self._done = False
        self.answers: list[Answer] = []

    # Scheduling ------------------------------------------------------------------------------------------

    def _push(self, t: float, kind: str, payload: Any) -> None:
        self._sequence += 1
        heapq.heappush(self._queue, (t, self._sequence, kind, payload))

    def _start_turn(self, index: int, start_s: float) -> None:
        turn = self.task.turns[index]
        for chunk in speak(turn.words, start_s, self._rate, self.config.speech, self._speech_rng):
            self._push(chunk.t, "chunk", chunk)

    def _emit(self, t: float, kind: str, source: str, **fields: Any) -> Event:
        event = Event(f"e{len(self.events)}", round(t, 3), kind, source, **fields)
        self.events.append(event)
        return event

    # Tool executor ---------------------------------------------------------------------------------------

    def _try_dispatch(self, call: _Call, t: float) -> None:
        if call.cancelled or not call.needs_dispatch or (call.side_effect and not call.committed):
            return
        deps = [self._calls[target] for target in referenced_keys(call.arguments)]
        if any(dep.executor_version != dep.version for dep in deps):
            return  # dispatched again when the missing result arrives
        call.needs_dispatch = False
        model = self._tools[call.name].latency
        latency = sample_latency(model, self._tool_rng)
        failed_dep = next((dep for dep in deps if dep.error is not None), None)
        if failed_dep is not None:
            payload = (call.call_id, call.version, None, f"input {failed_dep.call_id} failed")
        else:
            resolved = resolve_refs(call.arguments, lambda target: self._calls[target].result)
            if sample_failure(model, self._tool_rng):
                payload = (call.call_id, call.version, None, f"{call.name} timed out")
            else:
                call.resolved = resolved  # only calls that reached the backend belong to ground truth
                try:
                    content = self.domain.execute(self.state, call.name, call.resolved)
                    payload = (call.call_id, call.version, content, None)
                except ToolError as error:
                    payload = (call.call_id, call.version, None, str(error))
        self._push(t + latency, "result", payload)

    def _receive_result(self, t: float, payload: tuple) -> bool:
        """Executor side of a result; returns whether the agent should see it (late results are dropped)."""
        call_id, version, content, error = payload
        call = self._calls[call_id]
        if call.cancelled or version != call.version:
            return False
        call.executor_version, call.result, call.error = version, content, error
        for dependent in self._dependents.get(call_id, []):
            self._try_dispatch(self._calls[dependent], t)
        return True

    def _invalidate_dependents(self, call_id: str) -> None:
        for dependent_id in self._dependents.get(call_id, []):
            dependent = self._calls[dependent_id]
            # An executed state-changing call is never run again.
            if not dependent.cancelled and not dependent.needs_dispatch and not dependent.committed:
                dependent.version += 1
                dependent.needs_dispatch = True
                self._invalidate_dependents(dependent_id)

    # Agent ------------------------------------------------------------------------------------------------

    def _ingest(self, t: float, kind: str, payload: Any) -> int:
        """Places an arrival in the agent's context at ``t``; returns its token count for the prefill."""
        if kind == "chunk":
            chunk: SpeechChunk = payload
            revises = self._last_chunk_id if self._last_chunk_garbled else None
            event = self._emit(t, "user_chunk", "user", text=chunk.text, final=chunk.final, revises=revises)
            self._last_chunk_id, self._last_chunk_garbled = event.id, chunk.garbled
            if not chunk.garbled:
                self._heard = chunk.end
            if chunk.final:
                self._final = True
                self._ack_wanted = self._agent_rng.random() < self.config.planner.ack_rate
            return estimate_tokens(chunk.text)
        call_id, version, content, error = payload
        call = self._calls[call_id]
        call.seen_version = version
        self._emit(t, "tool_result", "tool", call_id=call_id, content=content, error=error)
        return estimate_tokens(json.dumps(content) if error is None else error)

    def _reading(self, turn: Turn) -> Reading | None:
        if self._final:
            return turn.gold
        current = None
        for reading in turn.readings:
            if reading.at_word > self._heard:
                break
            current = reading
        if current is None or current.confidence < self.config.planner.threshold:
            return None
        return current

    def _decide_speculative(self, turn: Turn) -> tuple[str, dict[str, Any]]:
        reading = self._reading(turn)
        if reading is not None:
            # Useful work first, clean-up second: a new or changed call is worth more than an early cancel.
            # State-changing calls are issued too: the executor holds them until the commit.
            for planned in reading.calls:
                action = self._reconcile(planned)
                if action is not None:
                    return action
            wanted = {planned.key for planned in reading.calls}
            for call in self._by_key.values():
                if call.turn == self._turn and call.open and call.key not in wanted:
                    return "tool_cancel", {"call": call}
        if not self._final:
            return "wait", {}
        return self._finish_turn(turn)

    def _decide_program_order(self, turn: Turn) -> tuple[str, dict[str, Any]]:
        if not self._final:
            return self._early_reads(turn)
        change_pending = read_pending = False
        for planned in turn.gold.calls:
            call = self._by_key.get(planned.key)
            if call is None:
                if change_pending or (read_pending and self._tools[planned.name].side_effect):
                    break
                return "tool_call", {"planned": planned, "arguments": planned.arguments}
            if call.seen_version != call.version:
                change_pending = change_pending or call.side_effect
                read_pending = read_pending or not call.side_effect
        else:
            return self._finish_turn(turn)
        if any(call.turn == self._turn and call.side_effect and call.open for call in self._calls.values()):
            return "commit", {}
        if self._ack_wanted and not self._acked:
            self._acked = True
            return "say", {"answer": Answer(self._agent_rng.choice(ACKNOWLEDGEMENTS)), "final": False}
        return "wait", {}

    def _early_reads(self, turn: Turn) -> tuple[str, dict[str, Any]]:
        # Before the end of speech only the turn's leading read-only calls may run, in the gold order, each once the
        # current reading holds it as the gold reading does: they act on the state the earlier turns left, which
        # is final, and nothing of this turn runs before them. Everything from the first state-changing call on
        # waits for the final chunk, as before.
        reading = self._reading(turn)
        if reading is not None:
            ready = {planned.key: planned for planned in reading.calls}
            for planned in turn.gold.calls:
                if self._tools[planned.name].side_effect or ready.get(planned.key) != planned:
                    break
                if planned.key not in self._by_key:
                    return "tool_call", {"planned": planned, "arguments": planned.arguments}
        return "wait", {}

    def _reconcile(self, planned: PlannedCall) -> tuple[str, dict[str, Any]] | None:
        if any(key not in self._by_key for key in referenced_keys(planned.arguments)):
            return None  # its inputs come first
        arguments = rekey(planned.arguments, {key: call.call_id for key, call in self._by_key.items()})
        call = self._by_key.get(planned.key)
        if call is None:
            return "tool_call", {"planned": planned, "arguments": arguments}
        if call.name != planned.name and call.open:
            return "tool_cancel", {"call": call}  # a modify keeps the tool; a different tool is a new call
        if call.arguments != arguments and call.open:
            return "tool_modify", {"call": call, "arguments": arguments}
        return None

    def _decide_sync(self, turn: Turn) -> tuple[str, dict[str, Any]]:
        if not self._final:
            return "wait", {}
        for planned in turn.gold.calls:
            call = self._by_key.get(planned.key)
            if call is None:
                arguments = resolve_refs(planned.arguments, lambda key: self._by_key[key].result)
                return "tool_call", {"planned": planned, "arguments": arguments}
            if call.side_effect and not call.committed:
                return "commit", {}
            if call.seen_version != call.version:
                return "wait", {}
        return self._finish_turn(turn)

    def _finish_turn(self, turn: Turn) -> tuple[str, dict[str, Any]]:
        gold = [self._by_key.get(planned.key) for planned in turn.gold.calls]
        if any(call is None for call in gold):
            return "wait", {}
        if any(call.side_effect and not call.committed for call in gold):
            return "commit", {}
        if all(call.seen_version == call.version for call in gold):
            failed = next((call for call in gold if call.error is not None), None)
            if failed is not None:
                answer = Answer(f"Sorry, I couldn't complete that: {failed.error}.")
            else:
                answer = turn.answer({planned.key: self._by_key[planned.key].result for planned in turn.gold.calls})
            return "say", {"answer": answer}
        if self._ack_wanted and not self._acked:
            self._acked = True
            return "say", {"answer": Answer(self._agent_rng.choice(ACKNOWLEDGEMENTS)), "final": False}
        return "wait", {}

    def _act(self, t: float, action: str, detail: dict[str, Any]) -> float:
        """Emits one action at ``t``, applies its effects, and returns when the agent is free again."""
        device = self.config.device
        if action == "tool_call":
            planned: PlannedCall = detail["planned"]
            call_id = f"c{len(self._calls) + 1}"
            arguments = detail["arguments"]
            text = json.dumps({"name": planned.name, "arguments": arguments})
            end = t + device.action_s(estimate_tokens(text))
            call = _Call(
                call_id, planned.key, planned.name, self._tools[planned.name].side_effect, self._turn, arguments
            )
            self._calls[call_id] = call
            self._by_key[planned.key] = call
            for target in referenced_keys(arguments):
                self._dependents.setdefault(target, []).append(call_id)
            self._emit(t, "tool_call", "agent", call_id=call_id, name=planned.name, arguments=arguments)
            self._try_dispatch(call, end)
        elif action == "tool_modify":
            call: _Call = detail["call"]
            end = t + device.action_s(estimate_tokens(json.dumps(detail["arguments"])))
            call.arguments = detail["arguments"]
            call.version += 1
            call.needs_dispatch = True
            self._invalidate_dependents(call.call_id)
            self._emit(t, "tool_modify", "agent", call_id=call.call_id, arguments=call.arguments)
            self._try_dispatch(call, end)
        elif action == "tool_cancel":
            call = detail["call"]
            end = t + device.action_s(estimate_tokens(call.call_id))
            call.cancelled = True
            del self._by_key[call.key]
            self._emit(t, "tool_cancel", "agent", call_id=call.call_id)
        elif action == "commit":
            end = t + device.action_s(2)
            self._emit(t, "commit", "agent")
            for call in self._calls.values():
                if call.side_effect and call.open:
                    call.committed = True
                    self._try_dispatch(call, end)
        elif action == "say":
            answer: Answer = detail["answer"]
            final = detail.get("final", True)
            end = t + device.action_s(estimate_tokens(answer.text))
            self._emit(t, "say", "agent", text=answer.text, final=final)
            if final:
                self.answers.append(answer)
                self._end_turn(end)
        else:
            end = t + device.action_s(1)
            self._emit(t, "wait", "agent")
        return end

    def _end_turn(self, t: float) -> None:
        self._turn += 1
        self._heard, self._final, self._acked, self._ack_wanted = 0, False, False, False
        if self._turn == len(self.task.turns):
            self._done = True
            return
        gap = self._speech_rng.uniform(self.config.speech.turn_gap_min_s, self.config.speech.turn_gap_max_s)
        self._start_turn(self._turn, t + gap)

    def _next_arrival(self) -> float:
        """Time of the next event the agent will see; late results of superseded calls are dropped on the way."""
        while self._queue:
            t, _, kind, payload = self._queue[0]
            if kind == "result":
                call = self._calls[payload[0]]
                if call.cancelled or payload[1] != call.version:
                    heapq.heappop(self._queue)
                    continue
            return t
        return float("inf")

    def run(self) -> list[Event]:
        """Plays the task out and returns the timeline's events.

        Raises:
            PlannerError: When the agent is left waiting with nothing left to arrive.
        """
        if self.teacher != "speculative":
            decide = self._decide_sync
        elif self.program_order:
            decide = self._decide_program_order
        else:
            decide = self._decide_speculative
        start = self._speech_rng.uniform(self.config.speech.start_min_s, self.config.speech.start_max_s)
        self._start_turn(0, start)
        free_at = 0.0
        while not self._done:
            if not self._queue:
                raise PlannerError(f"task {self.task.kind!r}: the agent waits but nothing is left to arrive")
            boundary = max(self._queue[0][0], free_at)
            tokens = 0
            # Everything that has arrived by the boundary enters the context together.
            while self._queue and self._queue[0][0] <= boundary:
                t, _, kind, payload = heapq.heappop(self._queue)
                if kind == "result" and not self._receive_result(t, payload):
                    continue
                tokens += self._ingest(boundary, kind, payload)
            if tokens == 0:
                continue
            t = boundary + self.config.device.prefill_s(tokens)
            while True:
                action, detail = decide(self.task.turns[self._turn])
                t = self._act(t, action, detail)
                if action == "wait" or self._done or (action == "say" and detail.get("final", True)):
                    break
                if self._next_arrival() <= t:
                    break  # new events interrupt at this action boundary
            free_at = t
        return self.events

    def ground_truth(self) -> GroundTruth:
        """The calls of every turn's gold reading with the arguments they executed with (calls whose input
        failed never execute), the final state, and the facts of the last answer."""
        calls = []
        for turn in self.task.turns:
            for planned in turn.gold.calls:
                call = self._by_key[planned.key]
                if call.resolved is not None:
                    calls.append(GroundTruthCall(call.name, call.resolved))
        facts = self.answers[-1].facts if self.answers else []
        return GroundTruth(calls=calls, final_state=self.state, facts=list(facts))


def simulate(
    domain: Domain,
    tools: list[ToolSchema],
    task: Task,
    state: dict[str, Any],
    config: GeneratorConfig,
    seed: int,
    teacher: str,
    program_order: bool = False,
) -> tuple[list[Event], GroundTruth]:
    """Plays a task out under a teacher.

    Args:
        domain: Domain whose backend executes calls.
        tools: Tool schemas with the latency models in force.
        task: The task a grammar produced.
        state: Initial backend state (not modified).
        config: Generator config.
        seed: Seed of the dialogue.
        teacher: ``speculative`` or ``sync``.
        program_order: Keep the listed order of each turn's gold calls; see :class:`Simulation`.

    Returns:
        The events and the ground truth.
    """
    simulation = Simulation(
        domain, tools, task, copy.deepcopy(state), config, seed, teacher, program_order=program_order
    )
    events = simulation.run()
    return events, simulation.ground_truth()
