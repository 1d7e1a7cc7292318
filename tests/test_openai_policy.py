"""The OpenAI-compatible endpoint policy against a local mock server (offline, stdlib only)."""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from itertools import pairwise
from typing import Any

import pytest

from clocktune.actions import Action, ActionParseError
from clocktune.runtime.openai_policy import (
    OpenAIChatPolicy,
    action_json,
    openai_policy_factory,
    parse_reply,
    system_prompt,
)
from clocktune.runtime.scoring import score_session
from clocktune.runtime.session import Session, SessionConfig, SessionLog
from clocktune.runtime.virtual_clock import run_virtual
from clocktune.timeline.events import Event, Timeline
from data_gen.backends import make_backend
from data_gen.config import GeneratorConfig
from data_gen.generate import generate_dialogue
from tests.loopback_server import LoopbackServer

MODEL = "mock-model"
KEY = "sk-test"
WAIT = '{"action": "wait"}'

# A responder maps a request body to (status, response): a dict is sent as JSON, bytes as they are.
Responder = Callable[[dict[str, Any]], tuple[int, Any]]


def completion(content: str | None, completion_tokens: int | None = None) -> dict[str, Any]:
    """An OpenAI chat-completion response holding ``content``."""
    reply: dict[str, Any] = {
        "id": "cmpl-1",
        "object": "chat.completion",
        "model": MODEL,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
    }
    if completion_tokens is not None:
        reply["usage"] = {"prompt_tokens": 100, "completion_tokens": completion_tokens, "total_tokens": 100}
    return reply


class MockServer:
    """An OpenAI-compatible ``/v1/chat/completions`` on 127.0.0.1 that answers through ``responder``."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []  # {"path", "headers", "body"} per request received
        self.replies: list[str | None] = []  # the assistant content of every 200 reply sent
        self.responder: Responder = lambda body: (200, completion(WAIT))
        self.delay_s = 0.0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path != "/v1/chat/completions":
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                body = json.loads(raw)
                server.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                if server.delay_s:
                    time.sleep(server.delay_s)
                status, reply = server.responder(body)
                if status == 200 and isinstance(reply, dict) and reply.get("choices"):
                    server.replies.append(reply["choices"][0]["message"]["content"])
                self._send(status, reply)

            def _send(self, status: int, reply: Any) -> None:
                data = reply if isinstance(reply, bytes) else json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
                except OSError:
                    pass  # the client gave up (timeout test)

            def log_message(self, *args: Any) -> None:
                pass

        self.loopback = LoopbackServer(Handler)
        self.httpd, self.base_url = self.loopback.httpd, self.loopback.base_url

    def close(self) -> None:
        self.loopback.close()


@pytest.fixture
def server() -> Iterator[MockServer]:
    mock = MockServer()
    yield mock
    mock.close()


def no_proxy_opener() -> urllib.request.OpenerDirector:
    # A proxy from the environment must not intercept requests to the local mock.
    return urllib.request.build_opener(urllib.request.ProxyHandler({}))


def make_policy(timeline: Timeline, base_url: str, **options: Any) -> OpenAIChatPolicy:
    options.setdefault("opener", no_proxy_opener())
    return OpenAIChatPolicy(timeline, base_url, MODEL, **options)


def play(timeline: Timeline, policy: OpenAIChatPolicy, config: SessionConfig | None = None) -> SessionLog:
    return run_virtual(Session(timeline, policy, config or SessionConfig(), make_backend(timeline)).run())


def heard(body: dict[str, Any]) -> str:
    return "\n".join(message["content"] for message in body["messages"] if message["role"] == "user")


def scripted_agent(timeline: Timeline) -> Responder:
    """A deterministic agent that reads only the request's messages: it waits for the final chunk, issues the
    ground-truth calls one by one, commits when a call changes state, and answers once every result is in."""
    side_effect = {tool.name for tool in timeline.tools if tool.side_effect}
    calls = [(f"c{i + 1}", call.name, call.arguments) for i, call in enumerate(timeline.ground_truth.calls)]
    plan: list[dict[str, Any]] = [
        {"action": "call", "id": call_id, "name": name, "arguments": arguments} for call_id, name, arguments in calls
    ]
    if any(name in side_effect for _, name, _ in calls):
        plan.append({"action": "commit"})
    answer = {"action": "answer", "text": " ".join(timeline.ground_truth.facts) or "Done."}

    def respond(body: dict[str, Any]) -> tuple[int, Any]:
        done = [
            json.loads(line)
            for message in body["messages"]
            if message["role"] == "assistant"
            for line in message["content"].splitlines()
        ]
        acted = [action for action in done if action["action"] != "wait"]
        context = heard(body)
        if "(final)" not in context:
            action: dict[str, Any] = {"action": "wait"}
        elif len(acted) < len(plan):
            action = plan[len(acted)]
        elif all(f"tool result {call_id}:" in context for call_id, _, _ in calls):
            action = answer
        else:
            action = {"action": "wait"}
        return 200, completion(json.dumps(action), completion_tokens=12)

    return respond


def simple_timelines(count: int = 3) -> list[Timeline]:
    """Single-utterance dialogues with at most two calls, at least one of them committing a write."""
    picked: list[Timeline] = []
    for index in range(40):
        timeline = generate_dialogue(index, 0, GeneratorConfig())
        finals = sum(1 for event in timeline.events if event.kind == "user_chunk" and event.final)
        if finals == 1 and 1 <= len(timeline.ground_truth.calls) <= 2:
            picked.append(timeline)
        if len(picked) >= count and any(tool_writes(t) for t in picked):
            break
    assert any(tool_writes(t) for t in picked), "no generated dialogue with a state-changing call"
    return picked


def tool_writes(timeline: Timeline) -> bool:
    writes = {tool.name for tool in timeline.tools if tool.side_effect}
    return any(call.name in writes for call in timeline.ground_truth.calls)


@pytest.fixture(scope="module")
def timelines() -> list[Timeline]:
    return simple_timelines()


# End to end ---------------------------------------------------------------------------------------------------


def test_end_to_end_against_scripted_endpoint(server: MockServer, timelines: list[Timeline]) -> None:
    for timeline in timelines:
        server.requests.clear()
        server.replies.clear()
        server.responder = scripted_agent(timeline)
        log = play(timeline, make_policy(timeline, server.base_url, api_key=KEY, name="mock"))

        assert log.end_reason == "done" and log.answered
        assert log.notices == 0
        assert log.timeline.teacher == "mock"
        result = score_session(log, "mock")
        assert result.calls_ok and result.state_ok and result.answer_ok

        for request in server.requests:
            body = request["body"]
            assert request["path"] == "/v1/chat/completions"
            assert request["headers"]["Authorization"] == f"Bearer {KEY}"
            assert body["model"] == MODEL and body["temperature"] == 0 and body["max_tokens"] == 256
            system = body["messages"][0]
            assert system["role"] == "system" and system == {"role": "system", "content": system_prompt(timeline)}
            assert "exactly ONE JSON object" in system["content"] and "commit" in system["content"]
            assert all(f'"name": "{tool.name}"' in system["content"] for tool in timeline.tools)
            roles = [message["role"] for message in body["messages"][1:]]
            assert roles[0] == "user" and roles[-1] == "user"
            assert all(a != b for a, b in pairwise(roles)), "consecutive same-role messages are merged"
            assert body["messages"][-1]["content"].endswith("your move")

        # The last request's context holds every user chunk, in order, with its time and markers.
        context = heard(server.requests[-1]["body"])
        position = 0
        for event in log.timeline.events:
            if event.kind != "user_chunk":
                continue
            line = f"[t={event.t:.2f}s]{' (revises previous)' if event.revises else ''} {event.text}"
            line += " (final)" if event.final else ""
            found = context.find(line + "\n", position)
            assert found >= position, f"missing or out of order: {line!r}"
            position = found + len(line)
        # Every reply was accepted and logged as the agent event it names, in order.
        agent = [event for event in log.timeline.events if event.source == "agent"]
        assert len(agent) == len(server.replies) == len(server.requests)
        for event, reply in zip(agent, server.replies, strict=True):
            assert action_json(event) == json.dumps(json.loads(reply), ensure_ascii=False)
        kinds = [event.kind for event in agent if event.kind != "wait"]
        expected = ["tool_call"] * len(timeline.ground_truth.calls) + (["commit"] if tool_writes(timeline) else [])
        assert kinds == [*expected, "say"]
        calls = [event.call_id for event in agent if event.kind == "tool_call"]
        assert calls == [f"c{i + 1}" for i in range(len(timeline.ground_truth.calls))]
        # Results went back as user lines naming their call.
        assert all(f"tool result {call_id}: " in context for call_id in calls)


def test_factory_shares_one_opener(server: MockServer, timelines: list[Timeline]) -> None:
    opener = no_proxy_opener()
    factory = openai_policy_factory(server.base_url + "/", MODEL, opener=opener, name="cloud")
    first, second = factory(timelines[0]), factory(timelines[1])
    assert first.opener is second.opener is opener
    assert first.name == "cloud" and first.url == server.base_url + "/chat/completions"
    server.responder = scripted_agent(timelines[0])
    log = play(timelines[0], first)
    assert log.end_reason == "done"
    assert all("Authorization" not in request["headers"] for request in server.requests)


# Malformed output -----------------------------------------------------------------------------------------------


def scripted_replies(replies: list[tuple[int, Any]], before_final: tuple[int, Any]) -> Responder:
    """Answers ``before_final`` until the final chunk is heard, then the ``replies`` in turn (the last repeats)."""
    sent = [0]

    def respond(body: dict[str, Any]) -> tuple[int, Any]:
        if "(final)" not in heard(body):
            return before_final
        reply = replies[min(sent[0], len(replies) - 1)]
        sent[0] += 1
        return reply

    return respond


def notices(log: SessionLog) -> list[str]:
    return [event.text or "" for event in log.timeline.events if event.kind == "notice"]


def test_malformed_replies_become_notices(server: MockServer, timelines: list[Timeline]) -> None:
    timeline = timelines[0]
    fenced = '\n```json\n{"action": "answer", "text": "All done."}\n```  \n'
    server.responder = scripted_replies(
        [
            (200, completion("I think I should wait.")),
            (200, completion('{"action": "dance"}')),
            (200, completion('{"action": "call", "id": "c1", "name": "x", "arguments": "[1]"}')),
            (500, {"error": {"message": "boom"}}),
            (200, {"id": "x", "choices": []}),
            (200, b"<html>bad gateway</html>"),
            (200, completion(fenced)),
        ],
        (200, completion(WAIT)),
    )
    config = SessionConfig()
    log = play(timeline, make_policy(timeline, server.base_url), config)

    assert log.end_reason == "done" and log.answered
    assert 6 <= log.notices <= config.max_notices
    invalid = [text for text in notices(log) if text.startswith("invalid action: ")]
    expected = [
        "reply is not one JSON object",
        "unknown action 'dance'",
        "call: arguments must be a JSON object",
        "endpoint error: HTTP 500",
        "endpoint error: response has no choices",
        "endpoint error: response is not JSON",
    ]
    assert len(invalid) == len(expected)
    for text, fragment in zip(invalid, expected, strict=True):
        assert fragment in text
    answer = [event for event in log.timeline.events if event.kind == "say"]
    assert len(answer) == 1 and answer[0].final and answer[0].text == "All done."
    # Rejected outputs leave no assistant message behind, only the notices that name them.
    last = server.requests[-1]["body"]["messages"]
    assert [message["content"] for message in last if message["role"] == "assistant"] == [WAIT] * sum(
        1 for event in log.timeline.events if event.kind == "wait"
    )
    assert "runtime notice: invalid action: endpoint error: HTTP 500" in heard(server.requests[-1]["body"])


@pytest.mark.parametrize(
    "reply",
    [(200, completion("not json")), (500, {"error": "boom"}), (200, {"choices": [{"message": {"content": 3}}]})],
    ids=["garbage", "http-500", "non-text-content"],
)
def test_endless_garbage_gives_up(server: MockServer, timelines: list[Timeline], reply: tuple[int, Any]) -> None:
    server.responder = scripted_replies([reply], reply)
    config = SessionConfig()
    log = play(timelines[0], make_policy(timelines[0], server.base_url), config)
    assert log.end_reason == "gave_up" and not log.answered
    assert log.notices == config.max_notices


def test_unreachable_endpoint_gives_notices() -> None:
    timeline = generate_dialogue(0, 0, GeneratorConfig())
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    policy = make_policy(timeline, f"http://127.0.0.1:{port}/v1", timeout_s=2.0)
    decision = policy.act(0.5)
    assert decision.action is None and decision.tokens == 0
    assert decision.error.startswith("endpoint error: cannot reach")
    log = play(timeline, policy)
    assert log.end_reason == "gave_up" and log.notices == SessionConfig().max_notices
    assert all("endpoint error" in text for text in notices(log) if text.startswith("invalid action"))


def test_stopped_server_gives_notices(timelines: list[Timeline]) -> None:
    mock = MockServer()
    policy = make_policy(timelines[0], mock.base_url)
    assert policy.act(0.0).action == Action("wait")
    mock.close()
    decision = policy.act(1.0)
    assert decision.action is None and decision.error.startswith("endpoint error: ")


def test_timeout_is_an_endpoint_error(server: MockServer, timelines: list[Timeline]) -> None:
    server.delay_s = 0.5
    policy = make_policy(timelines[0], server.base_url, timeout_s=0.1)
    decision = policy.act(0.0)
    assert decision.action is None and decision.tokens == 0
    assert decision.error == "endpoint error: no response within 0.1s"


# The policy on its own --------------------------------------------------------------------------------------------


def chunk(t: float, text: str, final: bool = False, revises: str | None = None) -> Event:
    return Event(f"e{int(t * 10)}", t, "user_chunk", "user", text=text, final=final, revises=revises)


def test_history_and_token_accounting(server: MockServer, timelines: list[Timeline]) -> None:
    policy = make_policy(timelines[0], server.base_url)
    tokens = policy.observe([chunk(0.4, "book a table"), chunk(0.9, "for two", final=True)])
    assert tokens > 0
    call = Action("tool_call", "c1", "search", {"q": {"$ref": "c0.items.0"}})
    assert policy.observe([call.to_event("e2", 1.0)]) == 0
    result = Event("e3", 1.6, "tool_result", "tool", call_id="c1", content={"ok": True})
    failure = Event("e4", 1.7, "tool_result", "tool", call_id="c2", error="timeout")
    notice = Event("e5", 1.8, "notice", "system", text="nothing is pending: act now")
    assert policy.observe([result, failure, notice]) > 0
    assert [message["role"] for message in policy.messages] == ["system", "user", "assistant", "user"]
    assert policy.messages[1]["content"] == "[t=0.40s] book a table\n[t=0.90s] for two (final)\n[t=1.00s] your move"
    assert policy.messages[2]["content"] == (
        '{"action": "call", "id": "c1", "name": "search", "arguments": {"q": {"$ref": "c0.items.0"}}}'
    )
    assert policy.messages[3]["content"] == (
        '[t=1.60s] tool result c1: {"ok": true}\n[t=1.70s] tool result c2: {"error": "timeout"}\n'
        "[t=1.80s] runtime notice: nothing is pending: act now"
    )

    server.responder = lambda body: (200, completion("nope", completion_tokens=7))
    before = json.dumps(policy.messages)
    decision = policy.act(2.0)
    assert decision.action is None and decision.tokens == 7 and "not one JSON object" in decision.error
    assert json.dumps(policy.messages) == before, "a rejected reply's prompt is not kept"
    sent = server.requests[-1]["body"]["messages"]
    assert sent[-1]["content"].endswith("[t=1.80s] runtime notice: nothing is pending: act now\n[t=2.00s] your move")
    assert "Authorization" not in server.requests[-1]["headers"]
    assert policy.requests == 1 and policy.completion_tokens == 7 and policy.prompt_tokens == 100

    # Without usage the token count is estimated at about four characters per token.
    server.responder = lambda body: (200, completion('{"action": "commit"}'))
    decision = policy.act(2.5)
    assert decision.action == Action("commit") and decision.tokens == 2 + len('{"action": "commit"}') // 4

    assert OpenAIChatPolicy.event_line(chunk(0.5, "at eight", revises="e3")) == "[t=0.50s] (revises previous) at eight"


def test_system_prompt_lists_tools_and_writes(timelines: list[Timeline]) -> None:
    timeline = next(t for t in timelines if tool_writes(t))
    prompt = system_prompt(timeline)
    writes = [tool.name for tool in timeline.tools if tool.side_effect]
    assert f"State-changing tools ({', '.join(writes)})" in prompt
    assert '{"$ref": "c1"}' in prompt and "[t=3.20s]" in prompt and "(final)" in prompt
    for tool in timeline.tools:
        line = next(line for line in prompt.splitlines() if line.startswith(f'{{"name": "{tool.name}"'))
        entry = json.loads(line)
        assert entry["parameters"] == tool.parameters and entry["state_changing"] == tool.side_effect


# Parsing ----------------------------------------------------------------------------------------------------------

VALID = [
    ('{"action": "wait"}', Action("wait")),
    ('  {"action":"commit"}\n', Action("commit")),
    (
        '{"action": "call", "id": "c1", "name": "get", "arguments": {"x": {"$ref": "c0.a.1"}}}',
        Action("tool_call", "c1", "get", {"x": {"$ref": "c0.a.1"}}),
    ),
    ('{"action": "modify", "id": "c2", "arguments": {}}', Action("tool_modify", "c2", arguments={})),
    ('{"action": "cancel", "id": "c3"}', Action("tool_cancel", "c3")),
    ('{"action": "say", "text": "One moment."}', Action("say", text="One moment.", final=False)),
    ('```json\n{"action": "answer", "text": "Booked."}\n```', Action("say", text="Booked.", final=True)),
    ('```\n{"action": "wait"}```', Action("wait")),
]


@pytest.mark.parametrize(("reply", "action"), VALID)
def test_parse_valid(reply: str, action: Action) -> None:
    assert parse_reply(reply) == action
    assert parse_reply(action_json(action)) == action


INVALID = [
    ("", "not one JSON object"),
    ("Sure! I'll wait.", "not one JSON object"),
    ('{"action": "wait"} {"action": "commit"}', "not one JSON object"),
    ('Here you go: {"action": "wait"}', "not one JSON object"),
    ('```json\n{"action": "wait"}\n``` and more', "not one JSON object"),
    ('[{"action": "wait"}]', "must be a JSON object"),
    ('{"action": "dance"}', "unknown action 'dance'"),
    ('{"kind": "wait"}', "unknown action None"),
    ('{"action": "call", "id": "c1", "name": "get"}', "missing field(s) ['arguments']"),
    ('{"action": "call", "id": "c1", "name": "get", "arguments": [1]}', "arguments must be a JSON object"),
    ('{"action": "call", "id": 1, "name": "get", "arguments": {}}', "id must be a string"),
    ('{"action": "call", "id": "c 1", "name": "get", "arguments": {}}', "malformed call id"),
    ('{"action": "call", "id": "c1", "name": "", "arguments": {}}', "empty tool name"),
    ('{"action": "cancel"}', "missing field(s) ['id']"),
    ('{"action": "say", "text": 5}', "text must be a string"),
    ('{"action": "answer", "text": "  "}', "text is empty"),
    ('{"action": "answer", "text": "ok", "final": true}', "unexpected field(s) ['final']"),
    ('{"action": "wait", "action": "commit"}', "duplicate key"),
    ('{"action": "call", "id": "c1", "name": "get", "arguments": {"x": NaN}}', "NaN is not valid JSON"),
    ("[" * 10_000, "nested deeper than"),
    ('{"action": "call", "id": "c1", "name": "get", "arguments": ' + "[" * 10_000 + "]" * 10_000 + "}", "deeper"),
]


@pytest.mark.parametrize(("reply", "fragment"), INVALID)
def test_parse_invalid(reply: str, fragment: str) -> None:
    with pytest.raises(ActionParseError) as error:
        parse_reply(reply)
    assert fragment in str(error.value)


def test_action_json_rejects_non_agent_events() -> None:
    with pytest.raises(ValueError):
        action_json(chunk(0.0, "hi"))
