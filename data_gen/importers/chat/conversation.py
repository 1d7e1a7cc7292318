"""One conversational row (``messages`` + ``tools``, the format TRL and OpenAI use) checked and split into turns.

A row holds ``messages`` and ``tools`` (and optionally ``id``). ``tools`` is a list of OpenAI function tools
(``{"type": "function", "function": {"name", "description", "parameters"}}``, or the function objects themselves),
or that list as a JSON string. Messages have roles ``system``, ``user``, ``assistant`` and ``tool``:

- ``system`` messages are context (values they hold count as known, see ``placement``);
- a ``user`` message starts a turn (consecutive ones are one utterance); the first non-system message is one;
- ``assistant`` messages may carry ``tool_calls`` (``[{"id", "type": "function", "function": {"name",
  "arguments"}}]``, arguments an object or its JSON text), several at once for parallel calls; the turn's answer
  is its last assistant text, which must come after its last call;
- ``tool`` messages answer a call of the turn by ``tool_call_id``; their ``content`` (text, or OpenAI's list of
  text parts) is the recorded result, parsed as JSON where it is JSON and kept as text otherwise.

:func:`parse_conversation` reports every problem of a row as an :class:`~clocktune.timeline.io.Issue` naming the
field (``messages.3.tool_calls.0.function.arguments``), so one pass over a file lists every bad line.

**Limits.** A message's text (its ``content``, a call's ``arguments`` text, a user utterance of consecutive user
messages joined) holds at most :data:`MAX_MESSAGE_CHARS` characters; a result or arguments text nests at most
:data:`MAX_PAYLOAD_DEPTH` levels. Past either, the field is reported and the row refused.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from clocktune.timeline.bounded_json import MAX_DEPTH, loads_bounded
from clocktune.timeline.events import LatencyModel, ToolSchema
from clocktune.timeline.io import Issue
from clocktune.timeline.validate import argument_errors, schema_error
from data_gen.importers.chat.backend import side_effect

__all__ = [
    "MAX_MESSAGE_CHARS",
    "MAX_PAYLOAD_DEPTH",
    "ROLES",
    "ChatTurn",
    "Conversation",
    "RecordedCall",
    "parse_conversation",
    "parse_tools",
]

ROLES = ("system", "user", "assistant", "tool")

MAX_MESSAGE_CHARS = 100_000
"""The longest text of one message, in characters (about 25,000 tokens, 16,000 words).

Three times the longest training window of the project's configs (8,192 tokens), so a longer message could not be
trained on whole, and a user message that long takes about an hour and a half to speak at 3 words/s, past the
longest timeline (``clocktune.timeline.events.MAX_TIMELINE_S``). It also bounds what one row costs to import.
"""

MAX_PAYLOAD_DEPTH = MAX_DEPTH - 3
"""The deepest nesting of a result or arguments text (97 levels).

The timeline stores a result three levels down (``initial_state.responses.<i>.content``) and arguments as deep
(``ground_truth.final_state.writes.<i>.arguments``), and its JSON is read back nested at most
``clocktune.timeline.bounded_json.MAX_DEPTH`` (100) levels. Checked before parsing, without recursion: a text nested
thousands deep is one reported field, not a ``RecursionError``.
"""


@dataclass
class RecordedCall:
    """One call of the conversation with its recorded result.

    Args:
        call_id: The ``id`` the data gave it.
        name: Tool name.
        arguments: Its arguments (parsed).
        round: Which assistant message of the turn made it (0-based): calls of one round ran in parallel.
        field: Where it is in the row (``messages.3.tool_calls.0``), for errors.
        result: The recorded result, once its tool message is read.
        answered: Whether a tool message answered it.
    """

    call_id: str
    name: str
    arguments: dict[str, Any]
    round: int
    field: str
    result: Any = None
    answered: bool = False


@dataclass
class ChatTurn:
    """One user utterance and what the assistant did about it.

    Args:
        text: The user's words.
        calls: The calls in the order the assistant made them.
        answer: The assistant's last text of the turn.
    """

    text: str
    calls: list[RecordedCall] = field(default_factory=list)
    answer: str = ""


@dataclass
class Conversation:
    """A checked row.

    Args:
        id: The row's ``id``, or ``<name>-<line>``.
        tools: The tool schemas (latency models from the config).
        system: The system messages' text.
        turns: The turns, in order.
    """

    id: str
    tools: list[ToolSchema]
    system: str
    turns: list[ChatTurn]


def _text(content: Any) -> str | None:
    # Message content: a string, OpenAI's list of {"type": "text", "text"} parts, or nothing.
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(part, Mapping) for part in content):
        return " ".join(str(part.get("text", "")) for part in content if part.get("type", "text") == "text")
    return None


def parse_tools(tools: Any, latency: LatencyModel, report: Any) -> list[ToolSchema]:
    """Reads a row's ``tools`` into schemas, reporting each problem.

    Args:
        tools: The row's ``tools`` value.
        latency: The latency model every tool gets (the recording states none).
        report: ``report(field, message)``.

    Returns:
        The schemas of the well-formed tools.
    """
    if isinstance(tools, str):
        try:
            tools = loads_bounded(tools)
        except ValueError as error:
            report("tools", f"not valid JSON ({getattr(error, 'msg', None) or error})")
            return []
    if tools is None:
        tools = []
    if not isinstance(tools, list):
        report("tools", f"must be a list of tools, got {type(tools).__name__}")
        return []
    schemas: dict[str, ToolSchema] = {}
    for index, tool in enumerate(tools):
        where = f"tools.{index}"
        if not isinstance(tool, Mapping):
            report(where, "must be an object")
            continue
        function = tool.get("function", tool) if tool.get("type", "function") == "function" else None
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str) or not function["name"]:
            report(where, "must be a function tool with a name ({'type': 'function', 'function': {'name', ...}})")
            continue
        name = function["name"]
        parameters = function.get("parameters", {"type": "object", "properties": {}})
        if "function" in tool:
            where += ".function"
        problem = schema_error(parameters) if isinstance(parameters, Mapping) else "must be a JSON Schema object"
        if problem:
            report(f"{where}.parameters", problem)
            continue
        try:
            changes, _ = side_effect(tool)
        except ValueError as error:
            report(where, str(error))
            continue
        if name in schemas:
            report(f"{where}.name", f"tool {name!r} is listed twice")
            continue
        schemas[name] = ToolSchema(name, str(function.get("description", "")), dict(parameters), changes, latency)
    return list(schemas.values())


def _arguments(raw: Any, where: str, report: Any) -> dict[str, Any] | None:
    if isinstance(raw, str):
        if len(raw) > MAX_MESSAGE_CHARS:
            report(where, f"{len(raw):,} characters, over the limit of {MAX_MESSAGE_CHARS:,}")
            return None
        try:
            raw = loads_bounded(raw, max_depth=MAX_PAYLOAD_DEPTH) if raw.strip() else {}
        except ValueError as error:
            report(where, f"not valid JSON ({getattr(error, 'msg', None) or error}): {raw[:60]!r}")
            return None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        report(where, f"must be a JSON object, got {type(raw).__name__}")
        return None
    return raw


def _result(text: str | None, content: Any) -> Any:
    # Raises ValueError (not json.JSONDecodeError) for a text nested too deep to parse.
    if text is None:
        return content  # structured content kept as it is
    try:
        return loads_bounded(text, max_depth=MAX_PAYLOAD_DEPTH)
    except json.JSONDecodeError:
        return text  # not JSON: the result is the text


def parse_conversation(
    record: Mapping[str, Any], default_id: str, latency: LatencyModel, path: str, line: int
) -> tuple[Conversation | None, list[Issue]]:
    """Checks one row and splits it into turns.

    Args:
        record: The row.
        default_id: Its id when the row has none.
        latency: The latency model of its tools.
        path: Its file, for issues.
        line: Its line or row number, for issues.

    Returns:
        The conversation (``None`` when anything is wrong) and every issue found.
    """
    issues: list[Issue] = []

    def report(where: str, message: str) -> None:
        issues.append(Issue(path, line, where, message))

    tools = {tool.name: tool for tool in parse_tools(record.get("tools"), latency, report)}
    row_id = record.get("id", default_id)
    if not isinstance(row_id, (str, int)) or isinstance(row_id, bool):
        report("id", "must be a string or an integer")
        row_id = default_id
    messages = record.get("messages")
    if not isinstance(messages, list) or not messages:
        report("messages", "must be a non-empty list of messages")
        return None, issues
    system: list[str] = []
    turns: list[ChatTurn] = []
    calls: dict[str, RecordedCall] = {}  # open calls of the turn by id
    rejected: set[str] = set()  # ids of malformed calls
    rounds = 0
    spoken: list[str] = []  # the turn's user messages
    spoken_chars = 0
    last_call_at: int | None = None  # message index of the turn's last call
    answer_at: int | None = None
    for index, message in enumerate(messages):
        where = f"messages.{index}"
        if not isinstance(message, Mapping):
            report(where, "must be an object")
            continue
        role = message.get("role")
        if role not in ROLES:
            report(f"{where}.role", f"unknown role {role!r}; expected one of {', '.join(ROLES)}")
            continue
        text = _text(message.get("content"))
        if text is None and role != "tool":
            report(f"{where}.content", "must be text or a list of text parts")
            continue
        too_long = text is not None and len(text) > MAX_MESSAGE_CHARS
        if too_long:
            report(f"{where}.content", f"{len(text):,} characters, over the limit of {MAX_MESSAGE_CHARS:,}")
            text = text[:MAX_MESSAGE_CHARS]  # read on, to report the row's other problems (it is refused)
        if role == "system":
            system.append(text)
        elif role == "user":
            if not text.split():
                report(f"{where}.content", "a user message needs words")
            elif turns and not turns[-1].calls and not turns[-1].answer:
                # Consecutive user messages are one utterance, joined once the turn ends (in linear time).
                if spoken_chars <= MAX_MESSAGE_CHARS < spoken_chars + 1 + len(text):
                    report(
                        f"{where}.content",
                        f"the user's utterance (consecutive user messages are one) grows past the limit of "
                        f"{MAX_MESSAGE_CHARS:,} characters",
                    )
                spoken.append(text)
                spoken_chars += 1 + len(text)
            else:
                _close_turn(turns, spoken, calls, last_call_at, answer_at, report)
                turns.append(ChatTurn(text))
                spoken, spoken_chars = [text], len(text)
                calls, rounds, last_call_at, answer_at = {}, 0, None, None
        elif not turns:
            report(where, f"a {role} message before the first user message")
        elif role == "assistant":
            tool_calls = message.get("tool_calls") or []
            if not isinstance(tool_calls, list):
                report(f"{where}.tool_calls", "must be a list")
                continue
            for number, item in enumerate(tool_calls):
                call = _call(item, f"{where}.tool_calls.{number}", rounds, tools, calls, report)
                if call is not None:
                    calls[call.call_id] = call
                    turns[-1].calls.append(call)
                elif isinstance(item, Mapping) and isinstance(item.get("id"), str):
                    rejected.add(item["id"])  # reported once, not again at its tool message
            if tool_calls:
                rounds += 1
                last_call_at = index
            if text.strip():
                turns[-1].answer, answer_at = text.strip(), index
        else:  # tool
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str) or not call_id:
                report(f"{where}.tool_call_id", "missing: a tool message must name the call it answers")
                continue
            call = calls.get(call_id)
            if call is None and call_id in rejected:
                continue
            if call is None:
                report(f"{where}.tool_call_id", f"{call_id!r} answers no call of this turn")
            elif call.answered:
                report(f"{where}.tool_call_id", f"{call_id!r} is answered twice")
            else:
                try:
                    call.result = None if too_long else _result(text, message.get("content"))
                except ValueError as error:  # nested too deep to parse
                    report(f"{where}.content", str(error))
                call.answered = True
    if not turns:
        report("messages", "no user message")
    else:
        _close_turn(turns, spoken, calls, last_call_at, answer_at, report)
    if issues:
        return None, issues
    return Conversation(str(row_id), list(tools.values()), " ".join(system), turns), issues


def _call(
    item: Any, where: str, round_: int, tools: Mapping[str, ToolSchema], calls: Mapping[str, RecordedCall], report: Any
) -> RecordedCall | None:
    if not isinstance(item, Mapping):
        report(where, "must be an object")
        return None
    function = item.get("function")
    if item.get("type", "function") != "function" or not isinstance(function, Mapping):
        report(where, "must be {'id', 'type': 'function', 'function': {'name', 'arguments'}}")
        return None
    call_id = item.get("id")
    if not isinstance(call_id, str) or not call_id:
        report(f"{where}.id", "missing: a call needs an id for its tool message to answer")
        return None
    if call_id in calls:
        report(f"{where}.id", f"{call_id!r} is used twice in this turn")
        return None
    name = function.get("name")
    if name not in tools:
        report(f"{where}.function.name", f"unknown tool {name!r}; the row's tools are {sorted(tools)}")
        return None
    arguments = _arguments(function.get("arguments"), f"{where}.function.arguments", report)
    if arguments is None:
        return None
    bad = argument_errors(tools[name].parameters, arguments, allow_refs=False)
    for field_name, message in bad:
        report(f"{where}.function.arguments{'.' + field_name if field_name else ''}", message)
    return None if bad else RecordedCall(call_id, name, arguments, round_, where)


def _close_turn(
    turns: list[ChatTurn],
    spoken: list[str],
    calls: Mapping[str, RecordedCall],
    last_call_at: int | None,
    answer_at: int | None,
    report,
) -> None:
    if not turns:
        return
    turns[-1].text = " ".join(spoken)
    for call in calls.values():
        if not call.answered:
            report(call.field, f"call {call.call_id!r} has no tool message")
    if answer_at is None or (last_call_at is not None and answer_at < last_call_at):
        report("messages", f"turn {len(turns) - 1} ({turns[-1].text[:40]!r}) ends without an assistant reply")
