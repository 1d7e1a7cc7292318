"""Live sessions: one user on one channel (a WebSocket), playing a runtime session on the wall clock.

A live session is the runtime's own :class:`~clocktune.runtime.session.Session` with
:class:`~clocktune.runtime.speech.LiveSpeech`: the user's recogniser updates arrive as they are spoken
(``Session.hear``), the agent's actions are the session's log streamed as it is written (``on_event``), and a model
policy's forwards go through the engine its sessions share (``WallClock.decide``), batched with every other live
session waiting at the same moment. Nothing here decides what the agent does; this module only carries messages
(``serve.protocol``) between a channel and a session and keeps each session inside its limits:

- a session sees only its own events, tools and state: each has its own backend, policy, executor and outbox;
- every queue is bounded: a client that does not read its messages fills its outbox and is ended, so a slow client
  cannot grow the server's memory;
- a client silent for ``idle_s``, or a session older than ``session_s``, is ended; so is a server at
  ``max_sessions``;
- a refused message gets an ``error`` and the session goes on; an internal failure ends the session with an error,
  never with a traceback sent to the client (it is logged on the server).

With ``record``, every session that heard the user is written as a timeline (one file per session, atomically): its
log, and as ground truth the calls it ran and the state it left, so live use becomes training data.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from clocktune.runtime.clocks import WallClock
from clocktune.runtime.policy import Policy, PolicyFactory
from clocktune.runtime.scoring import score_session
from clocktune.runtime.session import Session, SessionConfig, SessionLog
from clocktune.runtime.speech import LiveSpeech, SpokenChunk
from clocktune.runtime.wall_clock import on_calling_thread
from clocktune.serve.protocol import ClientMessage, ProtocolError, event_message, parse_client_message
from clocktune.timeline.analysis import executed_calls
from clocktune.timeline.events import Event, GroundTruth, GroundTruthCall, Timeline, ToolSchema
from clocktune.timeline.io import write_timelines
from clocktune.tools import BackendFactory, BrokenCallError, ToolBackend

__all__ = ["Channel", "ClientTools", "Disconnected", "LiveDomain", "LiveSessions", "ServeLimits"]

_LOG = logging.getLogger(__name__)


class Disconnected(Exception):
    """The client closed its channel."""


class Channel(Protocol):
    """One client's message channel (a WebSocket, or an in-process pair for ``clocktune chat``)."""

    async def receive(self) -> str | bytes:
        """The next message; raises :class:`Disconnected` when the client has gone."""
        ...

    async def send(self, text: str) -> None:
        """Sends one message."""
        ...

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """Closes the channel."""
        ...


@dataclass(frozen=True)
class LiveDomain:
    """The server's ``--domain``: the tools and a drawn state for a session that brings neither.

    Args:
        name: The domain's name (the recorded timelines' ``domain``).
        tools: Its tool schemas.
        initial_state: Draws a fresh state from a generator (seeded by the session's ``open.seed``).
    """

    name: str
    tools: list[ToolSchema]
    initial_state: Callable[[random.Random], dict[str, Any]]


@dataclass(frozen=True)
class ServeLimits:
    """What one session may take of the server.

    Args:
        idle_s: A session whose client sends nothing for this long is ended.
        session_s: No session lasts longer.
        outbox: Messages queued for one client; a client that falls further behind is ended.
        max_sessions: Sessions open at once; the next client is refused.
        send_timeout_s: Seconds one message may take to send before the client counts as gone.
    """

    idle_s: float = 300.0
    session_s: float = 3600.0
    outbox: int = 1024
    max_sessions: int = 256
    send_timeout_s: float = 10.0


class ClientTools:
    """A session's tools as its client declared them: every call is sent to the client, which answers it.

    Args:
        post: Queues a message for the client.
    """

    sequential = False

    def __init__(self, post: Callable[[dict[str, Any]], None]) -> None:
        self.post = post
        self.now: Callable[[], float] = lambda: 0.0

    def remote(self, name: str) -> bool:
        """Every tool of the client runs on the client."""
        return True

    def request(self, call_id: str, version: int, name: str, arguments: dict[str, Any]) -> None:
        """Sends the call to the client as a ``tool_request``."""
        self.post(
            {
                "kind": "tool_request",
                "t": self.now(),
                "call_id": call_id,
                "version": version,
                "name": name,
                "arguments": arguments,
            }
        )

    def execute(self, name: str, arguments: dict[str, Any]) -> Any:
        """Never called: the executor sends remote tools' calls with :meth:`request`."""
        raise BrokenCallError(f"{name} runs on the client")

    def state(self) -> dict[str, Any]:
        """The client's state is its own: the server knows none."""
        return {}


@dataclass
class _Outbox:
    """A session's bounded queue of messages for its client."""

    size: int
    queue: asyncio.Queue = field(init=False)
    overflowed: bool = False

    def __post_init__(self) -> None:
        # Room kept past ``size`` for the last error, the end and the end marker.
        self.queue = asyncio.Queue(maxsize=self.size + 3)

    def post(self, message: dict[str, Any] | str) -> bool:
        if self.overflowed:
            return False
        if self.queue.qsize() >= self.size:
            self.overflowed = True
            return False
        self.queue.put_nowait(message if isinstance(message, str) else json.dumps(message))
        return True

    def last(self, message: dict[str, Any]) -> None:
        """The session's last message (its failure or its end), then the end marker: always queued, in the room
        kept for them."""
        if self.queue.qsize() < self.size + 2:
            self.queue.put_nowait(json.dumps(message))


async def _close_policy(policy: Policy) -> None:
    # On the engine's thread: a model policy's cache must not be dropped while a forward may be using it.
    def close() -> None:
        engine, kv = getattr(policy, "engine", None), getattr(policy, "kv", None)
        if engine is not None and kv is not None and hasattr(engine, "cancel"):
            engine.cancel(kv)
        policy.close()

    await on_calling_thread(close)


class LiveSessions:
    """The server's live sessions: what a session may open, how its agent is built, and where it is recorded.

    Args:
        policies: Builds a session's policy from its timeline header (``policy_factory``).
        policy_name: The name its recorded timelines carry as ``teacher``.
        backends: Builds the backend of a session on the server's tools (a ``--data`` timeline's or the domain's).
        domain: The ``--domain`` a session without ``timeline`` or ``tools`` plays.
        timelines: Held-out timelines a session may open by id (``--data``): their tools, state and ground truth;
            scripted policies need them (they follow the recorded plan).
        record: Folder every session is written to as a timeline, or ``None``.
        limits: Per-session limits.
        config: The sessions' runtime config (its clock is always the wall clock).
    """

    def __init__(
        self,
        policies: PolicyFactory,
        policy_name: str,
        backends: BackendFactory | None = None,
        domain: LiveDomain | None = None,
        timelines: dict[str, Timeline] | None = None,
        record: Path | None = None,
        limits: ServeLimits = ServeLimits(),
        config: SessionConfig | None = None,
    ) -> None:
        self.policies = policies
        self.policy_name = policy_name
        self.backends = backends
        self.domain = domain
        self.timelines = timelines or {}
        self.record = record
        self.limits = limits
        self.config = config if config is not None else SessionConfig()
        self.config.clock = WallClock()
        self.active = 0
        self.finished = 0
        if record is not None:
            record.mkdir(parents=True, exist_ok=True)

    # Opening ---------------------------------------------------------------------------------------------------

    def _header(self, message: ClientMessage, session_id: str) -> Timeline:
        fields = message.fields
        if "timeline" in fields and "tools" in fields:
            raise ProtocolError("open: give a timeline or tools, not both")
        if "timeline" in fields:
            recorded = self.timelines.get(fields["timeline"])
            if recorded is None:
                raise ProtocolError(f"open.timeline: no timeline {fields['timeline']!r} is served (serve --data)")
            return Timeline(
                id=f"{session_id}-{recorded.id}",
                domain=recorded.domain,
                task=recorded.task,
                seed=recorded.seed,
                teacher=self.policy_name,
                tools=recorded.tools,
                initial_state=recorded.initial_state,
                ground_truth=recorded.ground_truth,
                events=list(recorded.events),  # a scripted policy reads its plan here; the log starts empty
            )
        if "tools" in fields:
            tools = fields["tools"]
            return Timeline(
                session_id, "client", "live", fields["seed"], self.policy_name, tools, {}, GroundTruth(), []
            )
        if self.domain is None:
            raise ProtocolError("open: this server has no --domain; open a timeline or bring your tools")
        state = self.domain.initial_state(random.Random(fields["seed"]))
        return Timeline(
            session_id,
            self.domain.name,
            "live",
            fields["seed"],
            self.policy_name,
            self.domain.tools,
            state,
            GroundTruth(),
            [],
        )

    # Playing ---------------------------------------------------------------------------------------------------

    async def play(self, channel: Channel) -> SessionLog | None:
        """Plays one client's session to its end: open, speech and results in, the log out, then recorded.

        Args:
            channel: The client's channel.

        Returns:
            The session's log, or ``None`` when no session opened.
        """
        if self.active >= self.limits.max_sessions:
            await _refuse(channel, f"the server is full ({self.limits.max_sessions} sessions)", 1013)
            return None
        self.active += 1
        try:
            return await self._play(channel)
        finally:
            self.active -= 1
            self.finished += 1

    async def _play(self, channel: Channel) -> SessionLog | None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.limits.session_s
        try:
            first = await asyncio.wait_for(channel.receive(), self.limits.idle_s)
            message = parse_client_message(first)
            if message.kind != "open":
                raise ProtocolError(f"the first message opens the session, not {message.kind!r}")
            session_id = f"live-{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(4)}"
            header = self._header(message, session_id)
        except (asyncio.TimeoutError, Disconnected, ProtocolError) as error:
            text = (
                f"no open within {self.limits.idle_s:g} s" if isinstance(error, asyncio.TimeoutError) else str(error)
            )
            await _refuse(channel, text or "the client left", 1008)
            return None

        outbox = _Outbox(self.limits.outbox)
        client_tools = ClientTools(outbox.post) if "tools" in message.fields else None
        try:
            backend: ToolBackend = client_tools if client_tools is not None else self.backends(header)
            policy = self.policies(header)
        except Exception as error:  # noqa: BLE001 - a domain that cannot serve, a model that cannot load
            _LOG.exception("session %s could not open", header.id)
            await _refuse(channel, f"the session could not open: {type(error).__name__}: {error}", 1011)
            return None
        speech = LiveSpeech()
        played = Timeline(**{**_fields(header), "events": []})

        def on_event(event: Event) -> None:
            if not outbox.post(event_message(event)):
                session.finish("client_too_slow")

        session = Session(played, policy, self.config, backend, speech, on_event=on_event)
        if hasattr(policy, "on_speech"):  # a model streams each `say` as it is decoded, on the engine's thread
            loop = asyncio.get_running_loop()

            def on_speech(words: str, final: bool) -> None:
                partial = {"kind": "say_partial", "t": session.now(), "text": words, "final": final}
                loop.call_soon_threadsafe(outbox.post, partial)

            policy.on_speech = on_speech
        if client_tools is not None:
            client_tools.now = session.now
        tools = [tool.name for tool in header.tools]
        outbox.post({"kind": "ready", "t": 0.0, "session": header.id, "domain": header.domain, "tools": tools})
        sender = asyncio.create_task(_send_all(channel, outbox, self.limits.send_timeout_s))
        running = asyncio.create_task(session.run())
        await asyncio.sleep(0)  # the session starts its clock and executor before the first chunk is heard
        receiver = asyncio.create_task(self._receive(channel, session, outbox, client_tools is not None, deadline))
        log: SessionLog | None = None
        try:
            await asyncio.wait({running, receiver, sender}, return_when=asyncio.FIRST_COMPLETED)
            if not running.done():
                session.finish("left" if receiver.done() else "client_too_slow")
            log = await running
        except Exception as error:  # noqa: BLE001 - never a traceback to the client
            _LOG.exception("session %s failed", header.id)
            outbox.last({"kind": "error", "t": 0.0, "message": f"the session failed: {type(error).__name__}"})
        finally:
            receiver.cancel()
            await _close_policy(policy)
        ended: dict[str, Any] = {"kind": "ended", "t": session.now(), "reason": log.end_reason if log else "failed"}
        opened = "timeline" in message.fields  # a held-out timeline: its ground truth scores the session
        if log is not None and opened:
            result = score_session(log, self.policy_name)
            ended.update(accurate=result.accurate, failure=result.failure, latency_s=result.latency_s)
        if log is not None and self.record is not None and any(e.kind == "user_chunk" for e in log.timeline.events):
            ended["recorded"] = str(self._record(log, opened, session_id))
        outbox.last(ended)
        outbox.queue.put_nowait(None)
        try:
            await asyncio.wait_for(sender, self.limits.send_timeout_s)
        except Exception:  # noqa: BLE001 - the client is gone or too slow; the session is over
            sender.cancel()
        await channel.close(1000, ended["reason"])
        return log

    async def _receive(
        self, channel: Channel, session: Session, outbox: _Outbox, client_tools: bool, deadline: float
    ) -> None:
        loop = asyncio.get_running_loop()
        while not session.done:
            left = deadline - loop.time()
            try:
                text = await asyncio.wait_for(channel.receive(), min(self.limits.idle_s, max(left, 0.0)))
            except asyncio.TimeoutError:  # not the builtin before Python 3.11
                reason = "time_limit" if left <= self.limits.idle_s else "idle"
                outbox.post({"kind": "error", "t": session.now(), "message": f"session ended: {reason}"})
                session.finish(reason)
                return
            except Disconnected:
                session.finish("left")
                return
            try:
                message = parse_client_message(text)
                self._take(message, session, client_tools)
            except ProtocolError as error:
                outbox.post({"kind": "error", "t": session.now(), "message": str(error)})

    def _take(self, message: ClientMessage, session: Session, client_tools: bool) -> None:
        fields = message.fields
        if message.kind == "user_chunk":
            event: Event = fields["event"]
            session.hear(SpokenChunk(event.id, 0.0, event.text or "", bool(event.final), event.revises))
        elif message.kind == "tool_result":
            if not client_tools:
                raise ProtocolError("tool_result: this session's tools run on the server")
            if not session.executor.answer(fields["call_id"], fields["version"], fields["content"], fields["error"]):
                raise ProtocolError(
                    f"tool_result: no call {fields['call_id']!r} (version {fields['version']}) is waiting for a result"
                )
        elif message.kind == "end":
            session.finish("done")
        else:
            raise ProtocolError("open: the session is already open")

    def _record(self, log: SessionLog, has_truth: bool, session_id: str) -> Path:
        timeline = log.timeline
        if not has_truth:
            # What the session did is its ground truth: the calls it ran and the state it left.
            calls = [GroundTruthCall(name, arguments) for name, arguments in executed_calls(timeline)]
            timeline = Timeline(**{**_fields(timeline), "ground_truth": GroundTruth(calls, log.final_state, [])})
        path = self.record / f"{session_id}.jsonl"  # the server's own name: a timeline id comes from data
        write_timelines(path, [timeline])
        return path


def _fields(timeline: Timeline) -> dict[str, Any]:
    return {name: getattr(timeline, name) for name in timeline.__dataclass_fields__}


async def _send_all(channel: Channel, outbox: _Outbox, timeout_s: float) -> None:
    while (message := await outbox.queue.get()) is not None:
        await asyncio.wait_for(channel.send(message), timeout_s)


async def _refuse(channel: Channel, message: str, code: int) -> None:
    try:
        await channel.send(json.dumps({"kind": "error", "t": 0.0, "message": message}))
        await channel.close(code, message[:120])
    except Exception:  # noqa: BLE001 - the client may already be gone
        pass
