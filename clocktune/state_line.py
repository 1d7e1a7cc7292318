"""The state line: what the runtime tells the model, after the clock of each action, about the turn so far.

A decision such as "commit now" or "answer now" depends on the state of the whole turn: has the user finished,
which calls are still running, which state-changing calls wait for ``commit``. Spread over a long context, that
state is hard for a small model to track. The runtime knows it exactly, so it writes it down where the model
decides::

    <|t_s72|>[user done | c1 find_free_slots: done | c2 create_event: uncommitted]
    <|commit|>

The line is derived from the events before the action, never from the future, so the renderer (training) and
the runtime (serving) write the same text. It carries no loss: the model reads it, it does not write it.

Statuses: ``running`` (issued, no result yet), ``uncommitted`` (a state-changing call waiting for ``commit``),
``done``, ``failed``. Cancelled calls leave the line; a modified call is ``running`` (or ``uncommitted``) again.
A turn ends with the final answer; the next user chunk starts a new line.
"""

from __future__ import annotations

from clocktune.timeline.events import Event, ToolSchema


class TurnState:
    """Follows a timeline event by event and writes the state line.

    Args:
        tools: The session's tool schemas (which tools change state).
    """

    def __init__(self, tools: list[ToolSchema]) -> None:
        self._side_effect = {tool.name: tool.side_effect for tool in tools}
        self._names: dict[str, str] = {}  # call id -> tool name, in issue order
        self._status: dict[str, str] = {}  # call id -> status
        self._user_done = False
        self._turn_over = False

    def update(self, event: Event) -> None:
        """Takes one more event into account.

        Args:
            event: The next event of the timeline.
        """
        kind = event.kind
        if kind == "user_chunk":
            if self._turn_over:
                self._names.clear()
                self._status.clear()
                self._turn_over = False
            self._user_done = event.final
        elif kind in ("tool_call", "tool_modify"):
            if kind == "tool_call":
                self._names[event.call_id] = event.name
            name = self._names.get(event.call_id)
            if name is not None:
                self._status[event.call_id] = "uncommitted" if self._side_effect.get(name, False) else "running"
        elif kind == "tool_cancel":
            self._names.pop(event.call_id, None)
            self._status.pop(event.call_id, None)
        elif kind == "commit":
            for call_id, status in self._status.items():
                if status == "uncommitted":
                    self._status[call_id] = "running"
        elif kind == "tool_result" and self._status.get(event.call_id) == "running":
            self._status[event.call_id] = "failed" if event.error is not None else "done"
        elif kind == "say" and event.final:
            self._turn_over = True

    @property
    def has_calls(self) -> bool:
        """Whether the line lists calls (a line without calls is one of two constant texts)."""
        return bool(self._status)

    def text(self) -> str:
        """Returns the state line for an action taken now.

        Returns:
            ``"[user speaking]\\n"``, or ``"[user done | c1 find_free_slots: done | ...]\\n"`` once calls were made.
            The line break keeps the tokens of the action that follows the same as in the whole text.
        """
        parts = ["user done" if self._user_done else "user speaking"]
        parts += [f"{call_id} {self._names[call_id]}: {status}" for call_id, status in self._status.items()]
        return "[" + " | ".join(parts) + "]\n"
