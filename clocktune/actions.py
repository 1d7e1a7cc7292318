"""Parsing the agent's generated message back into an action: the strict inverse of the renderer's agent bodies.

The input is what the model generates after ``Renderer.prompt_for_action`` (header, clock, state line): the
action's content followed by the format's end-of-message token, e.g. ``<|cancel|>c3<|im_end|>``. Anything else
(bad JSON, an unknown marker, a missing id, text after the action or after the end token) raises
``ActionParseError``, whose message the runtime can inject as a ``notice`` before regenerating.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from clocktune.encoding.formats import (
    ANSWER,
    CANCEL,
    COMMIT,
    FORMATS,
    MARKERS,
    MODIFY,
    SAY,
    WAIT,
    ModelFormat,
    get_format,
)
from clocktune.timeline.bounded_json import MAX_DEPTH, loads_bounded
from clocktune.timeline.events import Event

# Call ids as the generator and the runtime write them ("c1"); no whitespace, no markup.
CALL_ID = re.compile(r"[A-Za-z0-9_.:-]+")
# Special tokens that may never appear inside an action's free text or JSON.
_CONTROL = re.compile(
    "|".join(
        re.escape(token)
        for token in sorted(
            {token for fmt in FORMATS.values() for token in (*fmt.markers, *fmt.native_tokens, fmt.end)},
            key=len,
            reverse=True,
        )
    )
)

# What a special token looks like, to name an unknown one in the error.
_MARKER_LIKE = re.compile(r"<\|[\w.-]*\|>")


def _excerpt(value: Any, limit: int = 80) -> str:
    # Error messages may be injected into the model's context as notices: keep them short.
    shown = repr(value)
    return shown if len(shown) <= limit else f"{shown[:limit]}... ({len(shown)} characters)"


class ActionParseError(ValueError):
    """The generated text is not a well-formed action of the format."""


@dataclass(frozen=True)
class Action:
    """One agent action as parsed from the model's output.

    Args:
        kind: ``tool_call``, ``tool_modify``, ``tool_cancel``, ``say``, ``wait`` or ``commit``.
        call_id: Call addressed by ``tool_call``, ``tool_modify`` and ``tool_cancel``.
        name: Tool name of a ``tool_call``.
        arguments: Arguments of a ``tool_call`` or ``tool_modify``.
        text: Words of a ``say``.
        final: For ``say``, whether it is the answer that ends the turn.
    """

    kind: str
    call_id: str | None = None
    name: str | None = None
    arguments: dict[str, Any] | None = None
    text: str | None = None
    final: bool | None = None

    def to_event(self, event_id: str, t: float) -> Event:
        """Returns the action as a timeline event.

        Args:
            event_id: Id of the new event.
            t: Time of the action.

        Returns:
            An agent event with the action's fields.
        """
        return Event(
            id=event_id,
            t=t,
            kind=self.kind,
            source="agent",
            text=self.text,
            final=self.final,
            call_id=self.call_id,
            name=self.name,
            arguments=self.arguments,
        )


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


def strict_json_loads(text: str | bytes, max_depth: int = MAX_DEPTH) -> Any:
    """Parses JSON strictly, as model output must be: no ``NaN``/``Infinity``, no duplicate keys, bounded nesting.

    Args:
        text: JSON text.
        max_depth: Deepest nesting allowed.

    Returns:
        The value.

    Raises:
        ValueError: For invalid or non-strict JSON (``json.JSONDecodeError`` is a ``ValueError``), and for text
            nested deeper or longer than ``clocktune.timeline.bounded_json`` allows (a degenerate generation of
            ``[[[[...`` must be a parse error the runtime can report, not a ``RecursionError``).
    """
    return loads_bounded(text, max_depth=max_depth, parse_constant=_reject_constant)  # keys are unique there too


def _json_object(text: str, keys: tuple[str, ...], what: str) -> dict[str, Any]:
    # Strict JSON (no NaN, no duplicate keys) holding exactly ``keys``.
    try:
        value = strict_json_loads(text)
    except ValueError as error:
        raise ActionParseError(f"{what}: bad JSON ({error}) in {_excerpt(text)}") from None
    if not isinstance(value, dict) or set(value) != set(keys):
        raise ActionParseError(f"{what}: expected a JSON object with keys {list(keys)}, got {_excerpt(text)}")
    return value


def _call_id(value: Any, what: str) -> str:
    if not isinstance(value, str) or CALL_ID.fullmatch(value) is None:
        raise ActionParseError(f"{what}: missing or malformed call id {_excerpt(value)}")
    return value


def _arguments(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ActionParseError(f"{what}: arguments must be a JSON object, got {_excerpt(value)}")
    return value


def _parse_call(body: str, fmt: ModelFormat) -> Action:
    inner = body[len(fmt.call_prefix) :]
    if fmt.call_suffix:
        if not inner.endswith(fmt.call_suffix):
            raise ActionParseError(f"tool call: missing {fmt.call_suffix!r} at the end of {_excerpt(body)}")
        inner = inner[: -len(fmt.call_suffix)]
    call = _json_object(inner, ("name", fmt.args_key, "id"), "tool call")
    if not isinstance(call["name"], str) or not call["name"]:
        raise ActionParseError(f"tool call: missing tool name in {_excerpt(inner)}")
    return Action(
        "tool_call",
        call_id=_call_id(call["id"], "tool call"),
        name=call["name"],
        arguments=_arguments(call[fmt.args_key], "tool call"),
    )


def _parse_marker(marker: str, rest: str, fmt: ModelFormat) -> Action:
    if marker in (WAIT, COMMIT):
        if rest:
            raise ActionParseError(f"unexpected text after {marker}: {_excerpt(rest)}")
        return Action("wait" if marker == WAIT else "commit")
    if marker == CANCEL:
        return Action("tool_cancel", call_id=_call_id(rest, "cancel"))
    if marker == MODIFY:
        modify = _json_object(rest, ("id", fmt.args_key), "modify")
        return Action(
            "tool_modify",
            call_id=_call_id(modify["id"], "modify"),
            arguments=_arguments(modify[fmt.args_key], "modify"),
        )
    # SAY or ANSWER
    if not rest:
        raise ActionParseError(f"{marker} without words")
    return Action("say", text=rest, final=marker == ANSWER)


def speech_so_far(text: str, model_format: str | ModelFormat) -> tuple[str, bool] | None:
    """The words of a ``say`` the model is still writing, for streaming them before the action is complete.

    Args:
        text: The action's text decoded so far (special tokens kept).
        model_format: The model's format.

    Returns:
        ``(words, final)`` when the text so far is a ``say`` (``final`` for an answer), else ``None`` (another
        action, or too little text to tell).
    """
    fmt = get_format(model_format)
    for marker in (SAY, ANSWER):
        if text.startswith(marker):
            words = text[len(marker) :]
            if words.endswith(fmt.end):
                words = words[: -len(fmt.end)]
            return words, marker == ANSWER
    return None


def parse_action(text: str, model_format: str | ModelFormat) -> Action:
    """Parses the model's generated message into an action.

    Args:
        text: The generated text after the header, clock and state line, up to and including the end token
            (decode with ``skip_special_tokens=False``).
        model_format: ``"qwen2.5"``, ``"llama3.2"`` or ``"chatml"``, or a format.

    Returns:
        The action.

    Raises:
        ActionParseError: When the text is not exactly one well-formed action followed by the end token.
    """
    fmt = get_format(model_format)
    if not text.endswith(fmt.end):
        raise ActionParseError(f"missing end token {fmt.end} at the end of {_excerpt(text)}")
    body = text[: -len(fmt.end)]
    control = _CONTROL.search(body, 1)
    if control is not None:
        raise ActionParseError(f"unexpected {control.group()} inside the action {_excerpt(body)}")
    for marker in MARKERS:
        if body.startswith(marker):
            return _parse_marker(marker, body[len(marker) :], fmt)
    # Llama's call has no prefix: anything that is not a marker must be its JSON.
    if body.startswith(fmt.call_prefix) and (fmt.call_prefix or body.startswith("{")):
        return _parse_call(body, fmt)
    start = _CONTROL.match(body)
    if start is not None:
        raise ActionParseError(f"{start.group()} is not an action of format {fmt.name!r}")
    marker = _MARKER_LIKE.match(body)
    if marker is not None:
        raise ActionParseError(f"unknown marker {marker.group()!r}; the format's markers are {list(fmt.markers)}")
    raise ActionParseError(f"expected an action marker or a tool call, got {_excerpt(body)}")
