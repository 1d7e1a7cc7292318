"""A pipecat processor that runs a clocktune session in place of the LLM: it acts while the user is still speaking.

pipecat's LLM services act on final transcripts (its eager end-of-turn cancels a speculative response that holds a
tool call). :class:`ClocktuneProcessor` takes every transcription frame of any speech-to-text service, interim ones
included, as the user's recogniser updates of a clocktune session (``clocktune serve``'s protocol, docs/serving.md),
and turns the session's log into pipecat frames as it is written:

=====================================  ==============================================================================
clocktune event                        pipecat frames pushed downstream
=====================================  ==============================================================================
``tool_call``                          ``FunctionCallsStartedFrame``, ``FunctionCallInProgressFrame`` (the call runs
                                       now, often before the ``TranscriptionFrame`` that ends the utterance)
``tool_modify``                        ``FunctionCallCancelFrame`` of the running version, then the new version's
                                       ``FunctionCallInProgressFrame`` (``tool_call_id`` is ``call_id.vN``)
``tool_cancel``                        ``FunctionCallCancelFrame``
``tool_result``                        ``FunctionCallResultFrame``
``say_partial``, ``say``               ``LLMFullResponseStartFrame`` with its first words, an ``LLMTextFrame`` of the
                                       new words as each is decoded, ``LLMFullResponseEndFrame`` when it is complete
=====================================  ==============================================================================

Tools run on the server (its ``--domain``, or a ``--data`` timeline's), or in the pipeline: pass ``functions``
(name to ``async def handler(arguments) -> result``) with their schemas in ``open`` (``{"tools": [...]}``), and a
``tool_request`` runs the handler and answers the session.

Interim transcriptions hold the utterance so far (as speech-to-text services send them); the processor sends only
the words that are new, and a change inside the last words sent as that chunk's revision, as a recogniser does.

Use with a running server (``clocktune serve``), or :meth:`ClocktuneProcessor.serving` for one in this process.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from pipecat.frames.frames import (
    CancelFrame,
    EndFrame,
    Frame,
    FunctionCallCancelFrame,
    FunctionCallFromLLM,
    FunctionCallInProgressFrame,
    FunctionCallResultFrame,
    FunctionCallsStartedFrame,
    InterimTranscriptionFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    StartFrame,
    TranscriptionFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from websockets.asyncio.client import connect

__all__ = ["ClocktuneProcessor", "UtteranceChunks"]

Handler = Callable[[dict[str, Any]], Awaitable[Any]]


class UtteranceChunks:
    """Turns cumulative transcripts of one utterance into clocktune's recogniser updates (new words, revisions)."""

    def __init__(self) -> None:
        self.count = 0
        self._reset()

    def _reset(self) -> None:
        self.sent: list[str] = []
        self.last: tuple[str, int] | None = None  # the last chunk's id and how many words it holds

    def update(self, transcript: str, final: bool) -> list[dict[str, Any]]:
        """The ``user_chunk`` messages that bring the session up to ``transcript``.

        Args:
            transcript: The utterance so far, as the speech-to-text service heard it.
            final: Whether it ends the utterance.

        Returns:
            Zero or one messages (a final transcript always gives one).
        """
        words = transcript.split()
        messages = []
        before = len(self.sent) - (self.last[1] if self.last else 0)
        if self.last is not None and words[: len(self.sent)] != self.sent and words[:before] == self.sent[:before]:
            revised = words[before:]
            if revised or final:
                messages.append(self._chunk(revised, final, revises=self.last[0]))
                self.sent = words
        elif len(words) > len(self.sent) or final:
            messages.append(self._chunk(words[len(self.sent) :], final))
            self.sent = words
        if final:
            self._reset()
        return messages

    def _chunk(self, words: list[str], final: bool, revises: str | None = None) -> dict[str, Any]:
        self.count += 1
        chunk_id = f"p{self.count}"
        self.last = (chunk_id, len(words))
        message = {"kind": "user_chunk", "id": chunk_id, "text": " ".join(words), "final": final}
        if revises is not None:
            message["revises"] = revises
        return message


class ClocktuneProcessor(FrameProcessor):
    """Runs a clocktune session over ``url`` in place of a pipeline's LLM (see the module docstring).

    Args:
        url: The session socket of a ``clocktune serve`` (``ws://HOST:PORT/session``, ``?token=`` if needed).
        open: The session's ``open`` message fields: ``timeline``, ``tools`` or ``seed`` (docs/serving.md).
        functions: Handlers of the client's own tools (those declared in ``open["tools"]``), by name.
        **kwargs: Passed to pipecat's ``FrameProcessor``.
    """

    def __init__(
        self,
        url: str,
        open: dict[str, Any] | None = None,  # noqa: A002 - the protocol's word
        functions: dict[str, Handler] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.url = url
        self.open_fields = dict(open or {})
        self.functions = dict(functions or {})
        self.chunks = UtteranceChunks()
        self.ended: dict[str, Any] | None = None
        self._socket: Any = None
        self._reader: asyncio.Task | None = None
        self._calls: dict[str, tuple[str, str, Any]] = {}  # call id -> (pipecat id, name, arguments)
        self._versions: dict[str, int] = {}
        self._spoken: str | None = None  # the words of the say being streamed, or None between says

    @classmethod
    def serving(cls, sessions: Any, **kwargs: Any) -> tuple[ClocktuneProcessor, Any]:
        """A processor and a server in this process (``clocktune.serve.server.ServerThread``, started).

        Args:
            sessions: The live sessions to serve (``clocktune.serve.live.LiveSessions``).
            **kwargs: Passed to the processor.

        Returns:
            ``(processor, server)``; stop the server when the pipeline is done.
        """
        from clocktune.serve.app import create_app
        from clocktune.serve.server import ServerThread

        server = ServerThread(create_app(sessions)).start()
        return cls(f"ws://127.0.0.1:{server.port}/session", **kwargs), server

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        """Opens the session on ``StartFrame``, speaks transcriptions into it, ends it on ``EndFrame``."""
        await super().process_frame(frame, direction)
        if isinstance(frame, StartFrame):
            await self._open()
        elif isinstance(frame, TranscriptionFrame | InterimTranscriptionFrame):
            final = isinstance(frame, TranscriptionFrame)
            for message in self.chunks.update(frame.text, final):
                await self._send(message)
        elif isinstance(frame, EndFrame | CancelFrame):
            await self._close()
        await self.push_frame(frame, direction)

    async def _open(self) -> None:
        self._socket = await connect(self.url, open_timeout=30)
        await self._send({"kind": "open", **self.open_fields})
        self._reader = self.create_task(self._read())

    async def _send(self, message: dict[str, Any]) -> None:
        if self._socket is not None:
            await self._socket.send(json.dumps(message))

    async def _close(self) -> None:
        if self._socket is None:
            return
        try:
            await self._send({"kind": "end"})
            if self._reader is not None:
                await asyncio.wait_for(asyncio.shield(self._reader), 30)
        except Exception:  # noqa: BLE001 - the server is gone; nothing is left to end
            pass
        await self._socket.close()
        self._socket = None

    async def _read(self) -> None:
        async for text in self._socket:
            message = json.loads(text)
            if message["kind"] == "ended":
                self.ended = message
                return
            for frame in await self._frames(message):
                await self.push_frame(frame)

    async def _frames(self, message: dict[str, Any]) -> list[Frame]:
        kind = message["kind"]
        if kind == "tool_call":
            return self._started(message["call_id"], message["name"], message["arguments"])
        if kind == "tool_modify":
            cancelled = self._cancelled(message["call_id"])
            name = self._calls[message["call_id"]][1] if message["call_id"] in self._calls else "unknown"
            return cancelled + self._started(message["call_id"], name, message["arguments"])
        if kind == "tool_cancel":
            return self._cancelled(message["call_id"])
        if kind == "tool_result" and message["call_id"] in self._calls:
            pipecat_id, name, arguments = self._calls[message["call_id"]]
            result = {"error": message["error"]} if message.get("error") else message.get("content")
            return [FunctionCallResultFrame(name, pipecat_id, arguments, result, error=message.get("error"))]
        if kind == "say_partial":
            return self._spoken_delta(message["text"])
        if kind == "say":
            frames = self._spoken_delta(message["text"]) + [LLMFullResponseEndFrame()]
            self._spoken = None
            return frames
        if kind == "tool_request":
            self.create_task(self._run_function(message))
        return []

    def _spoken_delta(self, text: str) -> list[Frame]:
        # A say streams as LLM text frames: the response starts with its first words, each frame adds the new ones.
        frames: list[Frame] = []
        if self._spoken is None:
            frames.append(LLMFullResponseStartFrame())
            self._spoken = ""
        if text.startswith(self._spoken) and len(text) > len(self._spoken):
            frames.append(LLMTextFrame(text[len(self._spoken) :]))
            self._spoken = text
        return frames

    def _started(self, call_id: str, name: str, arguments: Any) -> list[Frame]:
        version = self._versions[call_id] = self._versions.get(call_id, -1) + 1
        pipecat_id = f"{call_id}.v{version}"
        self._calls[call_id] = (pipecat_id, name, arguments)
        call = FunctionCallFromLLM(function_name=name, tool_call_id=pipecat_id, arguments=arguments, context=None)
        return [
            FunctionCallsStartedFrame(function_calls=[call]),
            FunctionCallInProgressFrame(name, pipecat_id, arguments),
        ]

    def _cancelled(self, call_id: str) -> list[Frame]:
        if call_id not in self._calls:
            return []
        pipecat_id, name, _ = self._calls[call_id]
        return [FunctionCallCancelFrame(function_name=name, tool_call_id=pipecat_id)]

    async def _run_function(self, request: dict[str, Any]) -> None:
        handler = self.functions.get(request["name"])
        answer: dict[str, Any] = {"kind": "tool_result", "call_id": request["call_id"], "version": request["version"]}
        if handler is None:
            answer["error"] = f"no handler for {request['name']} in this pipeline"
        else:
            try:
                answer["content"] = await handler(request["arguments"])
            except Exception as error:  # noqa: BLE001 - the tool's failure is the call's error result
                answer["error"] = f"{type(error).__name__}: {error}"
        await self._send(answer)
