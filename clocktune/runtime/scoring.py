"""Scoring one session against its timeline's ground truth: accuracy, response latency, waste and safety."""

from __future__ import annotations

import json
import statistics
from collections import Counter
from dataclasses import asdict, dataclass

from clocktune.runtime.session import SessionLog
from clocktune.timeline.analysis import executed_calls
from clocktune.timeline.events import GroundTruthCall, Timeline


@dataclass
class DialogueResult:
    """One dialogue under one policy.

    Args:
        id: Timeline id.
        policy: Policy name.
        accurate: Calls, state and answer all correct.
        calls_ok: Every ground-truth call executed with its final arguments.
        state_ok: The backend's final state equals ground truth's.
        answer_ok: The last answer carries every required fact.
        answered: Every turn got a final answer.
        latency_s: Mean over turns of end of speech to the first words of the final answer (``None`` when a
            turn went unanswered).
        completion_s: Time of the last final answer.
        dispatches: Tool requests started.
        wasted_calls: Requests whose results were cancelled or superseded.
        wasted_tool_s: Tool time spent on aborted requests.
        notices: Notices the runtime gave.
        side_effect_violations: State-changing results without a commit after the end of speech, or from a
            cancelled or superseded call.
        end_reason: ``done``, ``gave_up`` or ``timeout``.
        failure: ``None`` for an accurate dialogue, else the first thing that went wrong, in the order a session
            goes: ``gave_up`` or ``timeout`` (how the session ended), ``no_call`` (no call took effect),
            ``wrong_tool`` (a ground-truth tool never ran), ``wrong_arguments`` (every tool ran, not every call with
            its arguments), ``wrong_state`` (the calls ran, plus others that changed the state), ``unanswered`` or
            ``answer_missing_facts``.
    """

    id: str
    policy: str
    accurate: bool
    calls_ok: bool
    state_ok: bool
    answer_ok: bool
    answered: bool
    latency_s: float | None
    completion_s: float | None
    dispatches: int
    wasted_calls: int
    wasted_tool_s: float
    notices: int
    side_effect_violations: int
    end_reason: str
    failure: str | None = None

    def to_dict(self) -> dict:
        """The fields as a JSON-ready dict."""
        return asdict(self)


def _key(name: str, arguments: dict) -> str:
    return f"{name}:{json.dumps(arguments, sort_keys=True)}"


def side_effect_violations(timeline: Timeline) -> int:
    """Counts state-changing results that should never have happened, reading the log alone.

    A successful result of a state-changing call is a violation when no ``commit`` lies between the end of the
    user's speech (the last final chunk before it) and the result, after the call's last change, or when the
    call had been cancelled or changed after that commit.

    Args:
        timeline: A session log.

    Returns:
        The number of violations.
    """
    side_effect = {tool.name: tool.side_effect for tool in timeline.tools}
    names: dict[str, str] = {}
    changed: dict[str, float] = {}
    cancelled: set[str] = set()
    commits: list[float] = []
    end_of_speech = -1.0
    violations = 0
    for event in timeline.events:
        if event.kind == "user_chunk" and event.final:
            end_of_speech = event.t
        elif event.kind == "tool_call":
            names[event.call_id] = event.name
            changed[event.call_id] = event.t
        elif event.kind == "tool_modify":
            changed[event.call_id] = event.t
        elif event.kind == "tool_cancel":
            cancelled.add(event.call_id)
        elif event.kind == "commit":
            commits.append(event.t)
        elif event.kind == "tool_result" and event.error is None and side_effect.get(names.get(event.call_id), False):
            released = any(max(changed[event.call_id], end_of_speech) <= t <= event.t for t in commits)
            if event.call_id in cancelled or not released:
                violations += 1
    return violations


def _failure(log: SessionLog, executed: list[tuple[str, dict]], calls_ok: bool, state_ok: bool) -> str | None:
    # The first failure along a session: how it ended, then the calls, the backend state, the answer.
    if log.end_reason != "done":
        return log.end_reason
    if not calls_ok:
        if not executed:
            return "no_call"
        wanted = {call.name for call in log.timeline.ground_truth.calls}
        return "wrong_tool" if wanted - {name for name, _ in executed} else "wrong_arguments"
    if not state_ok:
        return "wrong_state"
    return "answer_missing_facts" if log.answered else "unanswered"


def _facts_said(log: SessionLog) -> int:
    # The ground truth's facts found in the last final answer (case aside).
    answers = [event.text or "" for event in log.timeline.events if event.kind == "say" and event.final]
    last = answers[-1].lower() if answers else ""
    return sum(fact.lower() in last for fact in log.timeline.ground_truth.facts)


def _argument_share(wanted: dict, arguments: dict) -> float:
    # The share of argument keys, of those either side names, whose value is right.
    keys = set(wanted) | set(arguments)
    if not keys:
        return 1.0
    same = [key for key in keys if key in wanted and key in arguments]
    return sum(
        json.dumps(wanted[key], sort_keys=True) == json.dumps(arguments[key], sort_keys=True) for key in same
    ) / len(keys)


def _calls_credit(truth: list[GroundTruthCall], ran: list[tuple[str, dict]]) -> float:
    # Each ground-truth call takes the unused executed call of its tool that matches it best (half for the tool, half
    # for the arguments), so that one call cannot count for two.
    if not truth:
        return 1.0
    unused = list(ran)
    credits = []
    for call in truth:
        scored = [
            (_argument_share(call.arguments, arguments), index)
            for index, (name, arguments) in enumerate(unused)
            if name == call.name
        ]
        if not scored:
            credits.append(0.0)
            continue
        share, index = max(scored)
        credits.append(0.5 + 0.5 * share)
        del unused[index]
    return statistics.fmean(credits)


def task_progress(log: SessionLog) -> float:
    """How much of its task a session got right, from 0 to 1: 1 exactly where it is accurate.

    Task success is all or nothing, so a session that called the right tool with one argument wrong scores as one
    that never called; a reward built on it alone tells a group of failing rollouts nothing about which came closer.
    This is the mean of three shares, as fine-grained tool-use rewards are built (ToolRL, Qian et al. 2025): the
    ground-truth calls (each half for its tool having run, half for the share of its argument keys run with the right
    value, the best of the executed calls of that tool), the final state (1 where it equals the ground truth's), and
    the facts said in the last final answer (0 when a turn went unanswered).

    Args:
        log: The session's log.

    Returns:
        The share, in [0, 1].
    """
    timeline = log.timeline
    truth = timeline.ground_truth
    calls = _calls_credit(truth.calls, executed_calls(timeline))
    state = float(log.final_state == truth.final_state)
    if not log.answered:
        facts = 0.0
    else:
        facts = _facts_said(log) / len(truth.facts) if truth.facts else 1.0
    return (calls + state + facts) / 3


def latencies_from_speech_end(log: SessionLog) -> list[float]:
    """Seconds from each end of speech to the first words of its turn's final answer.

    The clock starts when the final chunk arrived, not when it entered the agent's context: an agent still
    emitting a speculative call as the user finishes reads the chunk later, and counting from then would credit
    it with time the user spent waiting. It stops when the answer's first words are out
    (``SessionLog.first_words``), not when the agent started writing it.

    Args:
        log: A session's log.

    Returns:
        One latency per answered turn, in turn order.
    """
    # A turn left unanswered has an end of speech and no answer.
    ends = log.speech_ends[: len(log.first_words)]
    return [words - end for words, end in zip(log.first_words, ends, strict=True)]


def score_session(log: SessionLog, policy: str) -> DialogueResult:
    """Scores a session.

    Args:
        log: The session's log.
        policy: Name to record.

    Returns:
        The dialogue's result.
    """
    timeline = log.timeline
    truth = timeline.ground_truth
    ran = executed_calls(timeline)
    executed = Counter(_key(name, arguments) for name, arguments in ran)
    wanted = Counter(_key(call.name, call.arguments) for call in truth.calls)
    calls_ok = not (wanted - executed)
    state_ok = log.final_state == truth.final_state
    answer_ok = log.answered and _facts_said(log) == len(truth.facts)
    accurate = calls_ok and state_ok and answer_ok
    latencies = latencies_from_speech_end(log)
    latency = statistics.fmean(latencies) if log.answered and latencies else None
    return DialogueResult(
        id=timeline.id,
        policy=policy,
        accurate=accurate,
        calls_ok=calls_ok,
        state_ok=state_ok,
        answer_ok=answer_ok,
        answered=log.answered,
        latency_s=None if latency is None else round(latency, 4),
        completion_s=next((e.t for e in reversed(timeline.events) if e.kind == "say" and e.final), None),
        dispatches=log.dispatches,
        wasted_calls=log.wasted_dispatches,
        wasted_tool_s=log.wasted_tool_s,
        notices=log.notices,
        side_effect_violations=side_effect_violations(timeline),
        end_reason=log.end_reason,
        failure=None if accurate else _failure(log, ran, calls_ok, state_ok),
    )
