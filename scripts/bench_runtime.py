"""Benchmark of the runtime: every scripted policy on generated dialogues, and many concurrent sessions.

    python scripts/bench_runtime.py                      # 500 dialogues x 5 seeds, then 10,000 concurrent sessions
    python scripts/bench_runtime.py --dialogues 100 --seeds 1 --sessions 1000   # quick

Part 1 plays 500 dialogues per seed at the default operating point (configs/datagen/default.yaml: ~3 words/s,
~600 ms median tools, the h200-3b device profile) under sync, sync_parallel, async, speculative and oracle, and
prints accuracy, median response latency and the speedups over sync and over sync_parallel, per seed and over
all seeds; then the same with 20% injected tool failures (side-effect violations must stay 0). Part 2 runs
N oracle sessions concurrently on one virtual clock and reports sessions per wall second and how much faster
than real time the simulated sessions ran.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from clocktune.runtime.play import PolicyRun, run_policy
from clocktune.runtime.report import format_intervals, summarize_runs
from clocktune.runtime.scripted import SCRIPTED_POLICIES, ScriptedPolicy
from clocktune.runtime.session import Session, SessionConfig
from clocktune.runtime.virtual_clock import run_virtual
from data_gen.backends import make_backend
from data_gen.config import GeneratorConfig
from data_gen.dialogues import select_domains
from data_gen.generate import generate_dialogue


def _dialogues(count: int, seed: int) -> list:
    config = GeneratorConfig()
    domains = select_domains(config)
    return [generate_dialogue(index, seed, config, domains) for index in range(count)]


def _policy_runs(timelines: list, config: SessionConfig) -> dict:
    return {
        name: run_policy(name, timelines, lambda t, n=name: ScriptedPolicy(t, n), make_backend, config)
        for name in SCRIPTED_POLICIES
    }


def _latency_table(args: argparse.Namespace) -> None:
    print(f"== {args.dialogues} dialogues per seed, seeds 0..{args.seeds - 1}, default operating point ==")
    header = (
        f"{'seed':>4} {'policy':<14}{'accuracy':>9}{'p50 s':>8}{'vs sync':>9}{'vs sync_par':>12}{'violations':>11}"
    )
    print(header)
    speedups: dict[str, list[float]] = {name: [] for name in SCRIPTED_POLICIES}
    shares = []
    pooled: dict[str, list] = {name: [] for name in SCRIPTED_POLICIES}
    for seed in range(args.seeds):
        runs = _policy_runs(_dialogues(args.dialogues, seed), SessionConfig())
        # Rows read the runs directly: a summary per row would resample every pair for intervals nobody prints.
        for name, run in runs.items():
            pooled[name] += run.results
            versus_sync = run.speedup_over(runs["sync"])
            speedups[name].append(versus_sync)
            print(
                f"{seed:>4} {name:<14}{run.share('accurate'):>9.3f}{run.latency(50):>8.3f}"
                f"{versus_sync:>8.2f}x{run.speedup_over(runs['sync_parallel']):>11.2f}x{run.violations:>11d}"
            )
        summary = summarize_runs(runs["speculative"], runs["sync"], runs["oracle"])
        shares.append(summary["share_of_oracle_reduction"])
        print("\n".join(f"     {line}" for line in format_intervals(summary).splitlines()))
    print("mean speedup_p50 over sync across seeds:")
    for name, values in speedups.items():
        print(f"  {name:<14}{statistics.fmean(values):.3f}x  (min {min(values):.3f}, max {max(values):.3f})")
    print(f"  speculative achieves {statistics.fmean(shares):.1%} of the oracle's latency reduction")
    # One draw of 500 dialogues moves the median ratio by several percent; all seeds together pin it down.
    pooled_runs = {name: PolicyRun(name, results, []) for name, results in pooled.items()}
    print(f"pooled over seeds: {format_intervals(summarize_runs(pooled_runs['speculative'], pooled_runs['sync']))}")

    print("== 20% injected tool failures, seed 0 ==")
    runs = _policy_runs(_dialogues(args.dialogues, 0), SessionConfig(failure_rate=0.2))
    for name, run in runs.items():
        summary = summarize_runs(run, runs["sync"])
        ended = sum(r.end_reason == "done" for r in run.results)
        print(
            f"  {name:<14} accuracy {summary['accuracy']:.3f}  sessions ended {ended}/{len(run.results)}  "
            f"side_effect_violations {summary['side_effect_violations']}"
        )


def _concurrency(args: argparse.Namespace) -> None:
    timelines = _dialogues(args.sessions, 1)
    config = SessionConfig()

    async def main() -> list:
        return await asyncio.gather(
            *(Session(t, ScriptedPolicy(t, "oracle"), config, make_backend(t)).run() for t in timelines)
        )

    started = time.perf_counter()
    logs = run_virtual(main())
    wall = time.perf_counter() - started
    simulated = sum(log.timeline.events[-1].t for log in logs)
    done = sum(log.end_reason == "done" for log in logs)
    print(f"== {args.sessions} concurrent oracle sessions on one virtual clock ==")
    print(f"  finished {done}/{len(logs)} in {wall:.1f} s wall: {len(logs) / wall:,.0f} sessions/s")
    print(f"  {simulated:,.0f} simulated session-seconds: {simulated / wall:,.0f}x real time")


def main() -> None:
    """Runs both parts and prints their tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dialogues", type=int, default=500)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--sessions", type=int, default=10_000)
    args = parser.parse_args()
    _latency_table(args)
    _concurrency(args)


if __name__ == "__main__":
    main()
