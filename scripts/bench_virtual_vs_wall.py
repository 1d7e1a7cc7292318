"""Benchmark: does the virtual clock, charged with a profile measured on this device, predict the wall clock?

    python scripts/bench_virtual_vs_wall.py --model runs/demo/checkpoint --data runs/demo/data/eval/data

In one process: measures the checkpoint's device profile (``clocktune profile``), then plays the same held-out
dialogues with the model as the policy twice, one session at a time: on the virtual clock charged with the measured
profile, and on the wall clock, where the user's speech is replayed in real time and the model's compute takes what
it takes. Prints both median response latencies (end of speech to the answer's first words), their ratio, the per-
dialogue differences, and on how many dialogues the model took the same actions under both clocks (the clock tokens
it reads differ a little, so its decisions can too). Last, it times one decoded token on the main thread and in a
worker thread.
"""

from __future__ import annotations

import argparse
import statistics
import time

from clocktune.rendered_dataset import load_timeline_files
from clocktune.runtime.clocks import WallClock
from clocktune.runtime.device_profiles import measure_device_profile
from clocktune.runtime.incremental import measure_rates
from clocktune.runtime.play import run_policy
from clocktune.runtime.policy_factories import load_policy_model, policy_factory
from clocktune.runtime.session import SessionConfig
from data_gen.backends import make_backend


def _decode_ms_in_worker_thread(model) -> float:
    import threading

    result = []
    worker = threading.Thread(target=lambda: result.append(measure_rates(model).decode_tokens_per_s))
    worker.start()
    worker.join()
    return 1000 / result[0]


def _actions(log) -> list[tuple[str, str | None]]:
    return [(e.kind, e.name) for e in log.timeline.events if e.source == "agent" and e.kind != "wait"]


def main() -> None:
    """Measures the profile, runs both clocks and prints the comparison."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a checkpoint folder")
    parser.add_argument("--data", required=True, help="held-out timelines")
    parser.add_argument("--dialogues", type=int, default=10)
    args = parser.parse_args()

    timelines = load_timeline_files([args.data])[: args.dialogues]
    model, tokenizer = load_policy_model(args.model)
    profile = measure_device_profile(model, "measured")
    print(
        f"measured: prefill {profile.prefill_tokens_per_s:,.0f} tokens/s, decode {profile.decode_tokens_per_s:.1f}"
        f" tokens/s, overhead {profile.action_overhead_s:.4f} s per action"
    )
    factory = policy_factory("model", loaded=(model, tokenizer))
    runs, seconds = {}, {}
    for clock, config in (("virtual", SessionConfig(device=profile)), ("wall", SessionConfig(clock=WallClock()))):
        started = time.perf_counter()
        runs[clock] = run_policy(clock, timelines, factory, make_backend, config, concurrency=1)
        seconds[clock] = time.perf_counter() - started
    virtual, wall = runs["virtual"], runs["wall"]
    print(f"{len(timelines)} dialogues, one session at a time; latency to the answer's first words")
    for clock, run in runs.items():
        print(
            f"  {clock:<8} p50 {run.latency(50):.3f} s  p90 {run.latency(90):.3f} s  accuracy "
            f"{run.share('accurate'):.3f}  ({seconds[clock]:.0f} s to run)"
        )
    print(f"  virtual p50 / wall p50: {virtual.latency(50) / wall.latency(50):.3f}")
    same = [i for i, (v, w) in enumerate(zip(virtual.logs, wall.logs, strict=True)) if _actions(v) == _actions(w)]
    differences = [
        virtual.results[i].latency_s - wall.results[i].latency_s
        for i in same
        if virtual.results[i].latency_s is not None and wall.results[i].latency_s is not None
    ]
    print(f"  same actions under both clocks: {len(same)} of {len(timelines)} dialogues")
    if differences:
        print(
            f"  on those, virtual - wall latency: median {statistics.median(differences):+.3f} s, "
            f"largest {max(differences, key=abs):+.3f} s"
        )

    # Last, so that the worker thread's OpenMP team cannot disturb the timed runs.
    main_ms, worker_ms = 1000 / profile.decode_tokens_per_s, _decode_ms_in_worker_thread(model)
    print(
        f"one token after 1,024 of context: {main_ms:.1f} ms on the main thread, {worker_ms:.1f} ms in a worker"
        f" thread ({worker_ms / main_ms:.2f}x; why the wall clock computes on the main thread)"
    )


if __name__ == "__main__":
    main()
