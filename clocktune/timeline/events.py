"""The timeline: one streaming dialogue as a header plus time-ordered events (docs/design.md §1).

The in-memory form is plain dataclasses so the generator can build thousands of timelines per second.
Parsing, validation of types and the JSON Schema go through pydantic ``TypeAdapter`` over these same
classes (see ``clocktune.timeline.io``), so there is one definition of the format.

On disk, tool arguments, tool results, schemas and backend states are JSON strings: their shapes differ
per tool, and strings keep the Arrow schema of a ``datasets`` load stable.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, PlainSerializer, StrictBool, StrictFloat, StrictInt

from clocktune.timeline.bounded_json import loads_bounded

EventKind = Literal[
    "user_chunk", "tool_call", "tool_modify", "tool_cancel", "tool_result", "say", "wait", "commit", "notice"
]
Source = Literal["user", "agent", "tool", "system"]

# Which source emits each kind of event; the validator enforces it.
KIND_SOURCE: dict[str, str] = {
    "user_chunk": "user",
    "tool_call": "agent",
    "tool_modify": "agent",
    "tool_cancel": "agent",
    "tool_result": "tool",
    "say": "agent",
    "wait": "agent",
    "commit": "agent",
    "notice": "system",
}
AGENT_KINDS = frozenset(kind for kind, source in KIND_SOURCE.items() if source == "agent")
# The longest a timeline (and a session played from it) may run, in seconds of its own clock: an hour of
# conversation is far beyond any dialogue here, and a bound keeps a hostile time (a silence of 1e9 s) from making a
# session on the virtual clock run for ever.
MAX_TIMELINE_S = 3600.0
# The teacher of an on-policy example (``clocktune rollout``): a student's session cut at an expert's label.
ON_POLICY_TEACHER = "on_policy"


def _parse_json_string(value: Any) -> Any:
    # Accepts the on-disk JSON string as well as an already-parsed value. Bounded: a payload nested thousands
    # deep must be a ValueError (which pydantic turns into an issue naming the field), not a RecursionError.
    return loads_bounded(value) if isinstance(value, str) else value


def _dump_json_string(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False, separators=(",", ":"))


# A JSON value that is stored as a JSON string on disk and held parsed in memory.
JsonString = Annotated[
    Any,
    BeforeValidator(_parse_json_string),
    PlainSerializer(_dump_json_string, return_type=str | None, when_used="json"),
]
JsonObject = Annotated[
    dict[str, Any],
    BeforeValidator(_parse_json_string),
    PlainSerializer(_dump_json_string, return_type=str, when_used="json"),
]

# Numbers and flags are strict (pydantic's ``StrictFloat``, ``StrictBool``, ``StrictInt``): ``t: true``, ``t: "1.2"``
# or ``final: "yes"`` is an error naming the field, not a value coerced into something the file did not say. An
# integer is a number (``t: 2``).
# No unknown fields; no NaN or infinite floats: a NaN time compares false with everything, so it would slip through
# the ordering rules and corrupt every score computed from it.
_STRICT = ConfigDict(extra="forbid", allow_inf_nan=False)


def copy_json(value: Any) -> Any:
    """A copy of a JSON value (a timeline's initial state, a backend's state) that shares nothing mutable with it.

    Dicts and lists are copied, leaves are shared (strings, numbers, booleans and ``None`` are immutable): a fifth
    of the time ``copy.deepcopy`` takes, which the generator pays once per dialogue.

    Args:
        value: A value made of dicts, lists and JSON leaves.

    Returns:
        The copy.
    """
    if type(value) is dict:
        return {key: copy_json(item) for key, item in value.items()}
    if type(value) is list:
        return [copy_json(item) for item in value]
    return value


@dataclass(slots=True)
class LatencyModel:
    """Latency and failure model of one tool: lognormal body with a heavy tail (docs/design.md §2).

    Args:
        median_s: Median latency in seconds.
        sigma: Log-space standard deviation of the lognormal body.
        tail_prob: Probability that a call lands in the tail.
        tail_scale: Multiplier applied to tail latencies (drawn uniformly in ``[1, tail_scale]`` times a body draw).
        failure_rate: Probability that a call returns an error instead of a result.
    """

    __pydantic_config__ = _STRICT

    median_s: StrictFloat = 0.6
    sigma: StrictFloat = 0.45
    tail_prob: StrictFloat = 0.05
    tail_scale: StrictFloat = 4.0
    failure_rate: StrictFloat = 0.0


@dataclass(slots=True)
class ToolSchema:
    """A tool the agent may call.

    Args:
        name: Function name, unique within the timeline.
        description: One sentence for the model.
        parameters: JSON Schema of the arguments object.
        side_effect: True for state-changing tools, which execute only after ``commit``.
        latency: How long a call takes and how often it fails.
    """

    __pydantic_config__ = _STRICT

    name: str
    description: str
    parameters: JsonObject
    side_effect: StrictBool
    latency: LatencyModel = field(default_factory=LatencyModel)


@dataclass(slots=True)
class GroundTruthCall:
    """A call that must have executed, with its final, fully resolved arguments."""

    __pydantic_config__ = _STRICT

    name: str
    arguments: JsonObject


@dataclass(slots=True)
class GroundTruth:
    """What a correct agent achieves in this dialogue.

    Args:
        calls: Calls that must execute, in the order the teacher executed them.
        final_state: Backend state after the dialogue (equal to the initial state when no tool changes it).
        facts: Strings the final answer of the last turn must contain.
    """

    __pydantic_config__ = _STRICT

    calls: list[GroundTruthCall] = field(default_factory=list)
    final_state: JsonObject = field(default_factory=dict)
    facts: list[str] = field(default_factory=list)


@dataclass(slots=True)
class ArgumentPlacement:
    """How one argument value of an imported call was settled (``data_gen.determinable.Reason``).

    Args:
        path: The value's dotted path in the call's arguments (``$`` for the arguments themselves).
        kind: ``literal``, ``date``, ``time``, ``enum``, ``count``, ``name`` or ``nights`` (heard in the turn),
            ``context`` (said before it), ``result`` (an earlier result's), ``unheard``.
        at_word: Words of the turn heard when it was settled; ``None`` unless heard in the turn.
        words: The words that settled it, as written.
        value_kind: What the value is: ``date``, ``time``, ``enum``, ``count``, ``number`` or ``text``.
    """

    __pydantic_config__ = _STRICT

    path: str
    kind: str
    at_word: StrictInt | None = None
    words: str | None = None
    value_kind: str = "text"


@dataclass(slots=True)
class CallPlacement:
    """Where an imported call was placed in the user's words, and why: the earliest determinable point.

    Args:
        key: The call's key in the task (``t<turn>c<n>``).
        name: The tool.
        turn: The user's turn (0-based).
        at_word: Words of the turn heard when every argument was settled; ``None`` when the words never settle it
            (the call waits for the end of speech).
        words: Words of the turn.
        arguments: How each argument value was settled.
    """

    __pydantic_config__ = _STRICT

    key: str
    name: str
    turn: StrictInt
    at_word: StrictInt | None
    words: StrictInt
    arguments: list[ArgumentPlacement] = field(default_factory=list)


@dataclass(slots=True)
class Event:
    """One event on the timeline.

    Every event has ``id``, ``t``, ``kind`` and ``source``; the other fields belong to some kinds only and are
    ``None`` elsewhere (one flat record keeps the on-disk schema identical for all kinds):

    - ``text``: words of a ``user_chunk``, ``say`` or ``notice``.
    - ``final``: on ``user_chunk``, the last chunk of an utterance; on ``say``, the answer that ends the turn.
    - ``revises``: on ``user_chunk``, the id of an earlier partial this chunk replaces.
    - ``call_id``: on ``tool_call``, ``tool_modify``, ``tool_cancel`` and ``tool_result``.
    - ``name`` and ``arguments``: on ``tool_call`` (and ``arguments`` on ``tool_modify``). An argument value
      ``{"$ref": "c1"}`` or ``{"$ref": "c1.items.0.id"}`` is the result of call ``c1`` (or a path into it).
    - ``content`` or ``error``: on ``tool_result``.
    """

    __pydantic_config__ = _STRICT

    id: str
    t: StrictFloat
    kind: EventKind
    source: Source
    text: str | None = None
    final: StrictBool | None = None
    revises: str | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: JsonString = None
    content: JsonString = None
    error: str | None = None


@dataclass(slots=True)
class Timeline:
    """One dialogue: header and events ordered by time.

    Args:
        id: Unique id of the dialogue.
        domain: Domain whose tools and backend the dialogue uses.
        task: Task grammar that produced it (``"dependent"``, ``"compare"``, ...), for analysis.
        seed: Seed that reproduces this dialogue alone.
        teacher: Policy that wrote the agent side (``"speculative"`` or ``"sync"``; :data:`ON_POLICY_TEACHER` for
            an on-policy example, which may end at its label while the user is still speaking).
        tools: Tool schemas available to the agent.
        initial_state: Backend state before the dialogue.
        ground_truth: What a correct agent achieves.
        events: Events ordered by ``t``.
        context_only: Ids of agent events that carry no training loss, only context. Empty in generated data; in an
            on-policy example (``clocktune rollout``) every action but the expert's label is context: the student's
            own actions are the state it reached, not targets.
        placements: For an imported conversation, where each call was placed in the user's words and which words
            settled each argument (``clocktune-datagen show`` lists them). Empty in generated data.
    """

    __pydantic_config__ = _STRICT

    id: str
    domain: str
    task: str
    seed: StrictInt
    teacher: str
    tools: list[ToolSchema]
    initial_state: JsonObject
    ground_truth: GroundTruth
    events: list[Event]
    context_only: list[str] = field(default_factory=list)
    placements: list[CallPlacement] = field(default_factory=list)

    def tool(self, name: str) -> ToolSchema | None:
        """Returns the schema of tool ``name``, or ``None`` when the timeline has no such tool."""
        for tool in self.tools:
            if tool.name == name:
                return tool
        return None
