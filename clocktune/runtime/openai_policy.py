"""An OpenAI-compatible chat endpoint as the policy: the out-of-the-box cloud mode (docs/design.md §5).

The real-time protocol is *prompted*, not built on the endpoint's native tool calling, so that any chat endpoint
(OpenAI, vLLM, llama.cpp's server, Ollama, ...) works: a system message explains the protocol and lists the
tools, every event the session logs becomes a chat message, and the model answers each ``[t=..s] your move`` with
exactly one JSON object naming its action:

- ``{"action": "wait"}``
- ``{"action": "call", "id": "c1", "name": "...", "arguments": {...}}``
- ``{"action": "modify", "id": "c1", "arguments": {...}}``
- ``{"action": "cancel", "id": "c1"}``
- ``{"action": "commit"}``
- ``{"action": "say", "text": "..."}`` (interim words) and ``{"action": "answer", "text": "..."}`` (the final
  answer that ends the turn)

Events map to messages as follows: user chunks, tool results and runtime notices are user messages, one line each,
prefixed by their time (``[t=3.20s] book a table (final)``, ``[t=3.90s] tool result c1: {...}``,
``[t=4.00s] runtime notice: ...``); the agent's accepted actions are assistant messages holding the canonical
JSON. Consecutive lines of the same role are merged into one message, because several endpoints' chat templates
insist on alternating roles.

The ``[t=..s] your move`` prompt that ``act`` sends is kept in the history once the session accepts the action
(it is written just before the action's assistant message), and dropped when the output is rejected: the history
is then a pure function of the session's log, every assistant message follows a user message, and a rejected
output leaves only the runtime's notice (which quotes it) behind.

HTTP uses the standard library (``urllib.request``, through ``clocktune.runtime.endpoint_client``), so the policy
adds no dependency. The key only goes where ``base_url`` points (redirects are refused) and never over plain http
to a host other than loopback unless ``allow_insecure_http``; each request is held to ``request_timeout_s`` of wall
time, and a session to ``session_budget_s`` of endpoint time in all, after which the policy stops asking. ``act``
never raises: transport failures, HTTP errors, deadlines, a spent budget and malformed responses come back as
``Decision(None, 0, "endpoint error: ...")`` and the session's bounded retries and notice budget apply (a spent
budget answers at once, so the session gives up without waiting).
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Callable
from typing import Any

from clocktune.actions import CALL_ID, Action, ActionParseError, strict_json_loads
from clocktune.clock import estimate_tokens
from clocktune.runtime.endpoint_client import EndpointError, build_endpoint_opener, check_base_url, post_json
from clocktune.runtime.endpoint_client import excerpt as _excerpt
from clocktune.runtime.policy import Decision
from clocktune.timeline.events import AGENT_KINDS, Event, Timeline

__all__ = [
    "EndpointError",
    "OpenAIChatPolicy",
    "action_json",
    "openai_policy_factory",
    "parse_reply",
    "system_prompt",
]

# Models like to wrap JSON in a Markdown fence even when told not to; that much is tolerated, nothing else.
_FENCE = re.compile(r"\A```[A-Za-z]*[ \t]*\n?(?P<body>.*?)\n?[ \t]*```\Z", re.DOTALL)

# Defaults of the endpoint's time bounds (OpenAIChatPolicy's request_timeout_s and session_budget_s).
DEFAULT_REQUEST_TIMEOUT_S = 30.0
DEFAULT_SESSION_BUDGET_S = 300.0

# The keys each action must carry (besides "action"), with the type of each.
_SHAPES: dict[str, dict[str, type]] = {
    "wait": {},
    "call": {"id": str, "name": str, "arguments": dict},
    "modify": {"id": str, "arguments": dict},
    "cancel": {"id": str},
    "commit": {},
    "say": {"text": str},
    "answer": {"text": str},
}

_PROTOCOL = """\
You are a real-time voice assistant. You act while the user is still speaking, so that the answer is ready \
about a second after they stop.

How the conversation works:
- Every line starts with its time in seconds since the session started, like [t=3.20s].
- The user's words arrive in chunks from a speech recogniser while they are still speaking. The last chunk of an \
utterance is marked (final). A chunk marked (revises previous) replaces the chunk before it, which the \
recogniser misheard.
- Tool results arrive asynchronously, whenever a call finishes, as "[t=..s] tool result c1: <JSON>"; a failed \
call shows {"error": "..."}. Several calls may be in flight at once.
- "[t=..s] runtime notice: ..." is feedback from the runtime, e.g. why your last action was rejected: fix it.
- "[t=..s] your move" asks for your next action at that time.

Rules:
- Read-only tools may be called at any time, even before the user has finished, to save time. When later \
words change what is needed, modify the pending call (same id, new arguments) or cancel it.
- State-changing tools (<STATE_CHANGING>) only execute after you send commit, and commit is allowed only after \
the user's final chunk. Calls issued before the commit can still be modified or cancelled; committed ones cannot.
- Give every call a new id: c1, c2, c3, ...
- A call's arguments may use the result of an earlier call: {"$ref": "c1"} is the whole result of c1 and \
{"$ref": "c1.results.0.id"} a path into it (dot-separated keys and list indices). The runtime runs the call \
once c1's result is in, so you do not have to wait for it.
- Give the final answer only after the user's final chunk and once the results you need are in. Keep it short; \
it ends your turn.
- When there is nothing useful to do yet (the user is still speaking, results are pending), wait.

Answer every "your move" with exactly ONE JSON object and nothing else, one of:
{"action": "wait"}
{"action": "call", "id": "c1", "name": "<tool>", "arguments": {...}}
{"action": "modify", "id": "c1", "arguments": {...}}
{"action": "cancel", "id": "c1"}
{"action": "commit"}
{"action": "say", "text": "<interim words to the user>"}
{"action": "answer", "text": "<final answer>"}

Tools (one JSON object per line; state_changing tools need a commit):
<TOOLS>"""


def _clock(t: float) -> str:
    return f"[t={t:.2f}s]"


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def system_prompt(timeline: Timeline) -> str:
    """The system message: the real-time protocol and the timeline's tools.

    Args:
        timeline: The session's timeline (only its tools are used).

    Returns:
        The system message's text.
    """
    writes = [tool.name for tool in timeline.tools if tool.side_effect]
    tools = "\n".join(
        _dumps(
            {
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters,
                "state_changing": tool.side_effect,
            }
        )
        for tool in timeline.tools
    )
    return _PROTOCOL.replace("<STATE_CHANGING>", ", ".join(writes) if writes else "none here").replace(
        "<TOOLS>", tools
    )


def action_json(action: Action | Event) -> str:
    """The canonical JSON of an agent action, as the protocol asks the model to write it.

    Args:
        action: An action, or an agent event (``tool_call``, ``tool_modify``, ``tool_cancel``, ``say``, ``wait``
            or ``commit``).

    Returns:
        One JSON object on one line.

    Raises:
        ValueError: For a kind that is not an agent action.
    """
    kind = action.kind
    if kind == "wait" or kind == "commit":
        body: dict[str, Any] = {"action": kind}
    elif kind == "tool_call":
        body = {"action": "call", "id": action.call_id, "name": action.name, "arguments": action.arguments}
    elif kind == "tool_modify":
        body = {"action": "modify", "id": action.call_id, "arguments": action.arguments}
    elif kind == "tool_cancel":
        body = {"action": "cancel", "id": action.call_id}
    elif kind == "say":
        body = {"action": "answer" if action.final else "say", "text": action.text}
    else:
        raise ValueError(f"{kind!r} is not an agent action")
    return _dumps(body)


def parse_reply(content: str) -> Action:
    """Parses the model's reply into an action.

    Args:
        content: The assistant message's text: one JSON object, optionally with surrounding whitespace or inside
            one Markdown code fence (```json ... ```).

    Returns:
        The action.

    Raises:
        ActionParseError: When the reply is not exactly one well-formed action object; the message says why, in
            words the model can act on.
    """
    text = content.strip()
    fence = _FENCE.match(text)
    if fence is not None:
        text = fence.group("body").strip()
    try:
        # Bounded (clocktune.timeline.bounded_json): a reply nested 10,000 deep is a ValueError, not a RecursionError.
        value = strict_json_loads(text)
    except (ValueError, RecursionError) as error:
        raise ActionParseError(f"reply is not one JSON object ({error}): {_excerpt(content)}") from None
    if not isinstance(value, dict):
        raise ActionParseError(f"reply must be a JSON object, got {_excerpt(text)}")
    kind = value.get("action")
    if kind not in _SHAPES:
        raise ActionParseError(f"unknown action {kind!r}; use one of {list(_SHAPES)}")
    shape = _SHAPES[kind]
    missing = [key for key in shape if key not in value]
    if missing:
        raise ActionParseError(f"{kind}: missing field(s) {missing}")
    unknown = [key for key in value if key != "action" and key not in shape]
    if unknown:
        raise ActionParseError(f"{kind}: unexpected field(s) {unknown}; it takes {['action', *shape]}")
    for key, expected in shape.items():
        if not isinstance(value[key], expected):
            what = "a JSON object" if expected is dict else "a string"
            raise ActionParseError(f"{kind}: {key} must be {what}, got {_excerpt(_dumps(value[key]))}")
    if "id" in shape and CALL_ID.fullmatch(value["id"]) is None:
        raise ActionParseError(f"{kind}: malformed call id {value['id']!r} (use ids like 'c1')")
    if kind == "call" and not value["name"]:
        raise ActionParseError("call: empty tool name")
    if kind in ("say", "answer") and not value["text"].strip():
        raise ActionParseError(f"{kind}: text is empty")
    if kind == "call":
        return Action("tool_call", call_id=value["id"], name=value["name"], arguments=value["arguments"])
    if kind == "modify":
        return Action("tool_modify", call_id=value["id"], arguments=value["arguments"])
    if kind == "cancel":
        return Action("tool_cancel", call_id=value["id"])
    if kind in ("say", "answer"):
        return Action("say", text=value["text"], final=kind == "answer")
    return Action(kind)


class OpenAIChatPolicy:
    """A policy that asks an OpenAI-compatible ``/chat/completions`` endpoint for each action.

    Args:
        timeline: The session's timeline (its tools go into the system prompt).
        base_url: The API root, e.g. ``https://api.openai.com/v1`` or ``http://localhost:8000/v1``;
            ``/chat/completions`` is appended.
        model: Model name sent with every request.
        api_key: Sent as ``Authorization: Bearer <api_key>``; ``None`` sends no header (local servers).
        name: Name recorded in results (the logged timeline's teacher).
        timeout_s: Seconds to wait for any one connect or read (a socket timeout) before the request counts as
            failed.
        max_tokens: Longest reply the endpoint may write (one action is short; this bounds runaway replies).
        opener: ``urllib`` opener to send requests with (share one between policies, or install handlers such as
            a proxy); defaults to ``endpoint_client.build_endpoint_opener(base_url)``, which refuses redirects. The
            key is never forwarded on a redirect, whatever the opener.
        request_timeout_s: Wall-clock bound on one whole request, headers and body included, however slowly the
            server sends them.
        session_budget_s: Seconds of endpoint time (all requests together) this session may spend; once spent,
            ``act`` answers an endpoint error at once without asking, and the session gives up.
        allow_insecure_http: Send ``api_key`` over plain ``http`` to a host that is not loopback.

    Raises:
        ValueError: For a base URL that is not ``http(s)://HOST...``, or a key bound for a non-loopback host over
            plain ``http`` without ``allow_insecure_http`` (checked here, before any connection).
    """

    io_bound = True  # waits on the endpoint: on the wall clock, sessions overlap their requests

    def __init__(
        self,
        timeline: Timeline,
        base_url: str,
        model: str,
        api_key: str | None = None,
        name: str = "openai",
        timeout_s: float = 30.0,
        max_tokens: int = 256,
        opener: urllib.request.OpenerDirector | None = None,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        session_budget_s: float = DEFAULT_SESSION_BUDGET_S,
        allow_insecure_http: bool = False,
    ) -> None:
        check_base_url(base_url, api_key, allow_insecure_http)
        self.name = name
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.max_tokens = max_tokens
        self.request_timeout_s = request_timeout_s
        self.session_budget_s = session_budget_s
        self.opener = opener if opener is not None else build_endpoint_opener(base_url)
        self.messages: list[dict[str, str]] = [{"role": "system", "content": system_prompt(timeline)}]
        # Totals over the session, for cost reports (``usage`` as the endpoint reported it).
        self.requests = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.endpoint_s = 0.0  # wall seconds spent in requests, against session_budget_s

    # Context ----------------------------------------------------------------------------------------------------

    def _append(self, role: str, line: str) -> None:
        last = self.messages[-1]
        if last["role"] == role and role != "system":
            last["content"] += "\n" + line
        else:
            self.messages.append({"role": role, "content": line})

    @staticmethod
    def event_line(event: Event) -> str:
        """The user-message line of a non-agent event.

        Args:
            event: A ``user_chunk``, ``tool_result`` or ``notice``.

        Returns:
            The line, starting with the event's time.
        """
        clock = _clock(event.t)
        if event.kind == "user_chunk":
            revises = " (revises previous)" if event.revises is not None else ""
            final = " (final)" if event.final else ""
            return f"{clock}{revises} {event.text or ''}{final}"
        if event.kind == "tool_result":
            content = {"error": event.error} if event.error is not None else event.content
            return f"{clock} tool result {event.call_id}: {_dumps(content)}"
        return f"{clock} runtime notice: {event.text or ''}"

    def close(self) -> None:
        """Nothing to release: each request opens and closes its own connection."""

    def observe(self, events: list[Event]) -> int:
        """Appends events to the chat history.

        Args:
            events: New session events, in order (the agent's accepted actions included).

        Returns:
            Estimated context tokens (four characters per token) of the events the policy did not write: the
            prefill the session charges.
        """
        tokens = 0
        for event in events:
            if event.kind in AGENT_KINDS:
                # The prompt this action answered; kept only now that the session accepted the action.
                self._append("user", f"{_clock(event.t)} your move")
                self._append("assistant", action_json(event))
            else:
                line = self.event_line(event)
                self._append("user", line)
                tokens += estimate_tokens(line)
        return tokens

    # Endpoint ---------------------------------------------------------------------------------------------------

    def request_body(self, t: float) -> dict[str, Any]:
        """The JSON body ``act`` posts at time ``t``: the history plus a ``your move`` prompt.

        Args:
            t: Session time of the decision.

        Returns:
            The request body.
        """
        messages = [dict(message) for message in self.messages]
        prompt = f"{_clock(t)} your move"
        if messages[-1]["role"] == "user":
            messages[-1]["content"] += "\n" + prompt
        else:
            messages.append({"role": "user", "content": prompt})
        return {"model": self.model, "messages": messages, "temperature": 0, "max_tokens": self.max_tokens}

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        left = self.session_budget_s - self.endpoint_s
        if left <= 0:
            raise EndpointError(
                f"this session's endpoint budget of {self.session_budget_s:g}s is spent; no more requests"
            )
        # The session budget is a hard bound too: the last request gets only what is left of it.
        if left < self.request_timeout_s:
            deadline_s, reason = left, f"what was left of the session's {self.session_budget_s:g}s endpoint budget"
        else:
            deadline_s, reason = self.request_timeout_s, "request deadline"
        self.requests += 1
        start = time.monotonic()
        try:
            return post_json(self.opener, self.url, body, self.api_key, self.timeout_s, deadline_s, reason)
        finally:
            self.endpoint_s += time.monotonic() - start

    def _completion(self, reply: dict[str, Any]) -> tuple[str | None, int | None]:
        usage = reply.get("usage")
        if isinstance(usage, dict):
            for key in ("prompt_tokens", "completion_tokens"):
                if isinstance(usage.get(key), int) and not isinstance(usage.get(key), bool):
                    setattr(self, key, getattr(self, key) + usage[key])
            completion = usage.get("completion_tokens")
            completion = completion if isinstance(completion, int) and not isinstance(completion, bool) else None
        else:
            completion = None
        choices = reply.get("choices")
        if not isinstance(choices, list) or not choices:
            error = reply.get("error")
            detail = f": {_excerpt(_dumps(error))}" if error is not None else ""
            raise EndpointError(f"response has no choices{detail}")
        message = choices[0].get("message") if isinstance(choices[0], dict) else None
        if not isinstance(message, dict):
            raise EndpointError("response's first choice has no message")
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            raise EndpointError(f"message content is not text: {_excerpt(_dumps(content))}")
        return content, completion

    def act(self, t: float) -> Decision:
        """Asks the endpoint for the next action at time ``t``.

        Args:
            t: The session time of the decision.

        Returns:
            The parsed action with the completion's token count (``usage.completion_tokens``, else about four
            characters per token); ``Decision(None, tokens, why)`` when the reply is not a valid action, and
            ``Decision(None, 0, "endpoint error: ...")`` when the endpoint failed, missed the request deadline, or the
            session's endpoint budget is spent (then without asking). Never raises for any of these.
        """
        try:
            content, completion = self._completion(self._post(self.request_body(t)))
        except EndpointError as error:
            return Decision(None, 0, f"endpoint error: {error}")
        tokens = completion if completion is not None else estimate_tokens(content or "")
        if content is None or not content.strip():
            return Decision(None, tokens, "empty reply; answer with exactly one JSON action object")
        try:
            return Decision(parse_reply(content), tokens)
        except ActionParseError as error:
            return Decision(None, tokens, str(error))


def openai_policy_factory(
    base_url: str,
    model: str,
    api_key: str | None = None,
    *,
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
    session_budget_s: float = DEFAULT_SESSION_BUDGET_S,
    allow_insecure_http: bool = False,
    **options: Any,
) -> Callable[[Timeline], OpenAIChatPolicy]:
    """A factory of per-session :class:`OpenAIChatPolicy` objects that share one opener.

    Args:
        base_url: The API root (``.../v1``).
        model: Model name.
        api_key: Bearer token, or ``None``.
        request_timeout_s: Wall-clock bound on each request, trickling bodies included.
        session_budget_s: Seconds of endpoint time each session may spend in all.
        allow_insecure_http: Send the key over plain ``http`` to a host that is not loopback.
        **options: Further :class:`OpenAIChatPolicy` arguments (``name``, ``timeout_s``, ``max_tokens``,
            ``opener``).

    Returns:
        ``factory(timeline) -> OpenAIChatPolicy``.

    Raises:
        ValueError: For a base URL the policy refuses (see :class:`OpenAIChatPolicy`), now rather than per session.
    """
    check_base_url(base_url, api_key, allow_insecure_http)
    opener = options.pop("opener", None) or build_endpoint_opener(base_url)
    limits = {
        "request_timeout_s": request_timeout_s,
        "session_budget_s": session_budget_s,
        "allow_insecure_http": allow_insecure_http,
    }

    def factory(timeline: Timeline) -> OpenAIChatPolicy:
        return OpenAIChatPolicy(timeline, base_url, model, api_key, opener=opener, **limits, **options)

    return factory
