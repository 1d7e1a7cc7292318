"""Semantic validation of timelines: the rules of docs/design.md §1 that types alone cannot express.

Every problem becomes an :class:`~clocktune.timeline.io.Issue` naming file, line and field; a file is checked
to the end so that all bad lines are reported at once.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from functools import lru_cache

import jsonschema

from clocktune.timeline.events import (
    AGENT_KINDS,
    KIND_SOURCE,
    MAX_TIMELINE_S,
    ON_POLICY_TEACHER,
    Event,
    LatencyModel,
    Timeline,
)
from clocktune.timeline.io import Issue, iter_timeline_file
from clocktune.timeline.refs import iter_refs, ref_target

# Fields each kind of event must carry (besides id, t, kind, source).
REQUIRED_FIELDS: dict[str, tuple[str, ...]] = {
    "user_chunk": ("text", "final"),
    "tool_call": ("call_id", "name", "arguments"),
    "tool_modify": ("call_id", "arguments"),
    "tool_cancel": ("call_id",),
    "tool_result": ("call_id",),
    "say": ("text", "final"),
    "wait": (),
    "commit": (),
    "notice": ("text",),
}

# Where each latency-model number makes sense (clocktune.clock.sample_latency and sample_failure): probabilities lie
# in [0, 1] and a tail call is slowed down, never sped up. The upper ends are those of a generator config
# (clocktune.clock.ToolLatencyConfig): a median of ten minutes is no real-time tool, and a log-space spread past 3
# overflows exp() within a few thousand draws.
LATENCY_RANGES: dict[str, tuple[float, float]] = {
    "median_s": (0.0, 600.0),
    "sigma": (0.0, 3.0),
    "tail_prob": (0.0, 1.0),
    "tail_scale": (1.0, 100.0),
    "failure_rate": (0.0, 1.0),
}


def _without_refs(arguments: object) -> object:
    # A reference stands for a value only known at run time: drop it before checking against the schema.
    if isinstance(arguments, dict):
        return {key: _without_refs(value) for key, value in arguments.items() if ref_target(value) is None}
    if isinstance(arguments, list):
        return [_without_refs(value) for value in arguments if ref_target(value) is None]
    return arguments


@lru_cache(maxsize=4096)
def _validator(schema_json: str) -> jsonschema.protocols.Validator | str:
    # The validator of a parameter schema, or why the schema is not one: checking arguments against a broken
    # schema raises from inside jsonschema, which would end validation of the whole file with a traceback.
    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.exceptions.SchemaError as error:
        where = ".".join(str(part) for part in error.absolute_path)
        return f"not a valid JSON Schema ({error.message}{' at ' + where if where else ''})"
    return cls(schema)


def schema_error(parameters: dict) -> str | None:
    """Checks a tool's parameter schema against its JSON Schema meta-schema.

    Args:
        parameters: JSON Schema of the tool's arguments.

    Returns:
        What is wrong with it, or ``None`` when it is a valid schema.
    """
    validator = _validator(json.dumps(parameters, sort_keys=True))
    return validator if isinstance(validator, str) else None


def argument_errors(parameters: dict, arguments: dict, allow_refs: bool) -> list[tuple[str, str]]:
    """Checks call arguments against a tool's parameter schema.

    Args:
        parameters: JSON Schema of the tool's arguments.
        arguments: Arguments of one call.
        allow_refs: Whether ``$ref`` values stand in for required arguments (true for calls, false for
            ground truth, whose arguments are resolved).

    Returns:
        ``(field, message)`` pairs, ``field`` relative to the arguments object; empty when valid, and when the
        schema itself is invalid (:func:`schema_error` reports that once per tool).
    """
    validator = _validator(json.dumps(parameters, sort_keys=True))
    if isinstance(validator, str):
        return []
    checked = arguments
    if allow_refs:
        checked = _without_refs(arguments)
    errors = []
    for error in validator.iter_errors(checked):
        if allow_refs and error.validator == "required":
            missing = error.message.split("'")[1] if "'" in error.message else ""
            if missing in arguments and ref_target(arguments[missing]) is not None:
                continue
        field = ".".join(str(part) for part in error.absolute_path)
        errors.append((field, error.message))
    return errors


def validate_timeline(timeline: Timeline, path: str = "<timeline>", line: int = 0) -> list[Issue]:
    """Checks one timeline against the rules of the format.

    Rules: tool names are unique, parameter schemas are valid JSON Schemas and latency-model numbers are finite and
    within :data:`LATENCY_RANGES`; times are finite, non-negative and non-decreasing; event ids are unique; each
    kind comes from its source and carries its fields; every utterance ends with exactly one final chunk and
    revisions point back into it; calls name known tools with arguments matching their schemas and references to
    earlier calls; modifies and cancels address open calls (issued, not cancelled, and for state-changing tools
    not yet executed); results answer issued, uncancelled calls after them, and state-changing calls only after a
    ``commit``; ``commit`` only comes when the user has finished speaking; a final answer (``say`` with
    ``final``) only comes after a final user chunk of its turn (since the previous final answer); ground truth
    names known tools with valid, resolved arguments.

    Args:
        timeline: The timeline to check.
        path: File name for the issues.
        line: Line number for the issues.

    Returns:
        All issues found; empty when the timeline is valid.
    """
    issues: list[Issue] = []

    def report(field: str, message: str) -> None:
        issues.append(Issue(path, line, field, message))

    tools = {tool.name: tool for tool in timeline.tools}
    if len(tools) != len(timeline.tools):
        report("tools", "tool names are not unique")
    for index, tool in enumerate(timeline.tools):
        problem = schema_error(tool.parameters) if isinstance(tool.parameters, dict) else "must be a JSON object"
        if problem is not None:
            report(f"tools.{index}.parameters", problem)
        _check_latency(tool.latency, f"tools.{index}.latency", report)

    seen_ids: set[str] = set()
    previous_t = 0.0
    # Call bookkeeping: name per call id, and the calls still open.
    call_names: dict[str, str] = {}
    call_times: dict[str, float] = {}
    open_calls: set[str] = set()
    cancelled: set[str] = set()
    executed: set[str] = set()  # state-changing calls released by a commit
    awaiting_result: set[str] = set()
    dependents: dict[str, list[str]] = {}
    utterance_chunks: set[str] = set()
    in_utterance = False
    heard_turn = False  # a final user chunk came since the last final answer
    context_only = set(timeline.context_only)
    for index, event in enumerate(timeline.events):
        where = f"events.{index}"
        if event.id in seen_ids:
            report(f"{where}.id", f"duplicate event id {event.id!r}")
        seen_ids.add(event.id)
        if not math.isfinite(event.t):
            # NaN compares false with everything and inf is after everything: either would pass the order check.
            report(f"{where}.t", f"must be finite, got {event.t!r}")
        else:
            if event.t < previous_t:
                report(f"{where}.t", f"time goes backwards: {event.t} after {previous_t}")
            elif event.t < 0:
                report(f"{where}.t", f"negative time {event.t}")
            elif event.t > MAX_TIMELINE_S:
                # A session played from the timeline would run its virtual clock that far (a 1e9 s silence).
                report(f"{where}.t", f"{event.t} s is past the longest timeline, {MAX_TIMELINE_S:.0f} s")
            previous_t = max(previous_t, event.t)
        if KIND_SOURCE[event.kind] != event.source:
            report(f"{where}.source", f"{event.kind} comes from {KIND_SOURCE[event.kind]}, not {event.source}")
        missing = [name for name in REQUIRED_FIELDS[event.kind] if getattr(event, name) is None]
        for name in missing:
            report(f"{where}.{name}", f"{event.kind} needs {name}")
        if missing:
            continue
        _check_event(
            event, where, report, tools, call_names, call_times, open_calls, cancelled, executed, context_only
        )
        if event.kind == "user_chunk":
            if event.revises is not None and event.revises not in utterance_chunks:
                report(f"{where}.revises", f"revises {event.revises!r}, not an earlier chunk of this utterance")
            in_utterance = not event.final
            heard_turn = heard_turn or bool(event.final)
            if event.final:
                utterance_chunks = set()
            else:
                utterance_chunks.add(event.id)  # in place: a new set per chunk is quadratic in an utterance's length
        elif event.kind == "say":
            if event.final:
                # An answer to a question not yet asked: the turn's request is only complete at its final chunk.
                if not heard_turn:
                    report(f"{where}.final", "final answer before any final user chunk of its turn")
                heard_turn = False
        elif event.kind == "commit":
            if in_utterance:
                report(f"{where}.kind", "commit while the user is still speaking")
        elif event.kind == "tool_call":
            awaiting_result.add(event.call_id)
            for target in set(iter_refs(event.arguments)):
                dependents.setdefault(target, []).append(event.call_id)
        elif event.kind == "tool_modify":
            # A modified call runs again, and so does every call that consumes its result.
            # An executed state-changing call is not run again.
            stack = [event.call_id]
            while stack:
                call_id = stack.pop()
                if call_id not in awaiting_result and call_id not in executed:
                    awaiting_result.add(call_id)
                    stack.extend(dependents.get(call_id, []))
        elif event.kind == "tool_result":
            if event.call_id in call_names and event.call_id not in awaiting_result:
                report(f"{where}.call_id", f"second result for {event.call_id!r} without a modify in between")
            awaiting_result.discard(event.call_id)
            if (event.content is None) == (event.error is None):
                report(f"{where}.content", "a result carries exactly one of content and error")
        elif event.kind == "tool_cancel":
            awaiting_result.discard(event.call_id)
    # An on-policy example ends at the expert's label, which may come while the user is still speaking.
    if in_utterance and timeline.teacher != ON_POLICY_TEACHER:
        report(f"events.{len(timeline.events) - 1}", "the last utterance has no final chunk")
    agent_ids = {event.id for event in timeline.events if event.kind in AGENT_KINDS}
    for index, event_id in enumerate(timeline.context_only):
        if event_id not in agent_ids:
            report(f"context_only.{index}", f"{event_id!r} is not the id of an agent event of this timeline")

    for index, call in enumerate(timeline.ground_truth.calls):
        where = f"ground_truth.calls.{index}"
        if call.name not in tools:
            report(f"{where}.name", f"unknown tool {call.name!r}")
            continue
        for field, message in argument_errors(tools[call.name].parameters, call.arguments, allow_refs=False):
            report(f"{where}.arguments{'.' + field if field else ''}", message)
    return issues


def _check_latency(latency: LatencyModel, where: str, report: Callable[[str, str], None]) -> None:
    for name, (low, high) in LATENCY_RANGES.items():
        value = getattr(latency, name)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            report(f"{where}.{name}", f"must be a number, got {value!r}")
        elif not math.isfinite(value):
            report(f"{where}.{name}", f"must be finite, got {value!r}")
        elif not low <= value <= high:
            bound = f"at least {low}" if high == math.inf else f"in [{low}, {high}]"
            report(f"{where}.{name}", f"must be {bound}, got {value}")


def _check_event(
    event: Event, where, report, tools, call_names, call_times, open_calls, cancelled, executed, context_only: set[str]
) -> None:
    kind = event.kind
    if kind == "tool_call":
        if event.call_id in call_names:
            report(f"{where}.call_id", f"call id {event.call_id!r} already used")
            return
        if event.name not in tools:
            report(f"{where}.name", f"unknown tool {event.name!r}")
            return
        call_names[event.call_id] = event.name
        call_times[event.call_id] = event.t
        open_calls.add(event.call_id)
        _check_arguments(event, where, report, tools[event.name].parameters, call_names, context_only)
    elif kind in ("tool_modify", "tool_cancel"):
        if event.call_id not in open_calls:
            state = "cancelled" if event.call_id in cancelled else "executed" if event.call_id in executed else None
            reason = f"is {state}" if state else "was never issued"
            report(f"{where}.call_id", f"{kind} of {event.call_id!r}, which {reason}")
            return
        if kind == "tool_cancel":
            open_calls.discard(event.call_id)
            cancelled.add(event.call_id)
        else:
            if event.name is not None and event.name != call_names[event.call_id]:
                report(f"{where}.name", f"a modify cannot change the tool ({call_names[event.call_id]!r})")
            parameters = tools[call_names[event.call_id]].parameters
            _check_arguments(event, where, report, parameters, call_names, context_only)
    elif kind == "tool_result":
        if event.call_id not in call_names:
            report(f"{where}.call_id", f"result for unknown call id {event.call_id!r}")
        elif event.call_id in cancelled:
            report(f"{where}.call_id", f"result for cancelled call {event.call_id!r}")
        elif tools[call_names[event.call_id]].side_effect and event.call_id not in executed:
            report(f"{where}.call_id", f"result for state-changing call {event.call_id!r} before its commit")
    elif kind == "commit":
        # A commit executes every open state-changing call; executed calls can no longer change.
        for call_id in list(open_calls):
            if tools[call_names[call_id]].side_effect:
                open_calls.discard(call_id)
                executed.add(call_id)


def _check_arguments(event: Event, where, report, parameters, call_names, context_only: set[str]) -> None:
    if not isinstance(event.arguments, dict):
        report(f"{where}.arguments", "arguments must be a JSON object")
        return
    for target in iter_refs(event.arguments):
        if target not in call_names or target == event.call_id:
            report(f"{where}.arguments", f"$ref to {target!r}, which is not an earlier call")
    if event.id in context_only:
        return  # a student's call as the runtime took it (a value off the schema gets the tool's error): not a target
    for field, message in argument_errors(parameters, event.arguments, allow_refs=True):
        report(f"{where}.arguments{'.' + field if field else ''}", message)


def validate_file(
    path: str | os.PathLike, extra_check: Callable[[Timeline, str, int], list[Issue]] | None = None
) -> tuple[int, list[Issue]]:
    """Validates every line (or Parquet row) of a timeline file, parsing and semantics both.

    Args:
        path: A ``.jsonl`` or ``.parquet`` timeline file.
        extra_check: Further rules to apply to each parsed timeline, e.g. replaying ground truth on a backend.

    Returns:
        ``(number of timelines read, issues)``; issues are sorted by line. A file without any timeline (empty,
        or blank lines only) has one issue at line 0.
    """
    count, issues = 0, []
    for line_no, item in iter_timeline_file(path):
        count += 1
        if isinstance(item, list):
            issues.extend(item)
        else:
            issues.extend(validate_timeline(item, str(path), line_no))
            if extra_check is not None:
                issues.extend(extra_check(item, str(path), line_no))
    if count == 0:
        # An empty file is most likely a failed or truncated write: passing it would hide the failure.
        issues.append(Issue(str(path), 0, "-", f"no timelines in {path}"))
    return count, issues
