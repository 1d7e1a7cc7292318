"""Benchmark: self-speculative decoding of a checkpoint's actions, each drafter against plain decoding, batch 1.

    .venv/bin/python scripts/bench_speculative_decoding.py                       # runs/demo/checkpoint, its eval data
    .venv/bin/python scripts/bench_speculative_decoding.py --model DIR --data DIR --limit 20
    .venv/bin/python scripts/bench_speculative_decoding.py --identity --limit 100  # greedy identity, every drafter
    .venv/bin/python scripts/bench_speculative_decoding.py --identity --first 50 --limit 50  # the second half

Default mode, side by side in one run:

1. costs on this device (random ids, as ``clocktune profile`` measures them): a decode step, ``v(k)`` (a ``k``-token
   verification over a step) and each drafter's ``c`` (a draft token over a step);
2. ``--limit`` held-out dialogues played live by the checkpoint (virtual clock, one session at a time) under plain
   decoding and under each drafter drafting at every step (its raw speed), interleaved session by session: action
   tokens/s (decode time, the prompt forward excluded) and its ratio to plain decoding, acceptance (rate, α, mean
   accepted length, by position), drafter and target ms, rollout sessions/s, and whether every action was the same
   token for token as plain decoding's;
3. the toggle's choice: the cost model (measured costs, measured acceptance) per drafter, and what ``--draft auto``
   picks; then the toggle-driven run of that choice;
4. wall-clock live response latency p50 with and without (``--latency-limit`` dialogues, ``--clock wall``
   semantics: one session at a time, real compute), skipped with ``--no-latency``.

The last line reads ``best: <drafter> <ratio>x`` (action tokens/s against plain decoding).

``--identity``: only the check, on ``--limit`` dialogues for every drafter, with and without the grammar
(``--grammar``); exits 1 on the first divergence, naming it. Checks token-for-token equality of every action.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

import torch

from clocktune.runtime.drafters import CANDIDATES
from clocktune.runtime.speculation_costs import measure_speculation_costs, resolve_drafter
from clocktune.runtime.speculation_runs import first_divergence, live_latency_p50, play_drafters
from clocktune.runtime.speculative import expected_speedup

DEMO_CHECKPOINT = Path("runs/demo/checkpoint")
DEMO_DATA = Path("runs/demo/data/eval/data")


def _timelines(data: str, first: int, limit: int) -> list:
    from clocktune.rendered_dataset import load_timeline_files

    return load_timeline_files([data])[first : first + limit]


def _row(name: str, run, plain_rate: float, identical: bool) -> str:
    summary = run.stats.summary()
    ratio = run.tokens_per_s / plain_rate if plain_rate else 0.0
    by_position = ", ".join(f"{value:.2f}" for value in summary["acceptance_by_position"] if value is not None)
    return (
        f"  {name:<16} {run.drafter:<14} {run.tokens_per_s:7.1f} tok/s {ratio:5.2f}x  "
        f"acceptance {summary['acceptance_rate'] or 0:.3f} (alpha {summary['alpha'] or 0:.3f}, "
        f"{summary['mean_accepted_length'] or 0:.2f} per draft, by position [{by_position}])  "
        f"drafter {summary['drafter_ms_per_token'] or 0:.1f} ms/token, target {summary['target_ms_per_forward']:.1f} "
        f"ms/forward, {summary['tokens_per_forward']:.2f} tokens/forward  {run.sessions_per_s:.3f} sessions/s  "
        f"identical {identical}"
    )


def identity(args: argparse.Namespace, model, tokenizer, timelines: list) -> int:
    """Greedy identity of every drafter against plain decoding on live sessions; 0 when all are identical."""
    from data_gen.backends import make_backend

    grammars = {"both": [False, True], "on": [True], "off": [False]}[args.grammar]
    failed = 0
    for constrained in grammars:
        started = time.perf_counter()
        runs = play_drafters(
            model,
            tokenizer,
            timelines,
            make_backend,
            args.drafters,
            constrained=constrained,
            progress=print if args.verbose else None,
        )
        reference = runs["none"]
        actions = sum(len(session) for session in reference.actions)
        tokens = sum(len(action) for session in reference.actions for action in session)
        for name, run in runs.items():
            if name == "none":
                continue
            where = first_divergence(run, reference)
            failed += where is not None
            print(
                f"grammar {'on' if constrained else 'off'}: {name} ({run.drafter}) over {len(timelines)} sessions, "
                f"{actions} actions, {tokens} tokens: {'identical' if where is None else 'DIFFERS at ' + where}; "
                f"acceptance {run.stats.summary()['acceptance_rate']}"
            )
        print(f"  ({time.perf_counter() - started:.0f} s)")
    print(f"identity: {'all identical' if not failed else f'{failed} drafter runs differ'}")
    return 1 if failed else 0


def bench(args: argparse.Namespace, model, tokenizer, timelines: list) -> dict:
    """The side-by-side benchmark; returns its figures (also written to ``--out`` when given)."""
    from clocktune.runtime.clocks import clock_named
    from clocktune.runtime.device_profiles import load_device_profile
    from clocktune.runtime.session import SessionConfig
    from data_gen.backends import make_backend

    options = {"constrained": args.constrained}
    print("1. costs on this device (random ids, 1,024 tokens of context)")
    costs = measure_speculation_costs(model, args.drafters, context_tokens=1024, repeats=args.repeats)
    verify = ", ".join(f"v({k}) {ratio:.2f}" for k, ratio in costs.verify_ratio.items())
    print(f"  decode step {costs.step_s * 1000:.1f} ms; {verify}")
    for name, ratio in costs.draft_ratio.items():
        print(f"  {name}: c = {ratio:.3f}")

    print(f"2. {len(timelines)} live sessions per drafter (virtual clock, batch 1, drafting at every step)")
    runs = play_drafters(
        model,
        tokenizer,
        timelines,
        make_backend,
        args.drafters,
        costs,
        progress=print if args.verbose else None,
        **options,
    )
    plain = runs["none"]
    measured = {run.drafter: run.stats.alpha for run in runs.values() if run.stats.alpha is not None}
    costs = type(costs)(costs.step_s, costs.verify_ratio, costs.draft_ratio, measured, {})
    figures: dict = {"sessions": len(timelines), "costs": costs.__dict__, "drafters": {}}
    for name, run in runs.items():
        same = first_divergence(run, plain) is None
        print(_row(name, run, plain.tokens_per_s, same))
        figures["drafters"][name] = {
            **run.stats.summary(),
            "ratio": run.tokens_per_s / plain.tokens_per_s if plain.tokens_per_s else None,
            "sessions_per_s": run.sessions_per_s,
            "identical": same,
        }

    print("3. the toggle (cost model at the measured acceptance; speculate when the gain exceeds 1.10)")
    for name, ratio in costs.draft_ratio.items():
        alpha = measured.get(name)
        if alpha is None:
            continue
        gain, gamma = max((expected_speedup(alpha, g, ratio, costs.verify(g + 1)), g) for g in range(1, 7))
        print(
            f"  {name}: alpha {alpha:.3f}, c {ratio:.3f}: expected {gain:.2f}x at gamma {gamma} -> {'on' if gain >= 1.1 else 'off'}"
        )
    chosen, _ = resolve_drafter("auto", model, costs)
    choice = chosen.name if chosen is not None else "none"
    print(f"  --draft auto picks: {choice}")
    figures["toggle"] = choice
    if choice != "none":
        toggled = play_drafters(
            model, tokenizer, timelines, make_backend, [choice], costs, always=False, with_plain=False, **options
        )
        run = toggled[choice]
        print(_row("auto (toggle)", run, plain.tokens_per_s, first_divergence(run, plain) is None))
        figures["auto"] = {**run.stats.summary(), "ratio": run.tokens_per_s / plain.tokens_per_s}

    ranked = sorted(
        ((entry["ratio"] or 0.0, name) for name, entry in figures["drafters"].items() if name != "none"), reverse=True
    )
    best_ratio, best = ranked[0] if ranked else (1.0, "none")
    if not args.no_latency:
        print(f"4. wall-clock live response latency, {min(args.latency_limit, len(timelines))} sessions each")
        config = SessionConfig(device=load_device_profile(args.profile), clock=clock_named("wall"))
        live = timelines[: args.latency_limit]
        for draft in ("none", best):
            p50, stats = live_latency_p50(model, tokenizer, live, make_backend, draft, costs, config, **options)
            print(
                f"  {draft}: response latency p50 {p50 if p50 is None else round(p50, 3)} s, {stats.summary()['tokens_per_s']} tok/s"
            )
            figures.setdefault("latency_p50_s", {})[draft] = p50
    if args.out:
        Path(args.out).write_text(json.dumps(figures, indent=2, default=str) + "\n")
    print(f"best: {best} {best_ratio:.2f}x")
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(DEMO_CHECKPOINT), help="checkpoint (LoRA adapter or full model)")
    parser.add_argument("--data", default=str(DEMO_DATA), help="held-out timelines (file or folder)")
    parser.add_argument("--limit", type=int, default=20, help="dialogues played per drafter")
    parser.add_argument("--first", type=int, default=0, help="index of the first dialogue (split a long check)")
    parser.add_argument("--drafters", nargs="+", default=[*CANDIDATES], help="drafters (layer_skip:N for N layers)")
    parser.add_argument("--identity", action="store_true", help="only check greedy identity of every drafter")
    parser.add_argument("--grammar", choices=["both", "on", "off"], default="both", help="identity: with the grammar?")
    parser.add_argument(
        "--constrained",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="benchmark: decode under the action grammar, as the model policy does by default",
    )
    parser.add_argument("--latency-limit", type=int, default=10, help="wall-clock sessions for the latency p50")
    parser.add_argument("--no-latency", action="store_true", help="skip the wall-clock latency part")
    parser.add_argument("--profile", default="phone-135m", help="device profile charged for prefill on the wall clock")
    parser.add_argument("--repeats", type=int, default=7, help="timed forwards per size for the costs")
    parser.add_argument("--out", default=None, help="also write the figures here as JSON")
    parser.add_argument("--verbose", action="store_true", help="a line per session")
    args = parser.parse_args(argv)

    from clocktune.runtime.policy_factories import load_policy_model

    if not Path(args.model).exists():
        print(f"{args.model}: no checkpoint (train the demo first: make demo)", file=sys.stderr)
        return 2
    print(f"torch threads {torch.get_num_threads()}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}")
    if importlib.util.find_spec("torchao") is None:  # the quantized drafters need it (pip install torchao)
        skipped = [d for d in args.drafters if d.startswith("int")]
        args.drafters = [d for d in args.drafters if not d.startswith("int")]
        if skipped:
            print(f"torchao is not installed: {', '.join(skipped)} left out")
    timelines = _timelines(args.data, args.first, args.limit)
    if not timelines:
        print(f"{args.data}: no dialogues from index {args.first} (--first, --limit)", file=sys.stderr)
        return 2
    model, tokenizer = load_policy_model(args.model)
    if args.identity:
        return identity(args, model, tokenizer, timelines)
    started = time.perf_counter()
    bench(args, model, tokenizer, timelines)
    print(f"({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
