"""`clocktune serve`'s ASGI app: the page at ``/``, one WebSocket per live session at ``/session``, ``/healthz``.

Starlette on uvicorn rather than a bare ``websockets`` server: the same app serves the page, the socket and the
health check, runs under any ASGI server a deployment already has, and is tested with real sockets by uvicorn.

Who may open a session (checked before a session opens; a refusal is an ``error`` message and a close with 1008):

- **Token.** With a token set (``--token`` or ``CLOCKTUNE_SERVE_TOKEN``; required on any bind other than loopback),
  a client gives it as ``?token=`` or ``Authorization: Bearer``; it is compared in constant time.
- **Origin.** A browser always sends ``Origin``; a page of another site must not drive a session in the user's
  browser (cross-site WebSocket hijacking), so an ``Origin`` other than the server's own (or one in
  ``allow_origins``) is refused. A client that is not a browser sends none and is judged by the token alone.
"""

from __future__ import annotations

import hmac
import json
from importlib import resources
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from clocktune.serve.live import Disconnected, LiveSessions

__all__ = ["create_app", "refusal"]


class _SocketChannel:
    """A starlette WebSocket as a live session's channel."""

    def __init__(self, websocket: WebSocket) -> None:
        self.websocket = websocket

    async def receive(self) -> str | bytes:
        message = await self.websocket.receive()
        if message["type"] == "websocket.disconnect":
            raise Disconnected
        text = message.get("text")
        return text if text is not None else message.get("bytes") or b""

    async def send(self, text: str) -> None:
        try:
            await self.websocket.send_text(text)
        except (WebSocketDisconnect, RuntimeError, OSError) as error:  # closed under us
            raise Disconnected from error

    async def close(self, code: int = 1000, reason: str = "") -> None:
        try:
            await self.websocket.close(code, reason)
        except (WebSocketDisconnect, RuntimeError, OSError):  # already closed by the client
            pass


def refusal(websocket: WebSocket, token: str | None, allow_origins: frozenset[str]) -> str | None:
    """Why a WebSocket may not open a session, or ``None``.

    Args:
        websocket: The connecting socket (its headers and query).
        token: The server's token, or ``None`` when none is required.
        allow_origins: Origins (``scheme://host[:port]``) allowed besides the server's own.

    Returns:
        The reason told to the client, or ``None``.
    """
    origin = websocket.headers.get("origin")
    if origin is not None and origin not in allow_origins:
        host = websocket.headers.get("host", "")
        if urlsplit(origin).netloc != host:
            return f"origin {origin!r} may not open sessions on this server"
    if token is not None:
        given = websocket.query_params.get("token")
        if given is None:
            scheme, _, value = websocket.headers.get("authorization", "").partition(" ")
            given = value if scheme.lower() == "bearer" else ""
        if not hmac.compare_digest(given.encode(), token.encode()):
            return "a valid token is required (?token= or Authorization: Bearer)"
    return None


def create_app(sessions: LiveSessions, token: str | None = None, allow_origins: tuple[str, ...] = ()) -> Starlette:
    """The server's ASGI app.

    Args:
        sessions: The live sessions it plays.
        token: Required of every client when set.
        allow_origins: Browser origins allowed besides the server's own.

    Returns:
        The app: ``/`` (the page), ``/session`` (WebSocket), ``/healthz`` (JSON: sessions open and finished).
    """
    allowed = frozenset(allow_origins)
    page = resources.files("clocktune.serve").joinpath("page.html").read_text(encoding="utf-8")

    async def index(request: Request) -> HTMLResponse:
        return HTMLResponse(
            page,
            headers={
                "Content-Security-Policy": "default-src 'self'; connect-src 'self'; "
                "style-src 'self' 'unsafe-inline'; script-src 'self' 'unsafe-inline'"
            },
        )

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"sessions": sessions.active, "finished": sessions.finished})

    async def session(websocket: WebSocket) -> None:
        reason = refusal(websocket, token, allowed)
        await websocket.accept()
        channel = _SocketChannel(websocket)
        if reason is not None:
            try:
                await channel.send(json.dumps({"kind": "error", "t": 0.0, "message": reason}))
            except Disconnected:
                return
            await channel.close(1008, reason[:120])
            return
        await sessions.play(channel)

    return Starlette(
        routes=[Route("/", index), Route("/healthz", health), WebSocketRoute("/session", session)],
    )
