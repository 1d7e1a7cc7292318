"""Benchmark: how much of the collator's time goes into building streaming attention masks.

Builds synthetic renderings of realistic size (300-1500 tokens, a sink prefix, ~5% of tokens hidden as superseded
partials or modified results), collates them for sdpa at max_length 4096 in batches, and prints a table: total
collate time, the mask building inside it and its share, everything else, and the cost of merely allocating a dense
float mask of the same shape (the floor for any [B, 1, L, L] mask). The same renderings with nothing hidden show the block-causal fast path.

    .venv/bin/python scripts/bench_masks.py [--renderings 256] [--batch-size 16] [--max-length 4096]
"""

from __future__ import annotations

import argparse
import math
import random
import time

import torch

import clocktune.collate as collate_module
from clocktune.collate import StreamingCollator
from clocktune.masks import attention_inputs


def synthetic_rendering(rng: random.Random, hidden_fraction: float) -> dict[str, list]:
    """One rendering: a 100-200 token sink prefix, then events of 3-30 tokens about 0.3 s apart; user and tool
    events are hidden (at the next event's time) with a probability that hides ~`hidden_fraction` of all tokens."""
    length = rng.randint(300, 1500)
    num_sink = rng.randint(100, 200)
    rendering = {key: [] for key in ("input_ids", "labels", "time", "visible_until", "event_index", "sink")}

    def add(n: int, at: float, visible_until: float, event: int, agent: bool) -> None:
        ids = [rng.randrange(1000, 50000) for _ in range(n)]
        rendering["input_ids"] += ids
        rendering["labels"] += ids if agent else [-100] * n
        rendering["time"] += [at] * n
        rendering["visible_until"] += [visible_until] * n
        rendering["event_index"] += [event] * n
        rendering["sink"] += [event < 0] * n

    add(num_sink, 0.0, math.inf, -1, False)
    now, event = 0.0, 0
    # Two of three events are user/tool events; hiding them with probability p hides ~2/3 p of the event tokens.
    hide_probability = 1.5 * hidden_fraction * length / (length - num_sink)
    while len(rendering["input_ids"]) < length:
        now += rng.uniform(0.05, 0.6)
        n = min(rng.randint(3, 30), length - len(rendering["input_ids"]))
        source = rng.choice(["user", "tool", "agent"])
        hidden = source != "agent" and rng.random() < hide_probability
        add(n, now, now + 0.6 if hidden else math.inf, event, source == "agent")
        event += 1
    return rendering


def run(renderings: list[dict], batch_size: int, max_length: int) -> dict[str, float]:
    """Collate in batches; time the whole call, the mask building inside it, and a bare allocation of the mask."""
    totals = dict.fromkeys(("mask", "collate", "alloc", "rows", "tokens"), 0.0)

    def timed_attention_inputs(*args, **kwargs):
        tick = time.perf_counter()
        inputs = attention_inputs(*args, **kwargs)
        totals["mask"] += time.perf_counter() - tick
        return inputs

    # Time mask building inside the real collate call rather than in a second run beside it.
    collate_module.attention_inputs = timed_attention_inputs
    collator = StreamingCollator(max_length, 0, "sdpa")
    try:
        for start in range(0, len(renderings), batch_size):
            features = renderings[start : start + batch_size]
            tick = time.perf_counter()
            batch = collator(features)
            totals["collate"] += time.perf_counter() - tick
            rows, width = batch["input_ids"].shape
            tick = time.perf_counter()
            torch.full((rows, 1, width, width), torch.finfo(torch.float32).min)
            totals["alloc"] += time.perf_counter() - tick
            totals["rows"] += rows
            totals["tokens"] += sum(len(feature["input_ids"]) for feature in features)
    finally:
        collate_module.attention_inputs = attention_inputs
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--renderings", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-length", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)

    rng = random.Random(args.seed)
    streaming = [synthetic_rendering(rng, hidden_fraction=0.05) for _ in range(args.renderings)]
    plain = [{**rendering, "visible_until": [math.inf] * len(rendering["time"])} for rendering in streaming]
    hidden = sum(v != math.inf for r in streaming for v in r["visible_until"]) / sum(len(r["time"]) for r in streaming)

    print(f"{args.renderings} renderings, {hidden:.1%} tokens hidden, batches of {args.batch_size}, sdpa, 1 thread")
    header = ("path", "rows", "tokens", "collate s", "mask s", "mask share", "other s", "alloc s", "mask ms/row")
    print(" | ".join(f"{h:>11}" for h in header))
    for name, renderings in (("streaming", streaming), ("fast path", plain)):
        t = run(renderings, args.batch_size, args.max_length)
        cells = (
            name,
            f"{t['rows']:.0f}",
            f"{t['tokens']:.0f}",
            f"{t['collate']:.3f}",
            f"{t['mask']:.3f}",
            f"{t['mask'] / t['collate']:.1%}",
            f"{t['collate'] - t['mask']:.3f}",
            f"{t['alloc']:.3f}",
            f"{1000 * t['mask'] / t['rows']:.1f}",
        )
        print(" | ".join(f"{c:>11}" for c in cells))


if __name__ == "__main__":
    main()
