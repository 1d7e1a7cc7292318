"""The recorded-response backend of an imported conversation, and which tools change state.

An imported conversation holds each call's recorded result, not a service that could compute results for other
arguments. :class:`RecordedBackend` serves exactly those: a call whose tool and normalised arguments
(``data_gen.determinable.canonical``: case, punctuation, number spelling) match a recorded call gets the recorded
result (the next one, when the same call was recorded several times; the last one again after that); any other call
is refused with a :class:`~clocktune.tools.ToolError`, and a call of an unknown tool is a
:class:`~clocktune.tools.BrokenCallError`. The recorded responses live in the timeline's ``initial_state``
(``{"responses": [{"name", "arguments", "content"}, ...]}``), so :func:`backend_for_timeline` rebuilds the backend
from the timeline alone, as evaluation does through ``data_gen.backends.make_backend``.

**State.** A recording has no service state, only the calls that changed it: :meth:`RecordedBackend.state` is
``{"writes": [...]}``, the recorded form of every state-changing call that was served, sorted (so that parallel
writes compare as a multiset, whatever order they ran in). Ground truth's ``final_state`` is the same list after
replaying the gold calls.

**Which tools change state** (:func:`side_effect`): the schema says so when it can (``side_effect`` or
``x-side-effect``, true or false, on the tool or on its ``function``); otherwise the tool's name decides. The name
is split into words (``snake_case``, ``camelCase``, ``kebab-case``, dots); a name whose first word is a reading
verb (:data:`READ_VERBS`: get, list, search, find, check, ...) is read-only, else a name with any word in
:data:`WRITE_VERBS` (create, book, send, delete, update, cancel, set, add, remove, transfer, pay, buy, ...) is
state-changing, and any other name is read-only. So ``get_order_status`` reads and ``order_pizza`` writes.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from typing import Any

from clocktune.timeline.events import Timeline
from clocktune.tools import BrokenCallError, ToolError
from data_gen.determinable import canonical

__all__ = ["READ_VERBS", "WRITE_VERBS", "RecordedBackend", "backend_for_timeline", "name_words", "side_effect"]

READ_VERBS = frozenset(
    "get list search find check fetch lookup look read query show view describe count calculate compute convert "
    "estimate retrieve locate browse preview validate verify is has can".split()
)
WRITE_VERBS = frozenset(
    "create book send delete update cancel set add remove transfer pay buy post reserve schedule write edit modify "
    "insert put purchase order submit move rename change save upload register enable disable reset assign approve "
    "reject close archive publish share invite refund charge deposit withdraw subscribe unsubscribe start stop "
    "turn lock unlock mark apply place make".split()
)
_SIDE_EFFECT_KEYS = ("side_effect", "x-side-effect")


def name_words(name: str) -> list[str]:
    """The lower-case words of a tool name: ``"sendEmail"`` and ``"send_email"`` are ``["send", "email"]``."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name)
    return [word for word in re.split(r"[^A-Za-z0-9]+", spaced.lower()) if word]


def side_effect(tool: Mapping[str, Any]) -> tuple[bool, str]:
    """Whether a tool changes state, by the rule of the module docstring.

    Args:
        tool: The tool as listed in the conversation (``{"type": "function", "function": {...}}`` or the function
            object itself).

    Returns:
        ``(state_changing, why)``; ``why`` names the schema key or the name word that decided.

    Raises:
        ValueError: When a ``side_effect``/``x-side-effect`` key is there but not true or false.
    """
    function = tool.get("function") if isinstance(tool.get("function"), Mapping) else tool
    for holder in (function, tool):
        for key in _SIDE_EFFECT_KEYS:
            if key in holder:
                if not isinstance(holder[key], bool):
                    raise ValueError(f"{key} must be true or false, got {holder[key]!r}")
                return holder[key], f"schema {key}"
    words = name_words(str(function.get("name", "")))
    if words and words[0] in READ_VERBS:
        return False, f"name starts with {words[0]!r}"
    verb = next((word for word in words if word in WRITE_VERBS), None)
    if verb is not None:
        return True, f"name has {verb!r}"
    return False, "no state-changing verb in the name"


def _key(name: str, arguments: Any) -> str:
    return f"{name}\0{canonical(arguments)}"


class RecordedBackend:
    """Serves a conversation's recorded results; see the module docstring.

    Args:
        responses: ``{"name", "arguments", "content"}`` per recorded call, in the conversation's order.
        side_effects: Tool name -> whether it changes state; the tools a session may call.
    """

    # Results are looked up, not computed from state: calls may run in any order.
    sequential = False

    def __init__(self, responses: list[Mapping[str, Any]], side_effects: Mapping[str, bool]):
        self.side_effects = dict(side_effects)
        self._responses: dict[str, list[tuple[dict, Any]]] = {}
        for response in responses:
            entry = (copy.deepcopy(response["arguments"]), copy.deepcopy(response["content"]))
            self._responses.setdefault(_key(response["name"], response["arguments"]), []).append(entry)
        self._served: dict[str, int] = {}
        self._writes: list[dict[str, Any]] = []

    def execute(self, name: str, arguments: dict[str, Any]) -> Any:
        """Runs one call.

        Args:
            name: Tool name.
            arguments: Resolved arguments.

        Returns:
            The recorded result of the matching call (a copy).

        Raises:
            BrokenCallError: For a tool the conversation does not list.
            ToolError: For a call that matches no recorded call.
        """
        if name not in self.side_effects:
            raise BrokenCallError(f"unknown tool {name!r}")
        key = _key(name, arguments)
        recorded = self._responses.get(key)
        if not recorded:
            raise ToolError(f"{name}: no recorded response for arguments {json.dumps(arguments, sort_keys=True)}")
        served = self._served.get(key, 0)
        self._served[key] = served + 1
        recorded_arguments, content = recorded[min(served, len(recorded) - 1)]
        if self.side_effects[name]:
            self._writes.append({"name": name, "arguments": copy.deepcopy(recorded_arguments)})
        return copy.deepcopy(content)

    def state(self) -> dict[str, Any]:
        """The state-changing calls served so far, in their recorded form, sorted.

        Returns:
            ``{"writes": [{"name", "arguments"}, ...]}``.
        """
        writes = sorted(self._writes, key=lambda write: json.dumps(write, sort_keys=True))
        return {"writes": copy.deepcopy(writes)}


def backend_for_timeline(timeline: Timeline) -> RecordedBackend:
    """A fresh recorded-response backend for an imported conversation.

    Args:
        timeline: A timeline whose ``initial_state`` holds ``responses`` (see the module docstring).

    Returns:
        The backend; its tools and their side effects are the timeline's.

    Raises:
        ValueError: For a malformed ``initial_state``.
    """
    responses = timeline.initial_state.get("responses")
    if not isinstance(responses, list) or not all(
        isinstance(item, dict) and isinstance(item.get("name"), str) and isinstance(item.get("arguments"), dict)
        and "content" in item
        for item in responses
    ):  # fmt: skip
        raise ValueError(
            f"timeline {timeline.id!r}: initial_state.responses must be a list of {{name, arguments, content}}"
        )
    return RecordedBackend(responses, {tool.name: tool.side_effect for tool in timeline.tools})
