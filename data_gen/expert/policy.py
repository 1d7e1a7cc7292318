"""Reactive experts: runtime policies that finish a generated task from whatever state a session is in.

An :class:`ExpertPolicy` decides from two things only: what the session has shown it (a
:class:`~data_gen.expert.view.SessionView` of the events it observed, the agent's accepted actions included,
whoever chose them) and the task's privileged ground truth (:class:`~data_gen.task.Task`: each turn's words, the
readings they allow, the gold calls with ``$ref`` dependencies by key, the answer function). It never reads a
recorded timeline's agent events, so it can label the states a student reaches (DAgger).

At each decision it maps the session's calls onto the calls it wants (a key is *bound* to the call the expert issued
for it, or to any call with the same tool and the same arguments once references are resolved), then repairs
before it builds: a bound call with another tool is cancelled, one with other arguments modified, one that failed
transiently run again; missing calls are issued once their inputs are (``$ref``: lists before acting); calls nobody
wants are cancelled; ``commit`` comes only when every open state-changing call is a gold call with the right
arguments (its inputs included); the answer comes once every gold result is in: the task's answer function over the
results seen, or an apology naming the first error of a call that failed for good. The strategies differ only in
*when* they act, as the scripted policies do (``clocktune.runtime.scripted``), but from the task:

- ``speculative``: acts on the current reading of the words heard once its confidence reaches the threshold, as the
  generator's speculative teacher does (read-only and state-changing calls while the user speaks, modify or cancel
  when the reading changes, commit once the user has finished, an occasional acknowledgement, the answer once the
  results are in);
- ``sync``: after the end of speech, one call at a time with resolved arguments, each write committed as it goes;
- ``sync_parallel``: after the end of speech, every call whose inputs' results are in at once, round by round;
- ``async``: at the end of speech, every call at once, dependent ones with ``$ref`` inputs;
- ``oracle``: each gold call, with no wrong guess first, once the words heard settle it (from the first confident
  reading from which every later confident reading holds it as the gold one does); commit at the end of speech.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from typing import Any

from clocktune.actions import Action
from clocktune.clock import estimate_tokens
from clocktune.runtime.executor import error_kind
from clocktune.runtime.policy import Decision
from clocktune.timeline.events import Event, ToolSchema
from data_gen.expert.view import UNRESOLVED, CallView, SessionView
from data_gen.task import PlannedCall, Reading, Task, Turn, referenced_keys, rekey

__all__ = ["ACKNOWLEDGEMENTS", "EXPERT_STRATEGIES", "MAX_RETRIES", "ExpertPolicy"]

EXPERT_STRATEGIES = ("speculative", "sync", "sync_parallel", "async", "oracle")
# What the speculative expert says while results are pending (``ack_rate``).
ACKNOWLEDGEMENTS = ("One moment.", "Let me check.", "On it.", "Sure, checking now.", "Give me a second.")
# Runs of one gold call after transient failures (timeouts, injected faults) before the expert apologises.
MAX_RETRIES = 3
_WAIT = Action("wait")


def settle_points(turn: Turn, threshold: float) -> dict[str, int]:
    """How many words of a turn settle each gold call: from there on every confident reading holds it as gold does.

    Args:
        turn: The turn.
        threshold: Confidence at which a reading is acted on; readings below it change nothing.

    Returns:
        Gold call key -> words heard (at most the utterance's length: the gold reading settles every call).
    """
    points = {}
    for planned in turn.gold.calls:
        settled = len(turn.words)
        for reading in reversed(turn.readings):
            if reading.confidence < threshold:
                continue
            if planned not in reading.calls:
                break
            settled = min(settled, reading.at_word)
        points[planned.key] = settled
    return points


class ExpertPolicy:
    """A policy that finishes a task from any state, with the timing of a strategy.

    Args:
        task: The task's ground truth (rebuilt from the timeline's seed: ``data_gen.dialogues.dialogue_task``).
        tools: The session's tool schemas.
        strategy: One of :data:`EXPERT_STRATEGIES`.
        threshold: Confidence at which ``speculative`` acts on a reading (the generator's ``planner.threshold``).
        ack_rate: Probability that ``speculative`` acknowledges a finished utterance whose results are pending.
        seed: The dialogue's seed (acknowledgements are drawn from its agent stream).
        name: What its results and logs are called; defaults to the strategy.
        program_order: For tasks whose calls act on the state the earlier ones leave (BFCL: ``cd``, then ``ls``),
            run on a ``sequential`` backend that keeps the order calls are issued in: ``speculative`` then issues
            only a turn's leading read-only calls before the user has finished, each once the reading holds it as
            the gold reading does (they act on the state the earlier turns left); everything from the first
            state-changing call on waits for the final chunk, and is issued in gold order. The other strategies
            issue in gold order anyway.

    Attributes:
        gold_call_ids: The session calls that stood for each answered turn's gold calls when the turn was answered,
            in gold order (the generator's ground truth, with the arguments the executor ran them with).
        facts: The facts of the last final answer the expert wrote.
    """

    io_bound = False

    def __init__(
        self,
        task: Task,
        tools: list[ToolSchema],
        strategy: str,
        threshold: float = 0.6,
        ack_rate: float = 0.0,
        seed: int = 0,
        name: str | None = None,
        program_order: bool = False,
    ) -> None:
        if strategy not in EXPERT_STRATEGIES:
            raise ValueError(f"unknown expert strategy {strategy!r}; choose from {EXPERT_STRATEGIES}")
        self.name = name or strategy
        self.strategy = strategy
        self.task = task
        self.threshold = threshold
        self.ack_rate = ack_rate
        self.program_order = program_order
        self.view = SessionView([turn.words for turn in task.turns], tools)
        self._settle = [settle_points(turn, threshold) for turn in task.turns]
        # Keys any reading of a turn uses (the gold one included): an answered turn's binding of such a key never
        # stands for an input of this turn.
        self._turn_keys = [{p.key for reading in turn.readings for p in reading.calls} for turn in task.turns]
        self._agent_rng = random.Random(f"{seed}:agent")
        self._bound: dict[str, str] = {}  # key of the current turn -> the session call that stands for it
        self._answered: dict[str, str] = {}  # key of an answered turn -> the call that stood for it then
        self._intents: dict[str, tuple[str, str]] = {}  # call id the expert chose -> (key, tool)
        self._failures: Counter[str] = Counter()  # key -> transient failures seen (counted off results, not plans)
        self._dropped: set[str] = set()  # released writes the expert gave up on: never stand-ins again
        self._ack_wanted = False
        self._acked = False
        self.gold_call_ids: list[str] = []
        self.facts: list[str] = []

    def close(self) -> None:
        """Nothing to release: the task is plain data."""

    # Observation ----------------------------------------------------------------------------------------------

    def observe(self, events: list[Event]) -> int:
        """Takes the session's new events in.

        Args:
            events: Events the session logged since the last call, in order.

        Returns:
            The context tokens read (estimated as the scripted policies do; the agent's own events cost none).
        """
        tokens = 0
        for event in events:
            tokens += self.view.observe(event)
            if event.kind == "tool_call":
                intent = self._intents.get(event.call_id)
                if intent is not None and intent[1] == event.name:  # a wrong tool under its id is someone else's
                    self._bound[intent[0]] = event.call_id
            elif event.kind == "tool_result" and event.error is not None:
                call = self.view.calls.get(event.call_id)
                key = next((key for key, cid in self._bound.items() if cid == event.call_id), None)
                if key is not None and call is not None and error_kind(call.name, event.error) == "transient":
                    self._failures[key] += 1
            elif event.kind == "tool_cancel":
                self._bound = {key: cid for key, cid in self._bound.items() if cid != event.call_id}
            elif event.kind == "user_chunk" and event.final:
                # Drawn at every final chunk whatever the strategy: the same draws under every strategy.
                self._ack_wanted = self._agent_rng.random() < self.ack_rate
            elif event.kind == "say" and event.final:
                gold = self.task.turns[self.view.turn - 1].gold.calls  # the view has counted the answer already
                self.gold_call_ids.extend(self._bound[p.key] for p in gold if p.key in self._bound)
                self._answered.update(self._bound)
                self._bound, self._intents, self._failures, self._dropped = {}, {}, Counter(), set()
                self._ack_wanted = self._acked = False
        return tokens

    def outstanding(self) -> list[str]:
        """Keys of the current turn's gold calls whose result the expert has not seen (none issued, or pending).

        Returns:
            The keys, in gold order (empty once the dialogue is over).
        """
        if self.view.turn >= len(self.task.turns):
            return []
        keys = []
        for planned in self.task.turns[self.view.turn].gold.calls:
            call = self.view.live(self._bound.get(planned.key))
            if call is None or call.result is None:
                keys.append(planned.key)
        return keys

    # Decisions ------------------------------------------------------------------------------------------------

    def act(self, t: float) -> Decision:
        """The next action at time ``t`` (the decision depends on the events seen, not on ``t``).

        Args:
            t: Session time of the decision.

        Returns:
            The decision, with tokens estimated as the scripted policies do.
        """
        if self.view.turn >= len(self.task.turns):
            return self._decision(_WAIT)
        turn = self.task.turns[self.view.turn]
        decide = {
            "speculative": self._speculative,
            "sync": self._sync,
            "sync_parallel": self._sync_parallel,
            "async": self._async,
            "oracle": self._oracle,
        }[self.strategy]
        return self._decision(decide(turn))

    @staticmethod
    def _decision(action: Action) -> Decision:
        if action.kind in ("tool_call", "tool_modify"):
            tokens = estimate_tokens(json.dumps({"name": action.name, "arguments": action.arguments}))
        else:
            tokens = estimate_tokens(action.text or action.call_id or "")
        return Decision(action, tokens)

    def _speculative(self, turn: Turn) -> Action:
        reading = self._reading(turn)
        if reading is not None:
            due = reading.calls
            if self.program_order and not self.view.final:
                due = self._leading_reads(turn, reading)
            # Useful work first, clean-up second: a new or changed call is worth more than an early cancel.
            action = self._reconcile_all(due, resolved=False)
            if action is not None:
                return action
            action = self._clean_up({planned.key for planned in reading.calls})
            if action is not None:
                return action
        if not self.view.final:
            return _WAIT
        return self._finish(turn, blocked_ok=False)

    def _leading_reads(self, turn: Turn, reading: Reading) -> list[PlannedCall]:
        # Before the end of speech, in program order, only the turn's leading read-only calls may run: nothing of the
        # turn runs before them, so they see the state the earlier turns left, which is final.
        held = {planned.key: planned for planned in reading.calls}
        leading = []
        for planned in turn.gold.calls:
            if self.view.side_effect[planned.name] or held.get(planned.key) != planned:
                break
            leading.append(planned)
        return leading

    def _oracle(self, turn: Turn) -> Action:
        settle = self._settle[self.view.turn]
        due = [p for p in turn.gold.calls if self.view.final or self.view.heard >= settle[p.key]]
        action = self._reconcile_all(due, resolved=False)
        if action is not None:
            return action
        return self._finish(turn, blocked_ok=False) if self.view.final else _WAIT

    def _async(self, turn: Turn) -> Action:
        if not self.view.final:
            return _WAIT
        return self._reconcile_all(turn.gold.calls, resolved=False) or self._finish(turn, blocked_ok=False)

    def _sync_parallel(self, turn: Turn) -> Action:
        if not self.view.final:
            return _WAIT
        # Every call whose inputs' results are in goes out now; the others wait for the next round.
        return self._reconcile_all(turn.gold.calls, resolved=True) or self._finish(turn, blocked_ok=True)

    def _sync(self, turn: Turn) -> Action:
        if not self.view.final:
            return _WAIT
        for planned in turn.gold.calls:
            if planned.key not in self._bound and self._blocked(planned):
                continue  # an input failed for good: the answer names it
            action = self._reconcile_all([planned], resolved=True)
            if action is not None:
                return action
            call = self.view.live(self._bound.get(planned.key))
            if call is None:
                return _WAIT  # its inputs are being run again
            if call.side_effect and not call.committed:
                # Whatever a commit would release must be right first.
                return self._clean_up({p.key for p in turn.gold.calls}) or self._commit(turn) or _WAIT
            if call.result is None:
                return _WAIT
        return self._finish(turn, blocked_ok=True)

    # Building blocks ------------------------------------------------------------------------------------------

    def _reading(self, turn: Turn) -> Reading | None:
        if self.view.final:
            return turn.gold
        current = None
        for reading in turn.readings:
            if reading.at_word > self.view.heard:
                break
            current = reading
        if current is None or current.confidence < self.threshold:
            return None
        return current

    def _target(self, planned: PlannedCall, resolved: bool) -> dict[str, Any] | None:
        """The arguments ``planned`` wants now (references by call id, or resolved), or ``None`` until its inputs
        are bound (and, ``resolved``, their results are in)."""
        bound = self._inputs()
        if any(key not in bound for key in referenced_keys(planned.arguments)):
            return None
        arguments = rekey(planned.arguments, bound)
        if not resolved:
            return arguments
        values = self.view.resolve(arguments)
        return None if values is UNRESOLVED else values

    def _inputs(self) -> dict[str, str]:
        """Key -> call for ``$ref`` inputs: the current turn's bindings, then an answered turn's for a key the current
        turn does not use (an imported conversation's call may take an earlier turn's result)."""
        current = self._turn_keys[self.view.turn]
        earlier = {key: call_id for key, call_id in self._answered.items() if key not in current}
        return {**earlier, **self._bound}

    def _adopt(self, wanted: list[PlannedCall]) -> None:
        # A call anyone issued that is exactly a wanted call stands for it: no second copy, no cancel.
        taken = set(self._bound.values())
        for planned in wanted:
            if planned.key in self._bound:
                continue
            target = self._target(planned, resolved=False)
            if target is None:
                continue
            for call in self.view.calls.values():
                if call.call_id in taken or call.call_id in self._dropped:
                    continue
                if call.cancelled or call.turn != self.view.turn:
                    continue
                if self.view.same_call(call, planned.name, target):
                    self._bound[planned.key] = call.call_id
                    taken.add(call.call_id)
                    break

    def _reconcile_all(self, wanted: list[PlannedCall], resolved: bool) -> Action | None:
        self._adopt(wanted)
        for planned in wanted:
            target = self._target(planned, resolved)
            if target is None:
                continue  # its inputs come first
            action = self._reconcile(planned, target, resolved)
            if action is not None:
                return action
        return None

    def _reconcile(self, planned: PlannedCall, target: dict[str, Any], resolved: bool) -> Action | None:
        call = self.view.live(self._bound.get(planned.key))
        if call is not None:
            action = self._repair(planned, call, target)
            if action is not None or planned.key in self._bound:
                return action
            self._adopt([planned])  # someone may have issued the right call already
            call = self.view.live(self._bound.get(planned.key))
            if call is not None:
                action = self._repair(planned, call, target)
                if action is not None or planned.key in self._bound:
                    return action
        elif resolved and self._blocked(planned):
            return None
        return self._issue(planned, target)

    def _repair(self, planned: PlannedCall, call: CallView, target: dict[str, Any]) -> Action | None:
        """Fixes the call bound to ``planned``; unbinds it when only a new call can (a committed write)."""
        stale = call.name != planned.name or not self.view.same_call(call, planned.name, target)
        retry = (
            not stale
            and call.error is not None
            and error_kind(call.name, call.error) == "transient"
            and self._failures[planned.key] <= MAX_RETRIES
        )
        if not stale and not retry:
            return None
        if call.open:
            if call.name != planned.name:
                return Action("tool_cancel", call.call_id)  # a modify keeps the tool
            return Action("tool_modify", call.call_id, arguments=target)  # the same arguments run it again
        del self._bound[planned.key]  # a released write cannot be changed: a new call takes its place
        self._dropped.add(call.call_id)
        return None

    def _issue(self, planned: PlannedCall, target: dict[str, Any]) -> Action:
        call_id = self.view.next_call_id(set(self._intents))
        self._intents[call_id] = (planned.key, planned.name)
        return Action("tool_call", call_id, planned.name, target)

    def _failed_for_good(self, key: str) -> str | None:
        call = self.view.live(self._bound.get(key))
        if call is None or call.error is None:
            return None
        if error_kind(call.name, call.error) == "transient" and self._failures[key] <= MAX_RETRIES:
            return None
        return call.error

    def _blocked(self, planned: PlannedCall) -> bool:
        """Whether an input of ``planned`` failed for good, so that it cannot run (checked through its inputs)."""
        gold = {p.key: p for p in self.task.turns[self.view.turn].gold.calls}
        for key in referenced_keys(planned.arguments):
            if self._failed_for_good(key) is not None or (key in gold and self._blocked(gold[key])):
                return True
        return False

    def _clean_up(self, wanted: set[str]) -> Action | None:
        """Cancels a call nobody wants: one bound to a key the reading dropped, or one nobody stands for that is
        open and of this turn, or an open state-changing call of any turn (a commit would release it)."""
        for key, call_id in self._bound.items():
            call = self.view.live(call_id)
            if key not in wanted and call is not None and call.open:
                return Action("tool_cancel", call_id)
        standing = set(self._bound.values())
        for call in self.view.calls.values():
            if call.call_id not in standing and call.open and (call.turn == self.view.turn or call.side_effect):
                return Action("tool_cancel", call.call_id)
        return None

    def _correct(self, key: str, gold: dict[str, PlannedCall]) -> bool:
        """Whether the call bound to gold ``key`` is its gold call, inputs included."""
        planned = gold[key]
        call = self.view.live(self._bound.get(key))
        target = self._target(planned, resolved=False)
        if call is None or target is None or not self.view.same_call(call, planned.name, target):
            return False
        return all(self._correct(ref, gold) for ref in referenced_keys(planned.arguments) if ref in gold)

    def _commit(self, turn: Turn) -> Action | None:
        """``commit`` when it releases something and everything it would release is right; else ``None``."""
        gold = {p.key: p for p in turn.gold.calls}
        standing = {call_id: key for key, call_id in self._bound.items()}
        pending = [call for call in self.view.calls.values() if call.side_effect and call.open]
        if not pending:
            return None
        for call in pending:
            key = standing.get(call.call_id)
            if key is None or key not in gold or not self._correct(key, gold):
                return None
        return Action("commit")

    def _finish(self, turn: Turn, blocked_ok: bool) -> Action:
        gold = turn.gold.calls
        action = self._clean_up({p.key for p in gold})
        if action is not None:
            return action
        calls = {p.key: self.view.live(self._bound.get(p.key)) for p in gold}
        missing = [p for p in gold if calls[p.key] is None and not (blocked_ok and self._blocked(p))]
        if missing:
            return _WAIT  # issued once their inputs are
        if any(call is not None and call.side_effect and not call.committed for call in calls.values()):
            return self._commit(turn) or _WAIT
        # A released write nobody stands for (someone else's commit let it go) still changes the state: the answer
        # waits for its outcome too rather than speak while the state is moving.
        released = [call for call in self.view.calls.values() if call.side_effect and call.committed]
        in_flight = any(call.result is None and not call.cancelled for call in released)
        if not in_flight and all(call is None or call.result is not None for call in calls.values()):
            return self._answer(turn)
        if self.strategy == "speculative" and self._ack_wanted and not self._acked:
            self._acked = True
            return Action("say", text=self._agent_rng.choice(ACKNOWLEDGEMENTS), final=False)
        return _WAIT

    def _answer(self, turn: Turn) -> Action:
        for planned in turn.gold.calls:
            call = self.view.live(self._bound.get(planned.key))
            if call is not None and call.error is not None:  # the first error in gold order: the root cause
                self.facts = []
                return Action("say", text=f"Sorry, I couldn't complete that: {call.error}.", final=True)
        results = {p.key: self.view.content(self._bound[p.key]) for p in turn.gold.calls}
        answer = turn.answer(results)
        self.facts = answer.facts
        return Action("say", text=answer.text, final=True)
