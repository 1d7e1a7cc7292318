"""Benchmark: the model engine playing held-out dialogues at several batch sizes, and batch-1 decode against the
memory bound.

Part 1 plays the same held-out dialogues with the demo's checkpoint (greedy, under the action grammar, the demo's
call bias and device profile, virtual clock) once per batch size, every session in play at once
(``SessionDriver``), and prints wall time, sessions/s, action tokens/s, the engine's mean batch and live accuracy;
each run's session logs are compared with batch 1's, and a session that differs is named. With
``--one-token-steps`` each batch size is played first as decoding was before jump-forward (one token a forward: the
grammar's forced tokens not fed with the step before them), for the speedup of feeding them early in the same run and
the check that the logs do not change.

Part 2 times single-token forwards of the engine at batch 1 over contexts of several lengths, against the memory
bound: the bytes a decode step must read (the weights once, plus the context's keys and values) over this machine's
measured copy bandwidth (a 256 MiB tensor copied, read and write counted). Then where one step at the first context
goes: a profile of the step by operator, this machine's read bandwidth (a 512 MiB tensor summed), and the model's own
linear layers applied to one row each as the step applies them, at 2 threads and at 1.

Part 3 times the model's largest linear layer on M rows at once against M times one row: the most a packed forward
of M decode steps can gain on this machine, since the linear layers are nearly all of a decode step's work.

    .venv/bin/python scripts/bench_engine.py --model runs/demo/checkpoint --data runs/demo/data/eval/data \
        [--batch-sizes 1 4 16 50] [--dialogues 50] [--call-bias 1.5] [--one-token-steps] [--plain-linear]
"""

from __future__ import annotations

import argparse
import functools
import math
import statistics
import time

import torch

from clocktune.clock import PROFILES
from clocktune.rendered_dataset import load_timeline_files
from clocktune.runtime.engine import Engine, Forward
from clocktune.runtime.model_policy import one_token_a_forward
from clocktune.runtime.play import run_policy
from clocktune.runtime.policy_factories import load_policy_model, policy_factory
from clocktune.runtime.session import SessionConfig
from data_gen.backends import make_backend


def operator_split(events, steps: int = 1) -> dict[str, float]:
    """Milliseconds per step in matrix products, attention and other operators, from a profile's ``key_averages``
    (self time, so that nothing is counted twice)."""

    def per_step(keep) -> float:
        return sum(event.self_cpu_time_total for event in events if keep(event.key)) / steps / 1e3

    # The engine's linear layers through oneDNN's packed weights show as mkldnn::_linear_pointwise.
    matmul = per_step(lambda key: key in ("aten::mm", "aten::addmm", "aten::bmm", "mkldnn::_linear_pointwise"))
    attention = per_step(lambda key: "scaled_dot_product" in key)
    return {"matmul": matmul, "attention": attention, "other": per_step(lambda key: True) - matmul - attention}


def arithmetic(model, stats) -> tuple[float, float]:
    """GFLOP of a run's linear layers (the decoder's on every token fed, the head on every row of logits kept) and of
    its attention (scores and weighted values, on every query-key pair computed), from the engine's counters."""
    head = model.get_output_embeddings()
    linear = sum(
        module.weight.numel()
        for module in model.modules()
        if isinstance(module, torch.nn.Linear) and module is not head
    )
    config = model.config
    dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    attention = 4 * config.num_attention_heads * dim * config.num_hidden_layers * stats.attended
    return (2 * linear * stats.tokens + 2 * head.weight.numel() * stats.logit_rows) / 1e9, attention / 1e9


def play_batches(
    model,
    tokenizer,
    timelines,
    batch_sizes: list[int],
    call_bias: float,
    one_token_steps: bool = False,
    profile: bool = False,
    plain_linear: bool = False,
) -> None:
    """Part 1: the same sessions at each batch size (and, with ``one_token_steps``, each first decoded one token a
    forward); prints a table and the sessions whose logs differ from the first row's. ``in forwards s`` is the
    engine's own time in packed forwards; the rest of the wall time is the sessions' Python (policy, grammar,
    runtime). With ``profile`` each arm runs again under torch's profiler, which splits it by operator. With
    ``plain_linear`` each batch size is also played with the linear layers through ``F.linear`` instead of the
    engine's oneDNN-packed weights (``runtime.onednn_linear``), first."""
    config = SessionConfig(device=PROFILES["phone-135m"])
    print(f"{len(timelines)} dialogues, {torch.get_num_threads()} torch threads, call bias {call_bias:g}")
    print(
        "| batch | linear layers | forced tokens fed early | wall s | in forwards s | sessions/s | action tokens/s "
        "| forwards "
        "| mean batch | tokens fed | live accuracy | logs as the first row |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    reference = None
    first_seconds = None
    timed: dict[tuple[int, bool, bool], float] = {}  # wall seconds of each arm: (batch size, early, packed)
    arms = [
        (b, early, packed)
        for b in batch_sizes
        for early in ([False, True] if one_token_steps else [True])
        for packed in ([False, True] if plain_linear else [True])
    ]
    for batch_size, early, packed in arms:
        play = functools.partial(play_arm, model, tokenizer, timelines, batch_size, call_bias, early, config, packed)
        run, factory, seconds = play()
        first_seconds = first_seconds or seconds
        logs = [log.timeline.events for log in run.logs]
        if reference is None:
            reference = logs
        differ = [t.id for t, log, ref in zip(timelines, logs, reference, strict=True) if log != ref]
        stats = factory.engine.stats
        tokens = factory.decoding.tokens
        print(
            f"| {batch_size} | {'oneDNN packed' if factory.engine.linears else 'F.linear'} "
            f"| {factory.decoding.forced_tokens} | {seconds:.1f} | {stats.seconds:.1f} "
            f"| {len(timelines) / seconds:.3f} "
            f"| {tokens / seconds:.1f} "
            f"| {stats.forwards} | {stats.rows / stats.forwards:.1f} | {stats.tokens} | {run.share('accurate'):.2f} "
            f"| {len(timelines) - len(differ)}/{len(timelines)} |"
        )
        linear, attention = arithmetic(model, stats)
        print(f"  arithmetic: linear layers {linear:.0f} GFLOP, attention {attention:.0f} GFLOP")
        if differ:
            print(f"  sessions whose log differs from the first row's: {differ}")
        print(f"  speedup over the first row: {first_seconds / seconds:.2f}x")
        if profile:
            print_profile(play, model)
        timed[batch_size, early, packed] = seconds
        # Each arm against the arm that differs from it in one setting alone, played just before it.
        for what, base, baseline in (
            ("oneDNN-packed linear layers", (batch_size, early, False), "F.linear"),
            ("forced tokens fed early", (batch_size, False, packed), "one token a forward"),
        ):
            if base != (batch_size, early, packed) and base in timed:
                print(f"  {what}, against {baseline} at batch {batch_size}: {timed[base] / seconds:.2f}x")


def play_arm(model, tokenizer, timelines, batch_size: int, call_bias: float, early: bool, config, packed=True):
    """Plays ``timelines`` all at once through an engine of ``batch_size`` (forced tokens fed early unless not
    ``early``; linear layers through the packed weights unless not ``packed``); returns the run, its policy factory
    (engine and decoding stats) and the wall seconds."""
    factory = policy_factory("model", loaded=(model, tokenizer), call_bias=call_bias, batch_size=batch_size)
    if not packed:
        factory.engine.linears = None
    started = time.perf_counter()
    with one_token_a_forward(not early):
        run = run_policy("model", timelines, factory, make_backend, config, concurrency=len(timelines))
    return run, factory, time.perf_counter() - started


def print_profile(play, model) -> None:
    """Plays an arm again (``play``: :func:`play_arm` bound to it) under torch's profiler and prints its seconds in
    matrix products, attention, other operators and outside operators (the Python of sessions, policies and the
    engine's bookkeeping), and the rate of each against ``model``'s arithmetic (:func:`arithmetic`). The profiler
    keeps every operator call: for short arms (``--profile``'s help)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        _, factory, wall = play()
    events = prof.key_averages()
    split = operator_split(events)
    operators = sum(split.values()) / 1e3
    print(
        f"  under the profiler: {wall:.1f} s wall, in forwards {factory.engine.stats.seconds:.1f} s; matrix products "
        f"{split['matmul'] / 1e3:.1f} s, attention {split['attention'] / 1e3:.1f} s, other operators "
        f"{split['other'] / 1e3:.1f} s, outside operators {max(wall - operators, 0.0):.1f} s"
    )
    # Rates: how near each part runs to the arithmetic it must do. Attention's arithmetic at the matrix products'
    # rate is what it would take at best on this CPU, whatever the batch.
    linear, attention = arithmetic(model, factory.engine.stats)
    matmul_rate = linear / (split["matmul"] / 1e3)
    print(
        f"  matrix products at {matmul_rate:.0f} GFLOP/s, attention at {attention / (split['attention'] / 1e3):.0f} "
        f"GFLOP/s; attention's {attention:.0f} GFLOP at the matrix products' rate: {attention / matmul_rate:.1f} s"
    )
    top = sorted(events, key=lambda event: event.self_cpu_time_total, reverse=True)[:10]
    print(
        "  operators by self time: "
        + ", ".join(f"{e.key} {e.self_cpu_time_total / 1e6:.1f} s ({e.count})" for e in top)
    )


def median_seconds(run, repeats: int = 5, warmup: int = 1) -> float:
    """Median wall seconds of ``repeats`` calls of ``run``, after ``warmup`` calls that warm caches and allocations."""
    for _ in range(warmup):
        run()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def copy_bandwidth(megabytes: int = 256, repeats: int = 5) -> float:
    """Bytes per second of a large tensor copy (read and write counted), median of ``repeats``."""
    source = torch.ones(megabytes * 2**20 // 4)
    target = torch.empty_like(source)
    return 2 * source.numel() * 4 / median_seconds(lambda: target.copy_(source), repeats)


def decode_step(model, ids: list[int]):
    """One batch-1 decode step of the engine over a session whose context is ``ids``, as a function: it feeds one
    token and crops it off again, so that every call decodes over the same context."""
    engine = Engine(model)
    session = engine.open(tuple(ids))  # the context, fed as one prompt
    until = [math.inf] * (len(ids) + 1)

    def step() -> None:
        engine.forward([(session, Forward([7], [0.0], until))])
        session.crop(len(ids))

    return step


def decode_floor(model, contexts: list[int], steps: int = 16) -> None:
    """Part 2: the engine's batch-1 decode step at each context length, against the memory bound."""
    bandwidth = copy_bandwidth()
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    config = model.config
    kv_heads = getattr(config, "num_key_value_heads", config.num_attention_heads)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    kv_per_token = 2 * config.num_hidden_layers * kv_heads * head_dim * next(model.parameters()).element_size()
    print(f"\ncopy bandwidth {bandwidth / 1e9:.1f} GB/s; weights {weights / 1e6:.0f} MB; KV {kv_per_token} B/token")
    print("| context | decode step ms (median) | tokens/s | bytes read MB | memory bound ms | step / bound |")
    print("|---|---|---|---|---|---|")
    vocab = model.get_input_embeddings().num_embeddings
    generator = torch.Generator().manual_seed(0)
    for context in contexts:
        ids = torch.randint(vocab, (context,), generator=generator).tolist()
        step = median_seconds(decode_step(model, ids), steps, warmup=2)
        read = weights + kv_per_token * context
        bound = read / bandwidth
        print(
            f"| {context} | {step * 1e3:.1f} | {1 / step:.1f} | {read / 1e6:.0f} | {bound * 1e3:.1f} | {step / bound:.1f}x |"
        )


def read_bandwidth(megabytes: int = 512, repeats: int = 5) -> float:
    """Bytes per second of summing a large tensor (reads only), median of ``repeats``: what a decode step's weight reads
    can reach, where a copy's figure also counts its writes."""
    source = torch.ones(megabytes * 2**20 // 4)
    return source.numel() * 4 / median_seconds(source.sum, repeats)


def decode_breakdown(model, context: int, steps: int = 8) -> None:
    """Part 2, continued: where one batch-1 decode step at ``context`` tokens goes (operators by self time), and how
    fast the model's linear layers read their weights at one row, at the torch threads set and at one."""
    from torch.profiler import ProfilerActivity, profile

    step = decode_step(model, list(range(context)))
    for _ in range(2):
        step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        started = time.perf_counter()
        for _ in range(steps):
            step()
        wall = (time.perf_counter() - started) / steps * 1e3
    split = operator_split(prof.key_averages(), steps)
    matmul, attention = split["matmul"], split["attention"]
    operators = sum(split.values())
    print(f"\none decode step at {context} tokens under the profiler, ms ({steps} steps):")
    print("| step (wall) | matrix products | attention | other operators | outside operators (Python) |")
    print("|---|---|---|---|---|")
    print(
        f"| {wall:.1f} | {matmul:.1f} | {attention:.1f} | {operators - matmul - attention:.1f} "
        f"| {max(wall - operators, 0.0):.1f} |"
    )

    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    weights = [m.weight.detach() for m in linears]
    total_bytes = sum(w.numel() * w.element_size() for w in weights)
    rows = {w.shape[1]: torch.randn(1, w.shape[1], dtype=w.dtype) for w in weights}
    threads = torch.get_num_threads()
    print(
        f"\nthe model's {len(linears)} linear layers at one row ({total_bytes / 1e6:.0f} MB; read bandwidth "
        f"{read_bandwidth() / 1e9:.1f} GB/s):"
    )
    print("| threads | ms for all | GB/s |")
    print("|---|---|---|")

    def products() -> None:
        for weight in weights:
            torch.nn.functional.linear(rows[weight.shape[1]], weight)

    for count in sorted({threads, 1}, reverse=True):
        torch.set_num_threads(count)
        took = median_seconds(products)
        print(f"| {count} | {took * 1e3:.1f} | {total_bytes / took / 1e9:.1f} |")
    torch.set_num_threads(threads)


def matmul_ceiling(model, rows: list[int], repeats: int = 50) -> None:
    """Part 3: what batching can gain in the linear layers, which hold nearly all of a decode step's work: the
    decoder's largest projection (not the output head, whose rows are only the ones kept) applied to ``M`` rows at
    once against ``M`` times one row."""
    head = model.get_output_embeddings()
    layers = [m for m in model.modules() if isinstance(m, torch.nn.Linear) and m is not head]
    weight = max((m.weight for m in layers), key=lambda w: w.numel()).detach()

    def seconds(count: int) -> float:
        x = torch.randn(count, weight.shape[1], dtype=weight.dtype)
        for _ in range(5):
            torch.nn.functional.linear(x, weight)
        started = time.perf_counter()
        for _ in range(repeats):
            torch.nn.functional.linear(x, weight)
        return (time.perf_counter() - started) / repeats

    one = seconds(1)
    print(f"\nlinear {tuple(weight.shape)}: one row {one * 1e6:.0f} us")
    print("| rows M | us | GFLOP/s | M x one row / M rows (most a batch of M gains) |")
    print("|---|---|---|---|")
    for count in rows:
        took = seconds(count)
        flops = 2 * count * weight.numel() / took / 1e9
        print(f"| {count} | {took * 1e6:.0f} | {flops:.0f} | {count * one / took:.2f}x |")


def main() -> None:
    """Parses the command line and runs both parts."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="runs/demo/checkpoint", help="a checkpoint folder written by training")
    parser.add_argument("--data", default="runs/demo/data/eval/data", help="held-out timelines")
    parser.add_argument("--dialogues", type=int, default=50)
    parser.add_argument("--batch-sizes", type=int, nargs="*", default=[1, 4, 16, 50], help="part 1 (none: skip it)")
    parser.add_argument("--call-bias", type=float, default=1.5, help="the demo's (clocktune.cli.demo.CALL_BIAS)")
    parser.add_argument(
        "--one-token-steps", action="store_true", help="part 1 also decodes one token a forward, before each batch"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="part 1 plays each arm again under torch's profiler (it records every operator call: "
        "18.5 GB at batch 16 over 50 dialogues; cut --dialogues for batch 1)",
    )
    parser.add_argument(
        "--plain-linear", action="store_true", help="part 1 also plays each batch size with F.linear, before each"
    )
    parser.add_argument("--contexts", type=int, nargs="*", default=[1100, 3000, 5000], help="part 2's context lengths")
    parser.add_argument("--rows", type=int, nargs="*", default=[1, 4, 16, 50], help="part 3's rows per matmul")
    args = parser.parse_args()

    model, tokenizer = load_policy_model(args.model)
    timelines = load_timeline_files([args.data])[: args.dialogues]
    if args.batch_sizes:
        play_batches(
            model,
            tokenizer,
            timelines,
            args.batch_sizes,
            args.call_bias,
            args.one_token_steps,
            args.profile,
            args.plain_linear,
        )
    if args.contexts:
        decode_floor(model, args.contexts)
        decode_breakdown(model, args.contexts[0])
    if args.rows:
        matmul_ceiling(model, args.rows)


if __name__ == "__main__":
    main()
