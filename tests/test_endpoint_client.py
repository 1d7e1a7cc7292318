"""The endpoint policy's transport against hostile local servers: redirects, plain http, trickling and slow servers,
deeply nested JSON.

Every server binds 127.0.0.1, answers from bounded loops that also stop when the test closes it, and is shut down
by its test; nothing here contacts another address (the plain-http test checks that no connection is attempted).
"""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from clocktune.actions import ActionParseError
from clocktune.runtime.endpoint_client import is_loopback
from clocktune.runtime.openai_policy import OpenAIChatPolicy, openai_policy_factory, parse_reply
from clocktune.timeline.events import Timeline
from data_gen.config import GeneratorConfig
from data_gen.generate import generate_dialogue
from tests.loopback_server import LoopbackServer
from tests.test_openai_policy import MODEL, WAIT, MockServer, completion, notices, play

KEY = "sk-test"
DEEP = 10_000


class Server:
    """An HTTP server on 127.0.0.1 that records every request and answers through ``answer(handler, server)``."""

    def __init__(self, answer: Callable[[BaseHTTPRequestHandler, Server], None]) -> None:
        self.requests: list[dict[str, Any]] = []  # {"method", "path", "headers" (lower-case names)}
        self.stop = threading.Event()  # set by close(): answers that loop end at once
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {name.lower(): value for name, value in self.headers.items()}
                server.requests.append({"method": self.command, "path": self.path, "headers": headers})
                try:
                    answer(self, server)
                except OSError:
                    pass  # the client gave up

            do_GET = do_POST = _serve

            def log_message(self, *args: Any) -> None:
                pass

        self.loopback = LoopbackServer(Handler)
        self.httpd, self.base_url = self.loopback.httpd, self.loopback.base_url

    def close(self) -> None:
        self.stop.set()
        self.loopback.close()


@pytest.fixture
def servers() -> Iterator[Callable[[Callable[[BaseHTTPRequestHandler, Server], None]], Server]]:
    """``start(answer) -> Server``; every server started is closed after the test."""
    started: list[Server] = []

    def start(answer: Callable[[BaseHTTPRequestHandler, Server], None]) -> Server:
        started.append(Server(answer))
        return started[-1]

    yield start
    for server in started:
        server.close()


def send_json(handler: BaseHTTPRequestHandler, payload: bytes, status: int = 200) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(payload)))
    handler.end_headers()
    handler.wfile.write(payload)


def answer_wait(handler: BaseHTTPRequestHandler, server: Server) -> None:
    send_json(handler, json.dumps(completion(WAIT)).encode())


@pytest.fixture(scope="module")
def timeline() -> Timeline:
    return generate_dialogue(0, 0, GeneratorConfig())


def make_policy(timeline: Timeline, base_url: str, **options: Any) -> OpenAIChatPolicy:
    # No opener given: the policy's own (build_endpoint_opener), which reaches loopback without any proxy.
    return OpenAIChatPolicy(timeline, base_url, MODEL, api_key=KEY, **options)


# Redirects ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [302, 307])
@pytest.mark.parametrize("opener", ["default", "following"])
def test_redirect_to_another_origin_never_carries_the_key(servers, timeline, status: int, opener: str) -> None:
    target = servers(answer_wait)  # another port: another origin, which answers a valid action if asked

    def redirect(handler: BaseHTTPRequestHandler, server: Server) -> None:
        handler.send_response(status)
        handler.send_header("Location", target.base_url + "/chat/completions")
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    origin = servers(redirect)
    options: dict[str, Any] = {}
    if opener == "following":
        # A caller's opener with urllib's default redirect handling (it follows a POST's 302 as a GET).
        options["opener"] = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    decision = make_policy(timeline, origin.base_url, **options).act(0.0)

    assert decision.action is None and decision.error.startswith("endpoint error: ")
    assert "redirect" in decision.error
    assert origin.requests[0]["headers"]["authorization"] == f"Bearer {KEY}"
    assert all("authorization" not in request["headers"] for request in target.requests)
    if opener == "default":
        assert target.requests == [], "the policy's own opener does not follow redirects at all"


# Plain http -----------------------------------------------------------------------------------------------------


@pytest.fixture
def no_connections(monkeypatch) -> list[Any]:
    """Fails any socket connection attempt (and records it), so that a refusal is shown to come first."""
    attempts: list[Any] = []

    def refuse(*args: Any, **kwargs: Any) -> None:
        attempts.append(args)
        raise AssertionError(f"connection attempted: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    return attempts


@pytest.mark.parametrize(
    "base_url",
    ["http://api.example.com/v1", "http://10.0.0.5:8000/v1", "http://[fe80::1]:8000/v1", "http://127.0.0.1.nip.io/v1"],
)
def test_key_over_plain_http_to_a_remote_host_is_refused_before_any_request(
    timeline, no_connections, base_url: str
) -> None:
    with pytest.raises(ValueError, match="plain http"):
        openai_policy_factory(base_url, MODEL, KEY)
    with pytest.raises(ValueError, match="plain http"):
        OpenAIChatPolicy(timeline, base_url, MODEL, api_key=KEY)
    # No key, no secret to leak; or the caller said so: both are built (and not used here, which would connect).
    OpenAIChatPolicy(timeline, base_url, MODEL)
    openai_policy_factory(base_url, MODEL, KEY, allow_insecure_http=True)(timeline)
    assert no_connections == []


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "localhost", "LOCALHOST", "[::1]"])
def test_key_over_plain_http_to_loopback_is_allowed(timeline, no_connections, host: str) -> None:
    assert is_loopback(host.strip("[]").lower())
    OpenAIChatPolicy(timeline, f"http://{host}:8000/v1", MODEL, api_key=KEY)
    OpenAIChatPolicy(timeline, "https://api.example.com/v1", MODEL, api_key=KEY)
    assert no_connections == []


@pytest.mark.parametrize("base_url", ["file:///etc/passwd", "ftp://127.0.0.1/v1", "http:///v1"])
def test_non_http_endpoints_are_refused(timeline, no_connections, base_url: str) -> None:
    with pytest.raises(ValueError, match="must be http"):
        OpenAIChatPolicy(timeline, base_url, MODEL)
    assert no_connections == []


# Deadlines and budgets ------------------------------------------------------------------------------------------


def trickle_body(handler: BaseHTTPRequestHandler, server: Server) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", "100000")
    handler.end_headers()
    for _ in range(300):  # at most a minute, and over as soon as the test closes the server
        if server.stop.wait(0.2):
            return
        handler.wfile.write(b" ")


def trickle_headers(handler: BaseHTTPRequestHandler, server: Server) -> None:
    handler.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
    for _ in range(300):
        if server.stop.wait(0.2):
            return
        handler.wfile.write(b"x")


@pytest.mark.parametrize("answer", [trickle_body, trickle_headers], ids=["body", "headers"])
def test_trickling_server_is_cut_at_the_request_deadline(servers, timeline, answer) -> None:
    server = servers(answer)
    # The socket timeout (5 s) never fires: a byte comes every 0.2 s. Only the wall-clock deadline can end it.
    policy = make_policy(timeline, server.base_url, timeout_s=5.0, request_timeout_s=1.0)
    start = time.monotonic()
    decision = policy.act(0.0)
    elapsed = time.monotonic() - start

    assert decision.action is None and decision.tokens == 0
    assert decision.error == "endpoint error: no complete response within 1s (request deadline)"
    assert 0.9 <= elapsed < 1.75
    assert len(server.requests) == 1


def test_session_budget_ends_a_session_against_a_slow_server() -> None:
    timeline = generate_dialogue(0, 0, GeneratorConfig())
    server = MockServer()
    server.delay_s = 0.4
    try:
        policy = make_policy(timeline, server.base_url, request_timeout_s=10.0, session_budget_s=1.0)
        start = time.monotonic()
        log = play(timeline, policy)
        elapsed = time.monotonic() - start
    finally:
        server.close()

    # Two full replies (0.8 s), then a third request cut at what is left of the budget, then no more requests.
    assert len(server.requests) == 3
    assert policy.requests == 3 and 0.95 <= policy.endpoint_s < 1.3
    assert elapsed < 2.5
    assert log.end_reason == "gave_up" and not log.answered
    spent = [text for text in notices(log) if "budget of 1s is spent" in text]
    assert spent and notices(log)[-1] == spent[-1]
    # Once spent, acting is immediate and still never raises.
    before = time.monotonic()
    decision = policy.act(99.0)
    assert decision.action is None and "budget" in decision.error and time.monotonic() - before < 0.05


# Deeply nested JSON ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reply", ["[" * DEEP, "[" * DEEP + "]" * DEEP, '{"action": "call", "arguments": ' + "[" * DEEP]
)
def test_deeply_nested_reply_is_a_parse_failure(server_deep_replies, timeline, reply: str) -> None:
    with pytest.raises(ActionParseError, match="nested deeper than"):
        parse_reply(reply)
    server = server_deep_replies
    server.responder = lambda body: (200, completion(reply))
    decision = make_policy(timeline, server.base_url).act(0.0)
    assert decision.action is None and decision.error.startswith("reply is not one JSON object")
    assert "nested deeper than" in decision.error


def test_deeply_nested_response_body_is_an_endpoint_error(server_deep_replies, timeline) -> None:
    server = server_deep_replies
    server.responder = lambda body: (200, b"[" * DEEP)
    policy = make_policy(timeline, server.base_url)
    decision = policy.act(0.0)
    assert decision.action is None and decision.tokens == 0
    assert decision.error.startswith("endpoint error: response is not JSON (JSON nested deeper than")
    log = play(timeline, policy)
    assert log.end_reason == "gave_up"


@pytest.fixture
def server_deep_replies() -> Iterator[MockServer]:
    mock = MockServer()
    yield mock
    mock.close()
