"""`clocktune serve` over real sockets: live sessions, client tools, recording, limits and hostile clients."""

import json
import socket
import threading
import time
from dataclasses import replace

import pytest
from websockets.sync.client import connect

from clocktune.actions import Action
from clocktune.runtime.policy import Decision
from clocktune.runtime.policy_factories import policy_factory
from clocktune.serve.app import create_app
from clocktune.serve.live import LiveSessions, ServeLimits
from clocktune.serve.protocol import ProtocolError, parse_client_message
from clocktune.serve.server import ServerThread, is_loopback
from clocktune.timeline.io import read_timelines
from clocktune.timeline.validate import validate_timeline
from data_gen.backends import session_backends

SPEED = 10  # dialogues replayed 10x faster than spoken, so that a session takes a fraction of a second


def _fast(timeline):
    return replace(
        timeline,
        events=[replace(e, t=round(e.t / SPEED, 4)) for e in timeline.events],
        tools=[
            replace(tool, latency=replace(tool.latency, median_s=tool.latency.median_s / SPEED, tail_prob=0.0))
            for tool in timeline.tools
        ],
    )


@pytest.fixture(scope="module")
def dialogues(generated):
    picked = [t for t in generated[0] if t.ground_truth.calls and len(t.events) < 40][:12]
    return [_fast(t) for t in picked]


def _server(dialogues, tmp_path=None, token=None, limits=None, policies=None, name="oracle"):
    sessions = LiveSessions(
        policies or policy_factory("oracle"),
        name,
        backends=session_backends(),
        timelines={t.id: t for t in dialogues},
        record=tmp_path,
        limits=limits or ServeLimits(),
    )
    return ServerThread(create_app(sessions, token=token))


def _socket_url(server, query=""):
    return f"ws://127.0.0.1:{server.port}/session{query}"


class _Reader:
    """Reads a socket's messages on a thread of its own, as a client does while the user speaks."""

    def __init__(self, ws):
        self.ws, self.messages = ws, []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        try:
            for text in self.ws:
                self.messages.append(json.loads(text))
        except Exception:  # noqa: BLE001 - closed
            pass

    def wait_for(self, kind, timeout_s=20.0):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = [m for m in self.messages if m["kind"] == kind]
            if found:
                return found[-1]
            time.sleep(0.01)
        raise AssertionError(f"no {kind!r} within {timeout_s} s; got {[m['kind'] for m in self.messages]}")


def _replay_user_side(ws, timeline):
    """Sends the timeline's user chunks at their recorded times (from now), as a recogniser would."""
    started = time.monotonic()
    for event in timeline.events:
        if event.kind != "user_chunk":
            continue
        time.sleep(max(0.0, started + event.t - time.monotonic()))
        message = {"kind": "user_chunk", "id": event.id, "text": event.text, "final": event.final}
        if event.revises is not None:
            message["revises"] = event.revises
        ws.send(json.dumps(message))


def _play(server, timeline, query=""):
    with connect(_socket_url(server, query)) as ws:
        reader = _Reader(ws)
        ws.send(json.dumps({"kind": "open", "timeline": timeline.id}))
        assert reader.wait_for("ready")["tools"] == [tool.name for tool in timeline.tools]
        _replay_user_side(ws, timeline)
        answers = sum(1 for e in timeline.events if e.kind == "say" and e.final)
        deadline = time.monotonic() + 20
        while sum(1 for m in reader.messages if m["kind"] == "say" and m.get("final")) < answers:
            assert time.monotonic() < deadline, [m["kind"] for m in reader.messages]
            time.sleep(0.01)
        ws.send(json.dumps({"kind": "end"}))
        ended = reader.wait_for("ended")
        reader.thread.join(timeout=5)
    return reader.messages, ended


def test_a_held_out_dialogue_played_over_a_socket_completes_its_task_and_is_recorded_as_a_valid_timeline(
    dialogues, tmp_path
):
    timeline = dialogues[0]
    with _server(dialogues, tmp_path) as server:
        messages, ended = _play(server, timeline)
    assert ended["reason"] == "done" and ended["accurate"] is True, ended
    kinds = [m["kind"] for m in messages]
    assert kinds[0] == "ready" and kinds[-1] == "ended"
    # The log streamed in order, every message stamped with the session clock.
    times = [m["t"] for m in messages if m["kind"] not in ("ready", "ended")]
    assert times == sorted(times)
    calls = [m for m in messages if m["kind"] == "tool_call"]
    assert {c["name"] for c in calls} >= {call.name for call in timeline.ground_truth.calls}
    recorded = read_timelines(ended["recorded"])
    assert len(recorded) == 1 and validate_timeline(recorded[0]) == []
    assert recorded[0].ground_truth == timeline.ground_truth  # a held-out dialogue keeps its own truth
    streamed = [m for m in messages if m["kind"] not in ("ready", "ended", "error")]
    assert [e.kind for e in recorded[0].events] == [m["kind"] for m in streamed]


def test_messages_are_checked_against_the_timelines_schema_and_name_the_field():
    with pytest.raises(ProtocolError, match="user_chunk.final"):
        parse_client_message(json.dumps({"kind": "user_chunk", "id": "u1", "text": "hi", "final": "yes"}))
    with pytest.raises(ProtocolError, match="unknown field"):
        parse_client_message(json.dumps({"kind": "user_chunk", "id": "u1", "text": "hi", "final": True, "x": 1}))
    with pytest.raises(ProtocolError, match="not a JSON message"):
        parse_client_message("[" * 10_000 + "]" * 10_000)
    with pytest.raises(ProtocolError, match="not a JSON message"):
        parse_client_message('{"kind": "tool_result", "call_id": "c1", "content": NaN}')
    with pytest.raises(ProtocolError, match="over the limit"):
        parse_client_message(json.dumps({"kind": "user_chunk", "text": "a" * 1_000_001}))
    with pytest.raises(ProtocolError, match="open.tools"):
        parse_client_message(json.dumps({"kind": "open", "tools": [{"name": "f"}]}))
    message = parse_client_message(json.dumps({"kind": "user_chunk", "id": "u2", "text": "so", "final": False}))
    assert message.fields["event"].text == "so"


class _ClientToolAgent:
    """Calls the client's ``lookup`` tool as soon as it hears "weather", and answers with what the tool said."""

    name = "client_tool_agent"
    io_bound = False

    def __init__(self, timeline):
        self.seen, self.called, self.answered = [], False, False

    def observe(self, events):
        self.seen.extend(events)
        return 0

    def act(self, t):
        heard = " ".join(e.text for e in self.seen if e.kind == "user_chunk")
        final = any(e.kind == "user_chunk" and e.final for e in self.seen)
        result = next((e for e in self.seen if e.kind == "tool_result"), None)
        if "weather" in heard and not self.called:
            self.called = True
            return Decision(Action("tool_call", call_id="c1", name="lookup", arguments={"city": "Oslo"}), 5)
        if final and result is not None and not self.answered:
            self.answered = True
            return Decision(Action("say", text=f"It is {result.content['sky']}.", final=True), 5)
        return Decision(Action("wait"), 1)

    def close(self):
        pass


LOOKUP = {
    "name": "lookup",
    "description": "Weather of a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    "side_effect": False,
}


def test_a_clients_own_tool_is_called_before_the_user_finishes_and_its_answer_reaches_the_reply(tmp_path):
    with _server([], tmp_path, policies=_ClientToolAgent, name="client_tool_agent") as server:
        with connect(_socket_url(server)) as ws:
            reader = _Reader(ws)
            ws.send(json.dumps({"kind": "open", "tools": [LOOKUP]}))
            reader.wait_for("ready")
            ws.send(json.dumps({"kind": "user_chunk", "id": "u1", "text": "what is the weather", "final": False}))
            request = reader.wait_for("tool_request")
            assert request["name"] == "lookup" and request["arguments"] == {"city": "Oslo"}
            # Not yet final: the call went out while the user was still speaking.
            assert not any(m["kind"] == "user_chunk" and m.get("final") for m in reader.messages)
            stale = {"kind": "tool_result", "call_id": "c9", "version": 0, "content": {}}
            ws.send(json.dumps(stale))
            assert "no call 'c9'" in reader.wait_for("error")["message"]
            answer = {
                "kind": "tool_result",
                "call_id": "c1",
                "version": request["version"],
                "content": {"sky": "sunny"},
            }
            ws.send(json.dumps(answer))
            ws.send(json.dumps({"kind": "user_chunk", "id": "u2", "text": "in Oslo", "final": True}))
            say = reader.wait_for("say")
            assert say["text"] == "It is sunny." and say["final"]
            ws.send(json.dumps({"kind": "end"}))
            ended = reader.wait_for("ended")
    recorded = read_timelines(ended["recorded"])[0]
    assert validate_timeline(recorded) == []
    assert [(c.name, c.arguments) for c in recorded.ground_truth.calls] == [("lookup", {"city": "Oslo"})]


def _raw_upgrade(port, headers=""):
    """A raw TCP connection that has completed the WebSocket handshake."""
    raw = socket.create_connection(("127.0.0.1", port))
    raw.sendall(
        (
            f"GET /session HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{headers}\r\n"
        ).encode()
    )
    assert b"101" in raw.recv(4096).split(b"\r\n")[0]
    return raw


def test_hostile_clients_get_errors_and_an_honest_session_beside_them_is_unaffected(dialogues, tmp_path):
    timeline = dialogues[1]
    limits = ServeLimits(idle_s=1.5)
    with _server(dialogues, tmp_path, token="s3cret", limits=limits) as server:
        _, alone = _play(server, timeline, "?token=s3cret")
        alone_log = read_timelines(alone["recorded"])[0]

        errors = []

        def hostile():
            with connect(_socket_url(server, "?token=s3cret"), max_size=None) as ws:
                reader = _Reader(ws)
                ws.send(json.dumps({"kind": "open", "timeline": timeline.id}))
                reader.wait_for("ready")
                for bad in [
                    "not json",
                    json.dumps({"kind": "launch"}),
                    json.dumps({"kind": "tool_result", "call_id": "c77", "version": 0, "content": 1}),
                    "[" * 10_000 + "]" * 10_000,
                    json.dumps({"kind": "user_chunk", "id": "x", "text": "y" * 2_000_000, "final": False}),
                    json.dumps({"kind": "open"}),
                ]:
                    ws.send(bad)
                deadline = time.monotonic() + 10
                while sum(m["kind"] == "error" for m in reader.messages) < 6 and time.monotonic() < deadline:
                    time.sleep(0.01)
                errors.extend(m["message"] for m in reader.messages if m["kind"] == "error")
                # A 10 MB frame is read and refused; the session goes on.
                ws.send("z" * 10_000_000)
                deadline = time.monotonic() + 10
                while sum(m["kind"] == "error" for m in reader.messages) < 7 and time.monotonic() < deadline:
                    time.sleep(0.01)
                errors.append([m for m in reader.messages if m["kind"] == "error"][-1]["message"])

        refused = []

        def unwelcome(query, headers):
            with connect(_socket_url(server, query), additional_headers=headers) as ws:
                reply = json.loads(ws.recv(timeout=5))
                refused.append(reply["message"])

        threads = [threading.Thread(target=hostile)]
        threads.append(threading.Thread(target=unwelcome, args=("?token=wrong", {})))
        threads.append(threading.Thread(target=unwelcome, args=("?token=s3cret", {"Origin": "http://evil.example"})))
        for thread in threads:
            thread.start()
        # A byte a second: the session it opens is ended at the idle limit, with an error, and nothing else waits.
        slow = _raw_upgrade(server.port, "Authorization: Bearer s3cret\r\n")
        slow.sendall(b"\x81")
        _, beside = _play(server, timeline, "?token=s3cret")
        for thread in threads:
            thread.join(timeout=30)
        slow.settimeout(10)
        told = slow.recv(4096)
        slow.close()
    assert b"no open within 1.5 s" in told  # the byte-a-second client was ended at the idle limit
    assert len(errors) == 7, errors
    assert all("Traceback" not in error for error in errors)
    assert any("kind" in e for e in errors) and any("run on the server" in e for e in errors)
    assert any("over the limit" in e for e in errors) and any("already open" in e for e in errors)
    assert len(refused) == 2 and {"token" in r for r in refused} == {True, False}  # one for each
    assert any("origin 'http://evil.example'" in r for r in refused)
    beside_log = read_timelines(beside["recorded"])[0]
    assert beside["accurate"] is True
    # On the wall clock how many waits a session logs depends on when events arrive (real time): every other action,
    # its arguments and words, must be the same as alone.
    actions = lambda log: [  # noqa: E731
        (e.kind, e.name, e.arguments, e.text) for e in log.events if e.source == "agent" and e.kind != "wait"
    ]
    assert actions(beside_log) == actions(alone_log)


def test_a_silent_client_is_ended_at_the_idle_limit_with_an_error(dialogues):
    with _server(dialogues, limits=ServeLimits(idle_s=0.5)) as server:
        with connect(_socket_url(server)) as ws:
            reader = _Reader(ws)
            ws.send(json.dumps({"kind": "open", "timeline": dialogues[0].id}))
            ended = reader.wait_for("ended", timeout_s=10)
    assert ended["reason"] == "idle"
    assert any(m["kind"] == "error" and "idle" in m["message"] for m in reader.messages)


def test_only_loopback_binds_count_as_loopback():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.4") and not is_loopback("example.com")


def test_live_sessions_of_a_model_share_the_engines_forwards_and_each_ends_cleanly(dialogues, tiny_chatml_model):
    from clocktune.clock import DeviceProfile
    from clocktune.runtime.session import SessionConfig

    # Random weights write valid actions for ever under the grammar: a short turn limit ends each session.
    factory = policy_factory("tiny", loaded=tiny_chatml_model, batch_size=8)
    sessions = LiveSessions(
        factory,
        "tiny",
        backends=session_backends(),
        timelines={t.id: t for t in dialogues},
        config=SessionConfig(max_notices=4, turn_limit_s=1.0, device=DeviceProfile("slow", 1e4, 50.0, 0.0)),
    )
    ended = []

    def client(timeline):
        with connect(_socket_url(server)) as ws:
            reader = _Reader(ws)
            ws.send(json.dumps({"kind": "open", "timeline": timeline.id}))
            reader.wait_for("ready")
            _replay_user_side(ws, timeline)
            ended.append(reader.wait_for("ended", timeout_s=60))

    with ServerThread(create_app(sessions)) as server:
        threads = [threading.Thread(target=client, args=(t,)) for t in dialogues[:6]]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=90)
    assert len(ended) == 6 and {e["reason"] for e in ended} <= {"timeout", "gave_up"}
    stats = factory.engine.stats
    assert max(stats.batch_sizes) > 1  # live sessions deciding together shared a forward
    assert stats.rows / stats.forwards > 1.0


def test_serve_refuses_a_public_bind_without_a_token_before_loading_anything(capsys, monkeypatch):
    from clocktune.cli import main

    monkeypatch.delenv("CLOCKTUNE_SERVE_TOKEN", raising=False)
    assert main(["serve", "--model", "runs/no-such-checkpoint", "--domain", "smart_home", "--host", "0.0.0.0"]) == 2
    assert "is not loopback: give --token" in capsys.readouterr().err


def test_chat_speaks_each_typed_line_word_by_word_and_prints_the_agents_timeline(dialogues):
    import io

    from clocktune.serve.terminal import chat

    timeline = dialogues[0]
    spoken = " ".join(e.text for e in timeline.events if e.kind == "user_chunk" and not e.revises)
    printed = []

    class NoTools:
        sequential = False

        def state(self):
            return {}

    from clocktune.serve.live import LiveDomain

    domain = LiveDomain("weather", [], lambda rng: {})
    lookup_agent = LiveSessions(_ClientToolAgent, "agent", domain=domain, backends=lambda timeline: NoTools())
    with ServerThread(create_app(lookup_agent)) as server:
        chat(_socket_url(server), words_per_s=50.0, lines=io.StringIO(spoken + "\n"), out=printed.append)
    assert printed[0].startswith("session live-") and "(weather)" in printed[0]
    heard = [line for line in printed if "  you  " in line]
    assert len(heard) == len(spoken.split()) and heard[-1].endswith("[final]")
    assert printed[-1].split()[1:3] == ["ended", "done"]


def test_a_recorded_session_is_written_inside_the_record_folder_whatever_its_timeline_is_named(dialogues, tmp_path):
    from pathlib import Path

    named = replace(dialogues[2], id="../../escaped")  # a timeline id is data, not a path
    record = tmp_path / "deep" / "record"
    with _server([named], record) as server:
        _, ended = _play(server, named)
    assert Path(ended["recorded"]).parent == record and Path(ended["recorded"]).exists()
    assert not list(tmp_path.rglob("escaped*"))
