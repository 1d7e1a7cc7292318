"""Derived facts about a timeline: call lifecycles and the features that the generator's stats count.

``speculative`` is derived here, never declared: a call is speculative when it was issued while the user was
still speaking, after a non-final chunk and before the utterance's final chunk.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from clocktune.timeline.events import Timeline
from clocktune.timeline.refs import iter_refs, resolve_refs


@dataclass
class CallRecord:
    """The life of one call, read off the events.

    Args:
        call_id: Call id.
        name: Tool name.
        side_effect: Whether the tool changes state.
        issued_t: When the call was issued.
        speculative: Issued while the user was still speaking.
        modifications: Times of its ``tool_modify`` events.
        cancelled_t: When it was cancelled, if it was.
        committed_t: For a state-changing call, the ``commit`` that released it.
        results: ``(t, content, error)`` of each result the agent received.
        arguments: Arguments as last issued or modified (references unresolved).
        refs: Call ids its arguments reference.
    """

    call_id: str
    name: str
    side_effect: bool
    issued_t: float
    speculative: bool
    modifications: list[float] = field(default_factory=list)
    cancelled_t: float | None = None
    committed_t: float | None = None
    results: list[tuple[float, object, str | None]] = field(default_factory=list)
    arguments: dict = field(default_factory=dict)
    refs: list[str] = field(default_factory=list)

    @property
    def corrected(self) -> bool:
        """Whether the call was modified or cancelled after it was issued."""
        return bool(self.modifications) or self.cancelled_t is not None

    @property
    def last_change_t(self) -> float:
        """When the call's current version was issued."""
        return self.modifications[-1] if self.modifications else self.issued_t

    @property
    def end_t(self) -> float | None:
        """When the call stopped being in flight: its last result or its cancel."""
        if self.cancelled_t is not None:
            return self.cancelled_t
        return self.results[-1][0] if self.results else None


def call_records(timeline: Timeline) -> dict[str, CallRecord]:
    """Reads the life of every call off a (valid) timeline.

    Args:
        timeline: The timeline.

    Returns:
        Records by call id, in issue order.
    """
    side_effect = {tool.name: tool.side_effect for tool in timeline.tools}
    records: dict[str, CallRecord] = {}
    speaking = False
    for event in timeline.events:
        kind = event.kind
        if kind == "user_chunk":
            speaking = not event.final
        elif kind == "tool_call":
            records[event.call_id] = CallRecord(
                event.call_id,
                event.name,
                side_effect.get(event.name, False),
                event.t,
                speaking,
                arguments=event.arguments,
                refs=list(dict.fromkeys(iter_refs(event.arguments))),
            )
        elif kind == "tool_modify" and event.call_id in records:
            records[event.call_id].modifications.append(event.t)
            records[event.call_id].arguments = event.arguments
        elif kind == "tool_cancel" and event.call_id in records:
            records[event.call_id].cancelled_t = event.t
        elif kind == "tool_result" and event.call_id in records:
            records[event.call_id].results.append((event.t, event.content, event.error))
        elif kind == "commit":
            for record in records.values():
                if record.side_effect and record.committed_t is None and record.cancelled_t is None:
                    record.committed_t = event.t
    return records


def has_parallel_calls(records: dict[str, CallRecord]) -> bool:
    """Whether two calls were ever in flight at the same time."""
    spans = sorted((record.issued_t, record.end_t) for record in records.values() if record.end_t is not None)
    latest_end = float("-inf")
    for start, end in spans:
        if start < latest_end:
            return True
        latest_end = max(latest_end, end)
    return False


@dataclass
class TimelineFeatures:
    """What kind of behaviour a timeline shows (the fractions in ``stats.json``)."""

    speculative_call: bool
    corrected_call: bool
    parallel_calls: bool
    dependent_calls: bool
    no_tool: bool


def timeline_features(timeline: Timeline) -> TimelineFeatures:
    """Classifies a timeline's calls.

    Args:
        timeline: The timeline.

    Returns:
        Its features.
    """
    records = call_records(timeline)
    return TimelineFeatures(
        speculative_call=any(record.speculative for record in records.values()),
        corrected_call=any(record.corrected for record in records.values()),
        parallel_calls=has_parallel_calls(records),
        dependent_calls=any(record.refs for record in records.values()),
        no_tool=not records,
    )


def speech_rates(timeline: Timeline) -> list[float]:
    """Speaking rate (words/s) of each utterance with at least two recogniser updates.

    The words of the first update are spoken before its time stamp, so they are left out of the count.
    """
    rates, first_t, first_words, words = [], None, 0, 0
    for event in timeline.events:
        if event.kind != "user_chunk" or event.revises is not None:
            continue
        count = len(event.text.split())
        if first_t is None:
            first_t, first_words, words = event.t, count, count
        else:
            words += count
        if event.final:
            if event.t > first_t:
                rates.append((words - first_words) / (event.t - first_t))
            first_t = None
    return rates


def observed_tool_latencies(timeline: Timeline) -> list[float]:
    """Seconds from issuing (or last modifying) a read-only call without inputs to its result, as the agent saw
    them: the tool's latency plus the time to emit the call and to reach the next action boundary."""
    latencies = []
    for record in call_records(timeline).values():
        if record.side_effect or record.refs or not record.results:
            continue
        latencies.append(record.results[-1][0] - record.last_change_t)
    return latencies


def response_latencies(timeline: Timeline) -> list[float]:
    """For each turn, seconds from the user's final chunk to the agent's final answer.

    A timeline's ``t`` is when an event entered the agent's context, so this counts from when the agent read the
    end of speech to when it started its answer. A session's latency
    (``clocktune.runtime.scoring.latencies_from_speech_end``) counts from when the user finished, which is earlier
    when the agent was busy emitting an action at that moment, to when the answer's first words were out.

    Args:
        timeline: A valid timeline.

    Returns:
        One latency per answered turn, in turn order.
    """
    latencies, end_of_speech = [], None
    for event in timeline.events:
        if event.kind == "user_chunk" and event.final:
            end_of_speech = event.t
        elif event.kind == "say" and event.final and end_of_speech is not None:
            latencies.append(event.t - end_of_speech)
            end_of_speech = None
    return latencies


def executed_calls(timeline: Timeline) -> list[tuple[str, dict]]:
    """The calls that took effect, in order of their final result, with arguments resolved from the results they
    referenced: every uncancelled call whose current version returned content (state-changing calls only after
    their commit).

    Args:
        timeline: A valid timeline.

    Returns:
        ``(tool name, resolved arguments)`` pairs.
    """
    records = call_records(timeline)
    done = []
    for record in records.values():
        if record.cancelled_t is not None or not record.results:
            continue
        t, content, error = record.results[-1]
        if error is None and t >= record.last_change_t:
            done.append((t, record))
    done.sort(key=lambda item: item[0])
    return [
        (record.name, resolve_refs(record.arguments, lambda target: records[target].results[-1][1]))
        for _, record in done
    ]
