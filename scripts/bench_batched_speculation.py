"""Benchmark: speculation inside the engine's batch, in EfficientRollout's columns, on the demo's checkpoint.

Part 1 measures what the toggle prices: the engine's packed forward timed over batch sizes and tokens per session
(``speculation_costs.measure_roofline``, as ``clocktune profile`` does), the roofline fitted to it, each drafter's
draft-token cost, and from them, at each drafter's acceptance, the largest batch at which speculation is expected to
pay (where the toggle switches it on) and the ladder's thresholds at batch 1.

Part 2 plays sampled rollouts (temperature 1) of training tasks, all in play at once, so that the active batch
shrinks from their number to 1 as sessions end: plain decoding, speculation at every step (``always``) and the
toggled speculation, on the same seeds, each arm ``--repeats`` times in drift-balanced order (A B C, C B A).
Columns: rollout seconds (the mean, and each run), the change against plain, the engine's counters (packed forwards,
sessions' forwards in them, tokens fed: what a time difference is made of), the drafter's acceptance (its own tokens,
not the grammar's forced ones), mean draft length, the batch at which speculation switched on, the share of steps
speculative, whether every session's log is plain decoding's (the sampling noise is per position, so it must be), and
the tasks completed.

Part 3 holds the batch near a size ``B`` (twice ``B`` sessions, ``B`` in play at once: an ended session is replaced
by the next, so the batch shrinks only at the end) and compares toggled against plain at each size: where the toggle
keeps speculation off it may cost only its bookkeeping (the issue's line: at most 2% slower).

Part 4 prices the same rollout on a GPU on paper: a roofline from the datasheet bandwidth and the measured bf16
matmul rate of the lent H200 (STACK-NOTES.md) for a 3B model, with this run's acceptance: where the toggle would switch
speculation on there. A prediction, not a measurement.

    .venv/bin/python scripts/bench_batched_speculation.py --model runs/demo/checkpoint \
        --data runs/demo/data/train/data [--tasks 100] [--drafters prompt_lookup layer_skip] [--batch-sizes 1 4 16] \
        [--repeats 2] [--no-shrinking]
"""

from __future__ import annotations

import argparse
import time

import torch

from clocktune.clock import PROFILES
from clocktune.rendered_dataset import load_timeline_files
from clocktune.runtime.play import run_policy
from clocktune.runtime.policy_factories import load_policy_model, policy_factory
from clocktune.runtime.session import SessionConfig
from clocktune.runtime.speculation_costs import describe_roofline, measure_roofline, measure_speculation_costs
from clocktune.runtime.speculation_runs import ALWAYS
from clocktune.runtime.speculative import (
    LADDER,
    DraftLength,
    Roofline,
    SpeculationCosts,
    acceptance_prior,
    rung_thresholds,
)
from data_gen.backends import make_backend

# A 3B model on an H200, on paper: 6.2 GB of bf16 weights at 4.8 TB/s, 2 x 3.1e9 FLOPs a token at the dense bf16
# rate measured on the lent H200 (790 TFLOP/s: gpu_check.py's DEFAULT_PEAK_TFLOPS); a session's own cost guessed at the engine's
# per-session attention calls (36 layers x ~20 us of launches), and at none (one batched attention kernel, as a
# paged or flex attention would be). Guesses for lack of a GPU run: `clocktune profile` on the GPU measures them.
GPU_3B = {
    "per-session attention": Roofline(memory_s=6.2e9 / 4.8e12, token_s=2 * 3.1e9 / 7.9e14, row_s=36 * 20e-6),
    "batched attention": Roofline(memory_s=6.2e9 / 4.8e12, token_s=2 * 3.1e9 / 7.9e14, row_s=0.0),
}


def switch_on_batch(costs: SpeculationCosts, cost_ratio: float, alpha: float, margin: float = 0.1) -> int:
    """The largest batch (of 1..256) at which the toggle, at acceptance ``alpha``, has speculation on (0: none)."""
    length = DraftLength(cost_ratio, costs.verify, prior_alpha=alpha, prior_weight=1e9, margin=margin)
    on = [batch for batch in range(1, 257) if length.best(batch)[1] >= 1.0 + margin]
    return max(on) if on else 0


def part_costs(model, drafters: list[str]) -> SpeculationCosts:
    """Part 1: the sweep, the fit, the drafters' costs and where each would switch on."""
    roofline, samples = measure_roofline(model, context_tokens=1024)
    costs = measure_speculation_costs(model, drafters, context_tokens=1024, repeats=3, batches=())
    costs = SpeculationCosts(costs.step_s, costs.verify_ratio, costs.draft_ratio, roofline=roofline)
    print("| batch B | tokens per session k | ms (median) | roofline ms | v(k) at B |")
    print("|---|---|---|---|---|")
    for tokens, rows, seconds in samples:
        k = tokens // rows
        predicted = roofline.seconds(tokens, rows)
        print(f"| {rows} | {k} | {seconds * 1e3:.1f} | {predicted * 1e3:.1f} | {costs.verify(k, rows):.2f} |")
    print(describe_roofline(costs))
    for name, ratio in costs.draft_ratio.items():
        alpha = acceptance_prior(name, None, costs)
        thresholds = rung_thresholds(ratio, costs.verify, LADDER)
        print(
            f"{name}: a draft token {ratio:.3f} of a step; at α {alpha:.2f} (prior) speculation pays up to batch "
            f"{switch_on_batch(costs, ratio, alpha)}; ladder thresholds at batch 1 {thresholds}"
        )
    return costs


def _rollout(model, tokenizer, timelines, costs, draft, margin, batch_size, call_bias):
    config = SessionConfig(device=PROFILES["phone-135m"])
    factory = policy_factory(
        "model",
        loaded=(model, tokenizer),
        draft=draft,
        costs=costs,
        temperature=1.0,
        call_bias=call_bias,
        batch_size=batch_size,
        margin=margin,
    )
    started = time.perf_counter()
    run = run_policy("model", timelines, factory, make_backend, config, concurrency=batch_size, progress=False)
    return time.perf_counter() - started, run, factory.decoding, factory.engine.stats


def _balanced(arms: list[tuple[str, str, float]], repeats: int, play) -> dict[str, list]:
    """Plays each arm ``repeats`` times in drift-balanced order (A B C, then C B A, ...): the machine's pace moves
    by several percent within minutes here, so an arm always played after another would carry the drift as its own
    cost. Returns each arm's results, in play order."""
    results: dict[str, list] = {label: [] for label, _, _ in arms}
    for repeat in range(repeats):
        for label, draft, margin in arms if repeat % 2 == 0 else arms[::-1]:
            results[label].append(play(draft, margin))
    return results


def _row(label, results, plain_seconds, plain_logs) -> str:
    # The counters are the first run's: the toggle decides from the active batch and acceptance, never from a
    # timing, so a repeat feeds the same forwards; they say what a time difference is made of where the machine's
    # noise is of its size.
    seconds = [result[0] for result in results]
    _, run, decoding, engine = results[0]
    summary = decoding.summary()
    same = sum(log.timeline.events == ref for log, ref in zip(run.logs, plain_logs, strict=True))
    mean = sum(seconds) / len(seconds)
    in_forwards = sum(result[3].seconds for result in results) / len(results)
    each = ", ".join(f"{value:.1f}" for value in seconds)
    return (
        f"| {label} | {mean:.1f} ({each}) | {mean / plain_seconds - 1:+.1%} | {in_forwards:.1f} | {engine.forwards} "
        f"| {engine.rows} | {engine.tokens} | {summary['alpha']} | {summary['mean_draft_length']} "
        f"| {summary['switched_on_batch']} | {summary['speculative_share']} | {same}/{len(run.logs)} "
        f"| {run.share('accurate'):.2f} |"
    )


def _print_arms(arms: list[tuple[str, str, float]], repeats: int, play) -> dict[str, list]:
    """Plays the arms (the first is plain decoding) in drift-balanced order, prints the table against plain's mean
    time and logs, and returns each arm's results."""
    print(
        "| decoding | rollout s (each run) | against plain | in forwards s | packed forwards | sessions' forwards "
        "| tokens fed | drafter's α | mean draft length | switched on at batch | share of steps speculative "
        "| logs as plain | tasks completed |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    results = _balanced(arms, repeats, play)
    plain = results[arms[0][0]]
    plain_seconds = sum(result[0] for result in plain) / len(plain)
    plain_logs = [log.timeline.events for log in plain[0][1].logs]
    for label, _, _ in arms:
        print(_row(label, results[label], plain_seconds, plain_logs))
    return results


def part_rollouts(model, tokenizer, timelines, costs, drafters, call_bias, repeats) -> dict[str, float]:
    """Part 2: the shrinking-batch rollout, plain / always / toggled; returns each drafter's measured α."""
    batch = len(timelines)
    print(f"\n{batch} sampled rollouts (temperature 1), all in play at once, batch shrinking to 1")
    arms = [("plain", "none", 0.1)]
    for draft in drafters:
        arms += [(f"{draft} always", draft, ALWAYS), (f"{draft} toggled", draft, 0.1)]

    def play(draft, margin):
        return _rollout(model, tokenizer, timelines, costs, draft, margin, batch, call_bias)

    results = _print_arms(arms, repeats, play)
    measured = {}
    for label, _, _ in arms:
        decoding = results[label][0][2]
        if decoding.alpha is not None:
            measured[decoding.drafter] = decoding.alpha
    return measured


def part_fixed(model, tokenizer, timelines, costs, drafters, batch_sizes, call_bias, repeats) -> None:
    """Part 3: toggled against plain with the batch held at each size."""
    for batch in batch_sizes:
        chosen = timelines[: 2 * batch]
        print(f"\nbatch held at {batch} ({len(chosen)} sessions)")
        arms = [("plain", "none", 0.1)] + [(f"{draft} toggled", draft, 0.1) for draft in drafters]

        def play(draft, margin, chosen=chosen, batch=batch):
            return _rollout(model, tokenizer, chosen, costs, draft, margin, batch, call_bias)

        _print_arms(arms, repeats, play)


def part_gpu(costs: SpeculationCosts, measured: dict[str, float]) -> None:
    """Part 4: where the toggle would switch on for a 3B model on an H200, on paper, at this run's acceptance."""
    for label, roofline in GPU_3B.items():
        gpu = SpeculationCosts(roofline.seconds(1, 1), {}, roofline=roofline)
        print(
            f"\nGPU on paper (3B, H200, {label}): {roofline.memory_s * 1e3:.2f} ms a forward up to "
            f"{roofline.knee:.0f} tokens, {roofline.row_s * 1e3:.2f} ms a session; v(5) at batch 1 "
            f"{gpu.verify(5):.2f}, at 16 {gpu.verify(5, 16):.2f}, at 64 {gpu.verify(5, 64):.2f}"
        )
        for name, alpha in measured.items():
            # A drafter's cost relative to a step as measured here: on the GPU a lookup stays free and layer-skip
            # keeps its share of the layers (int8 would read half the bytes: cheaper there than here).
            ratio = costs.draft_ratio.get(name, 0.0)
            print(
                f"{name} at α {alpha:.2f}: on up to batch {switch_on_batch(costs, ratio, alpha)} here, "
                f"{switch_on_batch(gpu, ratio, alpha)} there"
            )


def main() -> None:
    """Parses the command line and runs the parts."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="runs/demo/checkpoint", help="a checkpoint folder written by training")
    parser.add_argument("--data", default="runs/demo/data/train/data", help="training timelines (the tasks)")
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--drafters", nargs="*", default=["prompt_lookup", "layer_skip"])
    parser.add_argument("--batch-sizes", type=int, nargs="*", default=[1, 4, 16], help="part 3 (none: skip it)")
    parser.add_argument("--call-bias", type=float, default=1.5, help="the demo's (clocktune.cli.demo.CALL_BIAS)")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each arm, in drift-balanced order")
    parser.add_argument(
        "--shrinking", action=argparse.BooleanOptionalAction, default=True, help="part 2 (--no-shrinking: skip it)"
    )
    args = parser.parse_args()

    model, tokenizer = load_policy_model(args.model)
    timelines = load_timeline_files([args.data])[: args.tasks]
    print(f"{len(timelines)} tasks, {torch.get_num_threads()} torch threads, call bias {args.call_bias:g}")
    costs = part_costs(model, args.drafters)
    measured = {}
    if args.shrinking:
        measured = part_rollouts(model, tokenizer, timelines, costs, args.drafters, args.call_bias, args.repeats)
    if args.batch_sizes:
        part_fixed(model, tokenizer, timelines, costs, args.drafters, args.batch_sizes, args.call_bias, args.repeats)
    part_gpu(costs, measured)


if __name__ == "__main__":
    main()
