"""Benchmark: `clocktune serve` under N concurrent live sessions over loopback.

    python scripts/bench_serve.py --data runs/demo/data/eval/data --scripted-sessions 200
    python scripts/bench_serve.py --data runs/demo/data/eval/data --model runs/demo/checkpoint --model-sessions 16

The server runs in this process as ``clocktune serve`` runs (uvicorn on the wall clock's loop, the engine's compute
on the main thread, where torch keeps its OpenMP parallelism); the clients run in a child process, so that their work does not share the server's interpreter lock. Each
client opens a held-out timeline (``open.timeline``, cycling through ``--data``) and replays its user side in real
time (``--speed`` faster), reading every message the server sends.

Scripted part (``--model oracle``, the recorded plan; its compute is microseconds): the echo latency of each user
chunk, from the client's send to the client's receipt of the event the session logged for it (the session reads a
chunk at once when its agent is idle, and a scripted agent always is): an upper bound of the server-added latency,
since it includes both sockets and the client's own loop. Also: events lost or reordered (each session's streamed
events against its recorded timeline), recorded sessions that validate, sessions/s and accuracy.

Comparison (``--compare-eval``, with ``--model``): every held-out timeline replayed through the server
(``--model-sessions`` at a time) against ``clocktune eval --clock wall`` on the same dialogues (one session at a
time, its default with a checkpoint): on how many dialogues the two complete the same tasks (both accurate, or both
not).

Model part (``--model CKPT``): the engine's mean batch (rows per forward), accuracy, and the end-of-speech to
first-words p50 live, against the virtual clock's prediction for the same dialogues (charged with a profile measured
here at batch 1, so it predicts a device that serves one session at a time). With ``--one-token-steps`` the same
sessions are served first decoding one token a forward (the grammar's forced tokens not fed with the step before
them, as before jump-forward), for the live latency jump-forward saves under load, in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


async def _client(url: str, timeline: dict, speed: float) -> dict:
    from websockets.asyncio.client import connect

    chunks = [e for e in timeline["events"] if e["kind"] == "user_chunk"]
    answers = sum(1 for e in timeline["events"] if e["kind"] == "say" and e.get("final"))
    sent: list[float] = []
    echoes: list[float] = []
    messages: list[dict] = []
    async with connect(url, max_size=None, open_timeout=60) as socket:
        await socket.send(json.dumps({"kind": "open", "timeline": timeline["id"]}))

        async def read() -> None:
            async for text in socket:
                message = json.loads(text)
                messages.append(message)
                if message["kind"] == "user_chunk":
                    index = sum(1 for m in messages if m["kind"] == "user_chunk") - 1
                    if index < len(sent):
                        echoes.append(time.perf_counter() - sent[index])
                if message["kind"] == "ended":
                    return

        reader = asyncio.create_task(read())
        started = time.perf_counter()
        for event in chunks:
            await asyncio.sleep(max(0.0, started + event["t"] / speed - time.perf_counter()))
            message = {"kind": "user_chunk", "id": event["id"], "text": event["text"], "final": event["final"]}
            if event.get("revises"):
                message["revises"] = event["revises"]
            sent.append(time.perf_counter())
            await socket.send(json.dumps(message))
        deadline = time.perf_counter() + 120
        while sum(1 for m in messages if m["kind"] == "say" and m.get("final")) < answers:
            if reader.done() or time.perf_counter() > deadline:
                break
            await asyncio.sleep(0.01)
        await socket.send(json.dumps({"kind": "end"}))
        await asyncio.wait_for(reader, 120)
    return {"echoes": echoes, "messages": messages}


async def _clients(url: str, timelines: list[dict], sessions: int, speed: float) -> list[dict]:
    jobs = [_client(url, timelines[index % len(timelines)], speed) for index in range(sessions)]
    return await asyncio.gather(*jobs)


def client_main(url: str, data: str, sessions: int, speed: float, out: str, offset: int = 0) -> None:
    """The child process: plays the clients and writes what they saw to ``out``."""
    from clocktune.rendered_dataset import load_timeline_files
    from clocktune.timeline.io import timeline_to_record

    timelines = [timeline_to_record(t) for t in load_timeline_files([data])]
    started = time.perf_counter()
    timelines = timelines[offset:] + timelines[:offset]
    results = asyncio.run(_clients(url, timelines, sessions, speed))
    Path(out).write_text(json.dumps({"seconds": time.perf_counter() - started, "results": results}))


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _serve_and_play(sessions_object, data: str, sessions: int, speed: float, offset: int = 0) -> dict:
    """Serves on this (main) thread, as `clocktune serve` does, while a helper thread runs the client process."""
    from clocktune.serve.app import create_app
    from clocktune.serve.server import serve_alongside

    def clients(port: int) -> dict:
        with tempfile.TemporaryDirectory() as folder:
            out = Path(folder) / "clients.json"
            url = f"ws://127.0.0.1:{port}/session"
            command = [sys.executable, __file__, "--clients", url, "--data", data, "--sessions", str(sessions)]
            command += ["--offset", str(offset), "--speed", str(speed), "--out", str(out)]
            subprocess.run(command, check=True)
            return json.loads(out.read_text())

    return serve_alongside(create_app(sessions_object), clients)


def _check_streams(played: dict) -> tuple[int, int, int, int]:
    """(sessions, lost or reordered, recorded that validate, accurate) of a run."""
    from clocktune.timeline.io import read_timelines
    from clocktune.timeline.validate import validate_timeline

    broken = valid = accurate = 0
    for result in played["results"]:
        messages = result["messages"]
        ended = next((m for m in messages if m["kind"] == "ended"), {})
        streamed = [m for m in messages if m["kind"] not in ("ready", "ended", "error", "tool_request", "say_partial")]
        recorded = read_timelines(ended["recorded"])[0] if ended.get("recorded") else None
        same = recorded is not None and [(e.id, e.kind) for e in recorded.events] == [
            (m["id"], m["kind"]) for m in streamed
        ]
        broken += not same
        valid += recorded is not None and not validate_timeline(recorded)
        accurate += bool(ended.get("accurate"))
    return len(played["results"]), broken, valid, accurate


def main() -> None:
    """Runs the scripted part, then (with ``--model``) the model part, and prints both."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="held-out timelines")
    parser.add_argument("--model", default=None, help="a checkpoint for the model part")
    parser.add_argument("--scripted-sessions", type=int, default=200)
    parser.add_argument("--model-sessions", type=int, default=16)
    parser.add_argument("--speed", type=float, default=1.0, help="replay the user side this many times faster")
    parser.add_argument("--call-bias", type=float, default=1.5, help="the model's call bias (the demo's)")
    parser.add_argument("--compare-eval", action="store_true", help="all of --data: served against eval --clock wall")
    parser.add_argument(
        "--one-token-steps", action="store_true", help="model part: first serve decoding one token a forward"
    )
    parser.add_argument("--clients", default=None, help=argparse.SUPPRESS)  # the child process's mode
    parser.add_argument("--sessions", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--offset", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.clients:
        client_main(args.clients, args.data, args.sessions, args.speed, args.out, args.offset)
        return

    from clocktune.rendered_dataset import load_timeline_files
    from clocktune.runtime.policy_factories import policy_factory
    from clocktune.serve.live import LiveSessions
    from data_gen.backends import session_backends

    timelines = load_timeline_files([args.data])
    by_id = {t.id: t for t in timelines}
    with tempfile.TemporaryDirectory() as record:
        if args.scripted_sessions:
            live = LiveSessions(policy_factory("oracle"), "oracle", session_backends(), None, by_id, Path(record))
            played = _serve_and_play(live, args.data, args.scripted_sessions, args.speed)
            echoes = [1000 * e for result in played["results"] for e in result["echoes"]]
            count, broken, valid, accurate = _check_streams(played)
            print(f"scripted (oracle): {count} concurrent sessions over loopback, {played['seconds']:.1f} s")
            print(
                f"  echo latency (send -> logged event back) p50 {_percentile(echoes, 0.5):.2f} ms,"
                f" p99 {_percentile(echoes, 0.99):.2f} ms, max {max(echoes):.1f} ms over {len(echoes)} chunks"
            )
            print(
                f"  lost or reordered: {broken} sessions; recorded and valid: {valid}/{count}; accurate:"
                f" {accurate}/{count}; {count / played['seconds']:.2f} sessions/s"
            )
        if args.model:
            _model_part(args, timelines, by_id, Path(record))
        if args.model and args.compare_eval:
            _compare_eval(args, timelines, by_id, Path(record))


def _model_part(args: argparse.Namespace, timelines: list, by_id: dict, record: Path) -> None:
    from clocktune.runtime.device_profiles import measure_device_profile
    from clocktune.runtime.model_policy import one_token_a_forward
    from clocktune.runtime.play import run_policy
    from clocktune.runtime.policy_factories import load_policy_model, policy_factory
    from clocktune.runtime.session import SessionConfig
    from clocktune.serve.live import LiveSessions
    from data_gen.backends import make_backend, session_backends

    loaded = load_policy_model(args.model)
    live_p50 = {}
    for early in [False, True] if args.one_token_steps else [True]:
        label = "forced tokens fed early" if early else "one token a forward"
        factory = policy_factory("model", loaded=loaded, call_bias=args.call_bias)
        live = LiveSessions(factory, "model", session_backends(), None, by_id, record / label.replace(" ", "-"))
        with one_token_a_forward(not early):
            played = _serve_and_play(live, args.data, args.model_sessions, args.speed)
        count, broken, valid, accurate = _check_streams(played)
        stats = factory.engine.stats
        ended = [next(m for m in r["messages"] if m["kind"] == "ended") for r in played["results"]]
        latencies = [e["latency_s"] for e in ended if e.get("latency_s") is not None]
        live_p50[label] = statistics.median(latencies) if latencies else float("nan")
        print(f"model, {label}: {count} concurrent sessions over loopback, {played['seconds']:.1f} s")
        print(
            f"  engine: {stats.forwards} forwards ({stats.tokens:,} tokens fed, {stats.seconds:.1f} s in forwards),"
            f" mean batch {stats.rows / max(stats.forwards, 1):.2f}, largest"
            f" {max(stats.batch_sizes, default=0)}; accurate {accurate}/{count}; lost or reordered {broken}; valid"
            f" {valid}/{count}; end of speech -> first words p50 live {live_p50[label]:.2f} s ({len(latencies)}"
            " answered)"
        )
    profile = measure_device_profile(loaded[0], "measured")
    played_ids = [timelines[index % len(timelines)] for index in range(args.model_sessions)]
    virtual = run_policy(
        "model",
        list({t.id: t for t in played_ids}.values()),
        policy_factory("model", loaded=loaded, call_bias=args.call_bias),
        make_backend,
        SessionConfig(device=profile),
        concurrency=len(played_ids),
    )
    predicted = [r.latency_s for r in virtual.results if r.latency_s is not None]
    virtual_p50 = statistics.median(predicted) if predicted else float("nan")
    print(
        f"  end of speech -> first words p50: live {live_p50['forced tokens fed early']:.2f} s, virtual clock's"
        f" prediction {virtual_p50:.2f} s (profile measured here at batch 1: decode"
        f" {profile.decode_tokens_per_s:.1f} tokens/s)"
    )


def _compare_eval(args: argparse.Namespace, timelines: list, by_id: dict, record: Path) -> None:
    from clocktune.runtime.clocks import WallClock
    from clocktune.runtime.play import run_policy
    from clocktune.runtime.policy_factories import load_policy_model, policy_factory
    from clocktune.runtime.session import SessionConfig
    from clocktune.serve.live import LiveSessions
    from data_gen.backends import make_backend, session_backends

    loaded = load_policy_model(args.model)
    factory = policy_factory("model", loaded=loaded, call_bias=args.call_bias)
    live = LiveSessions(factory, "model", session_backends(), None, by_id, record)
    started = time.perf_counter()
    played = _serve_and_play_all(live, args.data, len(timelines), args.model_sessions, args.speed)
    served_s = time.perf_counter() - started
    served = {}
    for result in played["results"]:
        ended = next(m for m in result["messages"] if m["kind"] == "ended")
        timeline_id = next(m for m in result["messages"] if m["kind"] == "ready")["session"].split("-", 3)[-1]
        served[timeline_id] = bool(ended.get("accurate"))
    started = time.perf_counter()
    evaluated = run_policy(
        "model",
        timelines,
        policy_factory("model", loaded=loaded, call_bias=args.call_bias),
        make_backend,
        SessionConfig(clock=WallClock()),
        concurrency=1,
    )
    eval_s = time.perf_counter() - started
    wall = {r.id: r.accurate for r in evaluated.results}
    same = sum(served.get(key) == value for key, value in wall.items())
    print(
        f"served ({args.model_sessions} at a time, {served_s:.0f} s): accurate {sum(served.values())}/{len(served)};"
        f" eval --clock wall (one at a time, {eval_s:.0f} s): accurate {sum(wall.values())}/{len(wall)};"
        f" the same tasks completed on {same}/{len(wall)} dialogues"
    )


def _serve_and_play_all(sessions_object, data: str, count: int, width: int, speed: float) -> dict:
    """Every timeline of ``data`` once, ``width`` client sessions at a time."""
    results, seconds = [], 0.0
    for start in range(0, count, width):
        played = _serve_and_play(sessions_object, data, min(width, count - start), speed, offset=start)
        results += played["results"]
        seconds += played["seconds"]
    return {"results": results, "seconds": seconds}


if __name__ == "__main__":
    main()
