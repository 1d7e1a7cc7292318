"""The live session protocol: JSON messages over one WebSocket per session, each a timeline event or a control word.

A client speaks in the timeline's own events, checked with the timeline's own schema (``clocktune.timeline.events``),
and the server answers with the events of the session's log, as the session logs them:

=========================  ======  ==================================================================================
message                    from    fields
=========================  ======  ==================================================================================
``open``                   client  ``timeline`` (a held-out timeline's id, with ``serve --data``), or ``tools`` (the
                                   client's own tool schemas, answered by the client), or neither (the server's
                                   ``--domain``); optional ``seed`` (the domain's drawn state)
``user_chunk``             client  ``id``, ``text``, ``final``, optional ``revises`` (an earlier chunk's ``id``)
``tool_result``            client  ``call_id``, ``version``, and ``content`` or ``error``: the answer to a
                                   ``tool_request``
``end``                    client  the user has left: the session ends and is recorded
``ready``                  server  ``session``, ``domain``, ``tools``: the session is open
``user_chunk``,            server  each event of the session's log (the timeline's event fields, ``t`` included), as
``tool_call``, ...                 it is logged: what the agent heard, did, and said
``say_partial``            server  ``text``, ``final``: the words of a ``say`` a model is still decoding, so far
``tool_request``           server  ``call_id``, ``version``, ``name``, ``arguments``: run one of the client's tools
``error``                  server  ``message``: a message was refused; the session goes on unless ``ended`` follows
``ended``                  server  ``reason``, ``recorded`` (the file the session was written to, when recording)
=========================  ======  ==================================================================================

Every server message carries ``t``, the session clock's seconds. A message is parsed with a bound on its size and
nesting (``bounded_json``), so no frame can make the parser recurse or allocate without limit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter, ValidationError

from clocktune.actions import strict_json_loads
from clocktune.timeline.events import Event, ToolSchema

__all__ = [
    "CLIENT_KINDS",
    "MAX_MESSAGE_BYTES",
    "ClientMessage",
    "ProtocolError",
    "event_message",
    "parse_client_message",
]

# The largest message the protocol accepts: a user chunk is a few words, a tool result a few kB; a client's tool
# schemas on open are the largest real message (BFCL's largest catalogue is about 60 kB).
MAX_MESSAGE_BYTES = 1_000_000
# Deeper JSON is refused before it is parsed: real messages nest under 10 deep (a tool result's payload).
MAX_MESSAGE_DEPTH = 64

CLIENT_KINDS = ("open", "user_chunk", "tool_result", "end")

_EVENT = TypeAdapter(Event)
_TOOLS = TypeAdapter(list[ToolSchema])


class ProtocolError(ValueError):
    """A message the server refuses; its text is what the client is told."""


@dataclass(frozen=True)
class ClientMessage:
    """One checked client message.

    Args:
        kind: One of :data:`CLIENT_KINDS`.
        fields: Its fields, checked: for ``user_chunk`` an :class:`Event` (``event``); for ``open``, ``tools`` as
            :class:`ToolSchema` objects.
    """

    kind: str
    fields: dict[str, Any]


def _issues(error: ValidationError, prefix: str) -> str:
    parts = []
    for detail in error.errors(include_url=False)[:5]:
        where = ".".join(str(part) for part in detail["loc"])
        parts.append(f"{prefix}.{where}: {detail['msg']}" if where else f"{prefix}: {detail['msg']}")
    return "; ".join(parts)


def _only(record: dict[str, Any], kind: str, allowed: set[str]) -> None:
    unknown = sorted(set(record) - allowed - {"kind"})
    if unknown:
        raise ProtocolError(f"{kind}: unknown field(s) {unknown}")


def parse_client_message(text: str | bytes) -> ClientMessage:
    """Parses and checks one client message.

    Args:
        text: The WebSocket message.

    Returns:
        The message.

    Raises:
        ProtocolError: For a message that is too large, nests too deep, is not a JSON object, has an unknown kind,
            or whose fields the timeline's schema refuses; the text names the field.
    """
    size = len(text.encode() if isinstance(text, str) else text)
    if size > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"message of {size:,} bytes is over the limit of {MAX_MESSAGE_BYTES:,}")
    try:
        record = strict_json_loads(text, max_depth=MAX_MESSAGE_DEPTH)  # no NaN, unique keys, bounded
    except (ValueError, UnicodeDecodeError) as error:  # JSONDecodeError, duplicate keys, too deep
        raise ProtocolError(f"not a JSON message: {error}") from None
    if not isinstance(record, dict):
        raise ProtocolError(f"a message is a JSON object, not {type(record).__name__}")
    kind = record.get("kind")
    if kind not in CLIENT_KINDS:
        raise ProtocolError(f"kind: {kind!r} is not one of {list(CLIENT_KINDS)}")
    if kind == "user_chunk":
        _only(record, kind, {"id", "text", "final", "revises"})
        fields = {
            "id": record.get("id"),
            "t": 0.0,
            "kind": "user_chunk",
            "source": "user",
            "text": record.get("text"),
            "final": record.get("final"),
            "revises": record.get("revises"),
        }
        try:
            event = _EVENT.validate_python(fields)
        except ValidationError as error:
            raise ProtocolError(_issues(error, "user_chunk")) from None
        if event.text is None or event.final is None:
            raise ProtocolError("user_chunk: needs text and final")
        return ClientMessage(kind, {"event": event})
    if kind == "tool_result":
        _only(record, kind, {"call_id", "version", "content", "error"})
        call_id, version, error = record.get("call_id"), record.get("version", 0), record.get("error")
        if not isinstance(call_id, str):
            raise ProtocolError("tool_result.call_id: a string is required")
        if not isinstance(version, int) or isinstance(version, bool):
            raise ProtocolError("tool_result.version: an integer is required")
        if error is not None and not isinstance(error, str):
            raise ProtocolError("tool_result.error: a string or null is required")
        return ClientMessage(
            kind, {"call_id": call_id, "version": version, "content": record.get("content"), "error": error}
        )
    if kind == "open":
        _only(record, kind, {"timeline", "tools", "seed"})
        fields: dict[str, Any] = {}
        if record.get("timeline") is not None:
            if not isinstance(record["timeline"], str):
                raise ProtocolError("open.timeline: a timeline id (string) is required")
            fields["timeline"] = record["timeline"]
        if record.get("tools") is not None:
            try:
                fields["tools"] = _TOOLS.validate_python(record["tools"])
            except ValidationError as error:
                raise ProtocolError(_issues(error, "open.tools")) from None
            names = [tool.name for tool in fields["tools"]]
            if not names or len(set(names)) != len(names):
                raise ProtocolError("open.tools: at least one tool, each name once")
        seed = record.get("seed", 0)
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ProtocolError("open.seed: an integer is required")
        fields["seed"] = seed
        return ClientMessage(kind, fields)
    _only(record, kind, set())
    return ClientMessage(kind, {})


def event_message(event: Event) -> str:
    """A logged event as the server sends it: the timeline's own event record (tool payloads as JSON values)."""
    record = {key: value for key, value in _EVENT.dump_python(event, mode="json").items() if value is not None}
    for key in ("arguments", "content"):  # the on-disk form holds them as JSON strings; a client wants values
        if isinstance(record.get(key), str):
            record[key] = json.loads(record[key])
    return json.dumps(record)
