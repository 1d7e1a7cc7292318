"""An expert that now and then takes a wrong action, and then recovers: states off the teacher's path, in the data.

A model trained only on an expert that never errs has never seen the state after its own first mistake (a call it
missed, a call with the wrong arguments or to the wrong tool), so live its mistakes compound. Injecting noise into
the expert's actions while it generates (DART, Laskey et al. 2017) puts such states in the training data at the
generator's cost, without rollouts of a student: :class:`PerturbedExpert` wraps an expert, replaces some of its
chosen actions with wrong ones, and lets the expert, which decides from what the session shows it, put things right.
The wrong actions are context, never targets: their event ids are listed in ``Timeline.context_only``, so the
renderer gives them no loss, and the expert's recovery is what the model learns.

The same wrapper is the fuzzer of ``tests/test_expert.py``, which checks that the expert finishes every task still
completable from such states; there it also draws the kinds a generator must not use (an early answer, a premature
commit), after which a task may no longer be completable.
"""

from __future__ import annotations

import random
from functools import cached_property
from typing import Any

from clocktune.actions import Action
from clocktune.runtime.policy import Decision
from clocktune.timeline.events import AGENT_KINDS, Event, Timeline
from data_gen.expert.policy import ExpertPolicy

__all__ = ["PERTURBATIONS", "RECOVERABLE_PERTURBATIONS", "PerturbedExpert"]

PERTURBATIONS = ("wrong_tool", "wrong_arguments", "missed_call", "spurious_call", "early_answer", "premature_commit")
# After these the expert can always finish the task (tests/test_expert.py): nothing it has not committed runs.
RECOVERABLE_PERTURBATIONS = ("wrong_tool", "wrong_arguments", "missed_call", "spurious_call")


def _state_strings(value: Any, found: set[str]) -> set[str]:
    if isinstance(value, str):
        found.add(value)
    elif isinstance(value, dict):
        for item in value.values():
            _state_strings(item, found)
    elif isinstance(value, list):
        for item in value:
            _state_strings(item, found)
    return found


class PerturbedExpert:
    """A policy wrapping an expert that replaces up to ``budget`` of its chosen actions with wrong ones of ``kinds``
    (at each decision, with probability ``rate``, one kind drawn at random, if it applies to the action chosen).

    The expert observes every event, its own and the wrong ones alike, and decides the next action from them.

    Args:
        expert: The expert whose actions are perturbed.
        timeline: The session's timeline header (its tools, and its initial state for plausible wrong values).
        kinds: Perturbation kinds to draw from (:data:`PERTURBATIONS`): ``wrong_tool`` (another tool in place of a
            call or modify), ``wrong_arguments`` (one argument changed), ``missed_call`` (a wait in place of a call),
            ``spurious_call`` (a call to some tool in place of a wait), ``early_answer`` (a final answer while a
            result is outstanding), ``premature_commit`` (a commit before the calls are right).
        rng: Where the draws come from (seeded per dialogue, so that generation is reproducible).
        budget: Perturbations at most per session.
        rate: Probability of drawing a perturbation at a decision.

    Attributes:
        applied: The kinds of the perturbations the session was handed (accepted or refused), in order.
        own_event_ids: Ids of the logged agent events that were wrong actions (refused ones are not logged).
        expert_notices: Notices that followed one of the expert's own decisions (an expert acting invalidly or
            waiting for nothing would raise them).
    """

    io_bound = False

    def __init__(
        self,
        expert: ExpertPolicy,
        timeline: Timeline,
        kinds: tuple[str, ...],
        rng: random.Random,
        budget: int = 2,
        rate: float = 0.5,
    ) -> None:
        unknown = sorted(set(kinds) - set(PERTURBATIONS))
        if unknown or not kinds:
            raise ValueError(f"perturbation kinds {list(kinds)}: choose one or more of {PERTURBATIONS}")
        self.expert = expert
        self.name = expert.name  # the timeline's teacher: the expert's strategy
        self.kinds = tuple(kinds)
        self.rng = rng
        self.budget = budget
        self.rate = rate
        self.tools = {tool.name: tool for tool in timeline.tools}
        self._initial_state = timeline.initial_state
        self.applied: list[str] = []
        self.own_event_ids: list[str] = []
        self.expert_notices = 0
        self._last_was_expert = False
        self._awaiting_log = False  # a wrong action was handed over and is not logged (or refused) yet
        self._ids = 0

    @cached_property
    def strings(self) -> list[str]:
        """The strings of the initial state (ids that exist: plausible wrong values), found when first needed."""
        return sorted(_state_strings(self._initial_state, set()))

    def close(self) -> None:
        """Closes the expert."""
        self.expert.close()

    def observe(self, events: list[Event]) -> int:
        """Passes the session's new events to the expert, noting which agent events were wrong actions.

        Args:
            events: Events the session logged since the last call, in order.

        Returns:
            The context tokens the expert read.
        """
        for event in events:
            if event.kind == "notice" and self._last_was_expert:
                self.expert_notices += 1
            if self._awaiting_log and event.kind in AGENT_KINDS:
                self.own_event_ids.append(event.id)
            if event.kind in AGENT_KINDS or event.kind == "notice":
                self._awaiting_log = False  # logged, or refused (a notice)
        return self.expert.observe(events)

    def act(self, t: float) -> Decision:
        """The expert's next action, or in its place a wrong one.

        Args:
            t: Session time of the decision.

        Returns:
            The decision, with the expert's token estimate.
        """
        decision = self.expert.act(t)
        replacement, kind = None, self.rng.choice(self.kinds)
        if len(self.applied) < self.budget and self.rng.random() < self.rate:
            replacement = self._perturb(kind, decision.action)
        self._last_was_expert = replacement is None
        if replacement is None:
            return decision
        self.applied.append(kind)
        self._awaiting_log = True
        return Decision(replacement, decision.tokens)

    def _new_id(self) -> str:
        self._ids += 1
        return f"z{self._ids}"

    def _value(self, schema: dict, current: Any = None) -> Any:
        # A schema-plausible value other than ``current``: another enum member, a nearby number, a string the state
        # holds (an id that exists: the most dangerous kind of wrong argument).
        options = [v for v in schema.get("enum", []) if v != current]
        if not options and schema.get("type") in ("integer", "number"):
            base = current if isinstance(current, int | float) and not isinstance(current, bool) else 1
            options = [base + step for step in (1, 2, 10, 25) if base + step >= 0]
        if not options and schema.get("type") == "boolean":
            options = [not current]
        if not options:
            options = [s for s in self.strings if s != current] or ["nothing"]
        return self.rng.choice(options)

    def _wrong_tool(self, action: Action) -> Action:
        names = sorted(name for name in self.tools if name != action.name)
        name = self.rng.choice(names)
        properties = self.tools[name].parameters.get("properties", {})
        required = self.tools[name].parameters.get("required", [])
        given = action.arguments or {}
        arguments = {key: given[key] if key in given else self._value(properties[key]) for key in required}
        call_id = action.call_id if action.kind == "tool_call" else self._new_id()
        return Action("tool_call", call_id, name, arguments)

    def _wrong_arguments(self, action: Action) -> Action | None:
        arguments = dict(action.arguments or {})
        literal = [key for key, value in arguments.items() if not (isinstance(value, dict) and "$ref" in value)]
        if literal:
            key = self.rng.choice(literal)
            name = action.name or self.expert.view.calls[action.call_id].name
            schema = self.tools[name].parameters.get("properties", {}).get(key, {})
            arguments[key] = self._value(schema, arguments[key])
        elif arguments:  # only references: point one at another item of the result
            key = self.rng.choice(sorted(arguments))
            path = arguments[key]["$ref"]
            arguments[key] = {"$ref": path.replace(".0.", ".1.") if ".0." in path else f"{path}.0"}
        else:
            return None
        return Action(action.kind, action.call_id, action.name, arguments)

    def _perturb(self, kind: str, action: Action) -> Action | None:
        view = self.expert.view
        if kind == "wrong_tool" and len(self.tools) > 1 and action.kind in ("tool_call", "tool_modify"):
            return self._wrong_tool(action)
        if kind == "spurious_call" and action.kind == "wait":
            return self._wrong_tool(action)
        if kind == "wrong_arguments" and action.kind in ("tool_call", "tool_modify"):
            return self._wrong_arguments(action)
        if kind == "missed_call" and action.kind == "tool_call":
            return Action("wait")
        # An answer or a commit before the final chunk is refused by the session (tested in test_runtime): the
        # perturbation aims at the states after it, where they take effect.
        if kind == "early_answer" and view.final and not action.final and self.expert.outstanding():
            return Action("say", text="All done, anything else?", final=True)
        if kind == "premature_commit" and view.final and action.kind != "commit":
            return Action("commit")
        return None
