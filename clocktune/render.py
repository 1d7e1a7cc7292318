"""The renderer shared by training and the runtime: timeline -> token ids, labels and per-token metadata.

Each event becomes one message (``clocktune.encoding.formats``) tokenised on its own with ``add_special_tokens=False``;
messages start and end with special tokens, so the concatenation equals tokenising the whole text, and appending
events one by one (``Renderer.append``, the runtime) gives exactly the ids of ``render`` (training): the train ≡
serve invariant of docs/design.md §3.

Per-token metadata (docs/design.md §4):

- ``labels``: ``-100`` except on agent tokens, i.e. an agent message's action and its end-of-message token. The
  assistant header, the state line after the clock (``clocktune.state_line``), the tail after the end token and,
  unless ``agent_clock_loss``, the clock carry no loss: the runtime feeds header, clock and state line
  (``Renderer.prompt_for_action``) and the model generates the rest.
- ``time``: the event's ``t`` (0.0 for the system prefix).
- ``visible_until``: ``math.inf`` unless the event was superseded: a ``user_chunk`` that a later chunk
  ``revises`` is hidden from the reviser's ``t``; a ``tool_result`` whose call is later modified or cancelled is
  hidden from that ``tool_modify``/``tool_cancel``'s ``t``.
- ``event_index``: index of the event in the timeline (-1 for the system prefix).
- ``sink``: True on the system prefix (instructions and tool schemas).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from clocktune.encoding.formats import dumps, get_format, tool_json
from clocktune.encoding.tokenizer import Encoding, load_encoding
from clocktune.state_line import TurnState
from clocktune.timeline.events import AGENT_KINDS, Event, Timeline, ToolSchema

IGNORE_INDEX = -100

# Agent messages whose content never changes: worth caching like headers and clocks.
_CONSTANT_ACTIONS = frozenset({"wait", "commit"})


@dataclass
class Rendering:
    """Token ids of a rendered timeline with per-token labels and metadata (all lists of equal length).

    Args:
        input_ids: Token ids.
        labels: Training targets: the id on agent tokens, ``-100`` elsewhere.
        time: Time of the event each token belongs to (0.0 for the system prefix).
        visible_until: Time from which the token is hidden (``math.inf`` when never).
        event_index: Index of the token's event in the timeline (-1 for the system prefix).
        sink: Whether the token belongs to the system prefix.
    """

    input_ids: list[int] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)
    time: list[float] = field(default_factory=list)
    visible_until: list[float] = field(default_factory=list)
    event_index: list[int] = field(default_factory=list)
    sink: list[bool] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.input_ids)

    def to_dict(self) -> dict[str, list]:
        """Returns the fields as a dict of lists (e.g. a ``datasets`` row); the lists are not copied."""
        return {
            "input_ids": self.input_ids,
            "labels": self.labels,
            "time": self.time,
            "visible_until": self.visible_until,
            "event_index": self.event_index,
            "sink": self.sink,
        }


class _TokenizerState:
    """A tokenizer's encoding plus the token caches that every renderer of that tokenizer shares."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.encoding = load_encoding(tokenizer)
        # Re-extending the tokenizer changes its template or vocabulary and makes these caches stale.
        self.stamp = (tokenizer.chat_template, len(tokenizer))
        # Headers, tails, clocks and constant actions: small and repeated in every dialogue.
        self.cache: dict[str, list[int]] = {}
        # System prefix ids by the tools' compact JSON: building the prompt itself is slower (Llama's indented
        # schemas go through the pure-Python JSON encoder).
        self.system_cache: dict[str, list[int]] = {}

    def encode(self, texts: list[str]) -> list[list[int]]:
        """Tokenises texts in one batch call, without BOS/EOS."""
        return self.tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []


_STATES: weakref.WeakKeyDictionary[Any, _TokenizerState] = weakref.WeakKeyDictionary()


def _tokenizer_state(tokenizer: Any) -> _TokenizerState:
    state = _STATES.get(tokenizer)
    if state is None or state.stamp != (tokenizer.chat_template, len(tokenizer)):
        state = _STATES[tokenizer] = _TokenizerState(tokenizer)
    return state


class Renderer:
    """Renders a timeline incrementally: the runtime's context builder and the engine behind ``render``.

    ``rendering`` grows with every ``append``; earlier ids never change, only ``visible_until`` entries drop when
    a later event supersedes an earlier one (read them from ``rendering`` to update attention over a KV cache).

    Args:
        tokenizer: A tokenizer extended by ``clocktune.encoding.extend_tokenizer``.
        tools: Tool schemas listed in the system message.
        model_format: Expected model format; ``None`` takes the tokenizer's.
        agent_clock_loss: Whether the clock of agent messages carries loss too.

    Raises:
        ValueError: When the tokenizer carries no clocktune encoding or one of another ``model_format``.
    """

    def __init__(
        self,
        tokenizer: Any,
        tools: list[ToolSchema],
        model_format: str | None = None,
        agent_clock_loss: bool = False,
    ) -> None:
        self._state = _tokenizer_state(tokenizer)
        self.encoding: Encoding = self._state.encoding
        fmt = self.encoding.model_format
        if model_format is not None and get_format(model_format).name != fmt.name:
            raise ValueError(f"tokenizer is extended for model format {fmt.name!r}, not {model_format!r}")
        self.agent_clock_loss = agent_clock_loss
        self._prev_t = 0.0
        self._num_events = 0
        self._spans: dict[str, tuple[int, int]] = {}  # event id -> token range
        self._visible_results: dict[str, list[str]] = {}  # call id -> ids of its results still visible
        self._turn = TurnState(tools)
        tools_key = dumps([tool_json(tool) for tool in tools])
        system = self._state.system_cache.get(tools_key)
        if system is None:
            system_text = fmt.bos + fmt.frame("system", fmt.system_prompt(tools))
            system = self._state.system_cache[tools_key] = self._state.encode([system_text])[0]
        n = len(system)
        self.rendering = Rendering(list(system), [IGNORE_INDEX] * n, [0.0] * n, [math.inf] * n, [-1] * n, [True] * n)

    def _tokenize(self, texts: list[str], keep: set[str]) -> list[list[int]]:
        # Looks texts up in the shared cache, tokenises the rest in one batch call and caches those in ``keep``.
        known = self._state.cache
        todo = [text for text in dict.fromkeys(texts) if text not in known]
        fresh = dict(zip(todo, self._state.encode(todo), strict=True))
        known.update((text, ids) for text, ids in fresh.items() if text in keep)
        return [known[text] if text in known else fresh[text] for text in texts]

    def _pieces(self, event: Event, prev_t: float) -> list[tuple[str, bool, bool]]:
        # (text, carries loss, worth caching) for each separately tokenised piece of the event's message. An agent
        # message is split where the runtime stops feeding and the model starts generating (after the clock and
        # the state line), and at its end token, so that the loss can stop before the tail.
        fmt = self.encoding.model_format
        clock = self.encoding.codec.encode(event.t, prev_t)
        role, body = fmt.message(event)
        if event.kind not in AGENT_KINDS:
            return [(fmt.header(role) + clock + body + fmt.end + fmt.tail, False, False)]
        pieces = [
            (fmt.header(role), False, True),
            (clock, self.agent_clock_loss, True),
            (self._turn.text(), False, not self._turn.has_calls),
            (body + fmt.end, True, event.kind in _CONSTANT_ACTIONS),
        ]
        if fmt.tail:
            pieces.append((fmt.tail, False, True))
        return pieces

    def extend(self, events: Iterable[Event]) -> list[int]:
        """Appends events in order, tokenising them in one batch.

        Args:
            events: Events with times not before the last appended one.

        Returns:
            The ids appended, all events together.
        """
        planned = []
        prev_t = self._prev_t
        for event in events:
            planned.append((event, self._pieces(event, prev_t)))
            self._turn.update(event)
            prev_t = event.t
        texts = [text for _, pieces in planned for text, _, _ in pieces]
        keep = {text for _, pieces in planned for text, _, worth in pieces if worth}
        ids = iter(self._tokenize(texts, keep))
        start = len(self.rendering)
        for event, pieces in planned:
            self._add(event, [(next(ids), loss) for _, loss, _ in pieces])
        return self.rendering.input_ids[start:]

    def append(self, event: Event) -> list[int]:
        """Appends one event.

        For an agent event the returned ids are ``prompt_for_action(event.t)`` (called before this append), then
        the canonical tokens of its content and end token, then the format's tail. A model may have generated the
        same text split into other tokens: the runtime feeds these ids to stay identical to training.

        Args:
            event: The next event.

        Returns:
            The ids appended.
        """
        return self.extend([event])

    def prompt_for_action(self, t: float) -> list[int]:
        """Returns the ids the runtime feeds before the model generates an action at time ``t``.

        Args:
            t: Time of the action (not before the last appended event).

        Returns:
            The assistant header, the clock and the state line (``clocktune.state_line``); not appended (append
            the parsed action as an event).
        """
        fmt = self.encoding.model_format
        state = self._turn.text()
        texts = [fmt.header("assistant"), self.encoding.codec.encode(t, self._prev_t), state]
        header, clock, state_ids = self._tokenize(texts, keep=set(texts[:2] if self._turn.has_calls else texts))
        return header + clock + state_ids

    def hide(self, event_id: str, t: float) -> None:
        """Hides an appended event's tokens from time ``t`` on (keeps an earlier hiding time).

        Args:
            event_id: Id of an appended event.
            t: Time from which no token may attend to it.

        Raises:
            ValueError: When no event with that id was appended.
        """
        if event_id not in self._spans:
            raise ValueError(f"cannot hide event {event_id!r}: it was never appended")
        start, end = self._spans[event_id]
        visible_until = self.rendering.visible_until
        visible_until[start:end] = [min(until, t) for until in visible_until[start:end]]

    def drop_loss(self, event_id: str) -> None:
        """Makes an appended event context only: its tokens carry no training loss.

        Args:
            event_id: The event's id.

        Raises:
            ValueError: When no event with that id was appended.
        """
        if event_id not in self._spans:
            raise ValueError(f"cannot drop the loss of event {event_id!r}: it was never appended")
        start, end = self._spans[event_id]
        self.rendering.labels[start:end] = [IGNORE_INDEX] * (end - start)

    def _add(self, event: Event, pieces: list[tuple[list[int], bool]]) -> None:
        rendering = self.rendering
        start = len(rendering.input_ids)
        for ids, loss in pieces:
            rendering.input_ids += ids
            rendering.labels += ids if loss else [IGNORE_INDEX] * len(ids)
        n = len(rendering.input_ids) - start
        rendering.time += [event.t] * n
        rendering.visible_until += [math.inf] * n
        rendering.event_index += [self._num_events] * n
        rendering.sink += [False] * n
        self._spans[event.id] = (start, start + n)
        self._num_events += 1
        self._prev_t = event.t
        # Visibility rules: a revision supersedes the partial it revises; a modify or cancel supersedes the
        # results its call has delivered so far (results of the modified call that arrive later stay visible).
        kind = event.kind
        if kind == "user_chunk" and event.revises is not None:
            self.hide(event.revises, event.t)
        elif kind == "tool_result":
            self._visible_results.setdefault(event.call_id, []).append(event.id)
        elif kind in ("tool_modify", "tool_cancel"):
            for result_id in self._visible_results.pop(event.call_id, []):
                self.hide(result_id, event.t)


def render(
    timeline: Timeline, tokenizer: Any, model_format: str | None = None, agent_clock_loss: bool = False
) -> Rendering:
    """Renders a whole timeline for training.

    Args:
        timeline: The dialogue.
        tokenizer: A tokenizer extended by ``clocktune.encoding.extend_tokenizer``.
        model_format: Expected model format; ``None`` takes the tokenizer's.
        agent_clock_loss: Whether the clock of agent messages carries loss too.

    Returns:
        Ids, labels and metadata; equal to appending the events one by one to a ``Renderer``, with no loss on the
        events the timeline lists as ``context_only``.

    Raises:
        ValueError: When the tokenizer carries no clocktune encoding or one of another ``model_format``.
    """
    renderer = Renderer(tokenizer, timeline.tools, model_format, agent_clock_loss)
    renderer.extend(timeline.events)
    for event_id in timeline.context_only:
        renderer.drop_loss(event_id)
    return renderer.rendering


def timeline_to_messages(timeline: Timeline, encoding: Encoding) -> list[dict[str, str]]:
    """Returns the timeline as chat messages, system message first, one message per event.

    ``tokenizer.apply_chat_template(messages, tokenize=False)`` on an extended tokenizer gives ``render_text``.

    Args:
        timeline: The dialogue.
        encoding: Codec and format, e.g. ``load_encoding(tokenizer)``.

    Returns:
        ``{"role", "content"}`` dicts; roles as the model sees them, contents with the clock in front.
    """
    fmt, codec = encoding.model_format, encoding.codec
    messages = [{"role": "system", "content": fmt.system_prompt(timeline.tools)}]
    turn = TurnState(timeline.tools)
    prev_t = 0.0
    for event in timeline.events:
        role, body = fmt.message(event)
        state = turn.text() if event.kind in AGENT_KINDS else ""
        messages.append({"role": role, "content": codec.encode(event.t, prev_t) + state + body})
        turn.update(event)
        prev_t = event.t
    return messages


def render_text(timeline: Timeline, encoding: Encoding) -> str:
    """Returns the text that ``render`` tokenises (what the model sees), for inspection.

    Args:
        timeline: The dialogue.
        encoding: Codec and format, e.g. ``load_encoding(tokenizer)``.

    Returns:
        The whole conversation text.
    """
    fmt = encoding.model_format
    return fmt.bos + "".join(fmt.frame(m["role"], m["content"]) for m in timeline_to_messages(timeline, encoding))
