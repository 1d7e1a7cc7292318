"""What a session has shown an agent so far, rebuilt from the events it observed: the words heard, the calls issued
by anyone, their current results, and what the last ``commit`` released.

The view is clock-free and reads nothing but events (and the task's words, to tell a garbled partial from a
heard word), so an expert that decides from it decides from the same evidence a student has, plus ground truth.
It mirrors the runtime's call graph (``clocktune.runtime.executor``) only where a policy can see it: a ``modify``
makes the results of the call and of every dependent that will run again stale, a ``commit`` releases every open
state-changing call, a cancelled call never reports again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from clocktune.clock import estimate_tokens
from clocktune.runtime.executor import error_kind
from clocktune.timeline.events import Event, ToolSchema
from clocktune.timeline.refs import iter_refs, resolve_refs

__all__ = ["UNRESOLVED", "CallView", "SessionView"]


class _Unresolved:
    """Marks arguments whose references cannot be resolved from the results seen so far."""

    def __repr__(self) -> str:
        return "UNRESOLVED"


UNRESOLVED: Any = _Unresolved()


class _NoResult(LookupError):
    """A referenced call has no usable result (none yet, an error, cancelled, or unknown)."""


@dataclass
class CallView:
    """One call of the session as the agent saw it (issued by anyone).

    Args:
        call_id: The call's id.
        name: Tool name.
        side_effect: Whether the tool changes state.
        arguments: Current arguments, references unresolved.
        turn: The turn it was issued in.
        cancelled: Whether a ``tool_cancel`` dropped it.
        committed: Whether a ``commit`` released it (state-changing calls only).
        result: ``(content, error)`` of its current version, once seen.
        executed: A state-changing call the backend ran (known once its result is in); it never runs again.
    """

    call_id: str
    name: str
    side_effect: bool
    arguments: dict[str, Any]
    turn: int
    cancelled: bool = False
    committed: bool = False
    result: tuple[Any, str | None] | None = None
    executed: bool = False

    @property
    def open(self) -> bool:
        """Whether it may still be modified or cancelled (the runtime's ``ToolExecutor.open_call``)."""
        return not self.cancelled and not (self.side_effect and self.committed)

    @property
    def error(self) -> str | None:
        """The error of its current result, if any."""
        return None if self.result is None else self.result[1]

    @property
    def refs(self) -> list[str]:
        """Ids of the calls its arguments reference."""
        return list(dict.fromkeys(iter_refs(self.arguments)))


class SessionView:
    """Everything an agent has been shown, updated event by event.

    Args:
        turn_words: The words of each utterance (privileged: used only to tell garbled partials from heard words,
            as the generator's planner counts them).
        tools: The session's tool schemas.
    """

    def __init__(self, turn_words: list[list[str]], tools: list[ToolSchema]) -> None:
        self.turn_words = turn_words
        self.side_effect = {tool.name: tool.side_effect for tool in tools}
        self.calls: dict[str, CallView] = {}
        self.turn = 0
        self.heard = 0  # words of the current utterance heard in chunks that were not garbled
        self.final = False  # the current utterance's final chunk has arrived
        self.notices: list[str] = []
        self._chunks: dict[str, tuple[int, int]] = {}  # chunk event id -> word span, for revisions
        self._spoken = 0  # end of the span of the last chunk, garbled or not

    def observe(self, event: Event) -> int:
        """Takes one event in; returns the context tokens it costs to read (the agent's own events cost none).

        Args:
            event: The next event of the session log.

        Returns:
            Estimated tokens, as the scripted policies count them.
        """
        kind = event.kind
        if kind == "user_chunk":
            self._chunk(event)
            return estimate_tokens(event.text or "")
        if kind == "tool_result":
            self._result(event)
            return estimate_tokens(event.error or json.dumps(event.content))
        if kind == "notice":
            self.notices.append(event.text or "")
            return estimate_tokens(event.text or "")
        if kind == "tool_call":
            name = event.name or ""
            self.calls[event.call_id] = CallView(
                event.call_id, name, self.side_effect.get(name, False), dict(event.arguments or {}), self.turn
            )
        elif kind == "tool_modify":
            call = self.calls[event.call_id]
            call.arguments, call.result = dict(event.arguments or {}), None
            self._invalidate_dependents(call.call_id)
        elif kind == "tool_cancel":
            self.calls[event.call_id].cancelled = True
        elif kind == "commit":
            for call in self.calls.values():
                if call.side_effect and not call.cancelled:
                    call.committed = True
        elif kind == "say" and event.final:
            self.turn += 1
            self.heard, self.final, self._spoken = 0, False, 0
            self._chunks.clear()
        return 0

    def _chunk(self, event: Event) -> None:
        words = (event.text or "").split()
        revised = self._chunks.get(event.revises or "")
        start = revised[0] if revised is not None else self._spoken
        end = start + len(words)
        self._chunks[event.id] = (start, end)
        self._spoken = end
        utterance = self.turn_words[self.turn] if self.turn < len(self.turn_words) else []
        if words == utterance[start:end]:  # a garbled partial does not count as heard; its revision will
            self.heard = max(self.heard, end)
        if event.final:
            self.final = True

    def _result(self, event: Event) -> None:
        call = self.calls.get(event.call_id)
        if call is None or call.cancelled:
            return
        call.result = (event.content, event.error)
        if call.side_effect and (event.error is None or error_kind(call.name, event.error) == "refused"):
            call.executed = True

    def _invalidate_dependents(self, call_id: str) -> None:
        # The executor runs every dependent again that has run or is running, except a state-changing call that
        # executed: whatever it showed is stale. One that waited for its inputs had shown nothing.
        for other in self.calls.values():
            if call_id in other.refs and not other.cancelled and not other.executed:
                other.result = None
                self._invalidate_dependents(other.call_id)

    # Queries --------------------------------------------------------------------------------------------------

    def live(self, call_id: str | None) -> CallView | None:
        """A call that exists and is not cancelled.

        Args:
            call_id: The id, or ``None``.

        Returns:
            The call, or ``None`` when there is no such live call.
        """
        call = self.calls.get(call_id) if call_id is not None else None
        return None if call is None or call.cancelled else call

    def content(self, call_id: str) -> Any:
        """The content of a call's current successful result.

        Args:
            call_id: The call.

        Returns:
            The content.

        Raises:
            LookupError: When the call is unknown or cancelled, or its result is missing or an error.
        """
        call = self.live(call_id)
        if call is None or call.result is None or call.result[1] is not None:
            raise _NoResult(call_id)
        return call.result[0]

    def resolve(self, arguments: Any) -> Any:
        """Replaces every reference in ``arguments`` by the value it names.

        Args:
            arguments: Arguments with ``{"$ref": "c1.path"}`` references by call id.

        Returns:
            The resolved arguments, or :data:`UNRESOLVED` when a referenced result is not (or not successfully) in
            or lacks the path.
        """
        try:
            return resolve_refs(arguments, self.content)
        except LookupError:
            return UNRESOLVED

    def same_call(self, call: CallView, name: str, arguments: dict[str, Any]) -> bool:
        """Whether a session call is ``name(arguments)``: the same arguments, or the same values once resolved.

        Args:
            call: The session's call.
            name: The tool wanted.
            arguments: The arguments wanted, references by call id.

        Returns:
            ``True`` when they are the same call.
        """
        if call.name != name:
            return False
        if call.arguments == arguments:
            return True
        mine = self.resolve(call.arguments)
        return mine is not UNRESOLVED and mine == self.resolve(arguments)

    def next_call_id(self, taken: set[str]) -> str:
        """A call id nobody has used (``c<n>``, as the generator writes them).

        Args:
            taken: Ids reserved besides the session's calls (ones the agent chose that the session has not logged).

        Returns:
            The id.
        """
        n = len(self.calls) + 1
        while f"c{n}" in self.calls or f"c{n}" in taken:
            n += 1
        return f"c{n}"
