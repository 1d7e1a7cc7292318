"""Benchmark: wall time of a trained checkpoint playing held-out dialogues in the runtime, with and without the
shared system-prompt prefill.

Every session of one model over the same tools starts with the same system prompt (742 tokens for the smart-home
domain, most of them tool schemas). ``policy_factory`` gives the sessions of a model one shared dict of prefilled
caches, so only the first session prefills it; the baseline gives each session its own dict, as every session
prefilled it before. Both runs play the same dialogues on the virtual clock in this process, one session at a
time, and must make the same decisions (the script checks that the results are identical).

    .venv/bin/python scripts/bench_model_policy.py --model runs/demo/checkpoint --data runs/demo/data/eval/data
"""

from __future__ import annotations

import argparse
import time

import torch

from clocktune.clock import PROFILES
from clocktune.rendered_dataset import load_timeline_files
from clocktune.runtime.model_policy import ModelPolicy
from clocktune.runtime.play import run_policy
from clocktune.runtime.policy_factories import load_policy_model, policy_factory
from clocktune.runtime.session import SessionConfig
from data_gen.backends import make_backend


def main() -> None:
    """Plays the dialogues with each-session prefill, then with the shared prefill, and prints both timings."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="runs/demo/checkpoint", help="a checkpoint folder written by training")
    parser.add_argument("--data", default="runs/demo/data/eval/data", help="held-out timelines")
    parser.add_argument("--dialogues", type=int, default=10)
    args = parser.parse_args()

    timelines = load_timeline_files([args.data])[: args.dialogues]
    model, tokenizer = load_policy_model(args.model)
    config = SessionConfig(device=PROFILES["phone-135m"])
    print(f"{len(timelines)} dialogues, {args.model}, {torch.get_num_threads()} torch threads, one session at a time")
    factories = {
        "own prefill per session": lambda t: ModelPolicy(model, tokenizer, t, name="speculative"),
        "shared system prefill": policy_factory("speculative", loaded=(model, tokenizer)),
    }
    seconds, results = {}, {}
    for label, factory in factories.items():
        started = time.perf_counter()
        run = run_policy("speculative", timelines, factory, make_backend, config, concurrency=1)
        seconds[label] = time.perf_counter() - started
        results[label] = [result.to_dict() for result in run.results]
        print(f"  {label:<26}{seconds[label]:7.1f} s  {seconds[label] / len(timelines):5.2f} s/dialogue")
    baseline, shared = seconds.values()
    same = results["own prefill per session"] == results["shared system prefill"]
    print(f"  speedup {baseline / shared:.2f}x; identical results: {same}")
    if not same:
        raise SystemExit("the shared prefill changed the model's decisions")


if __name__ == "__main__":
    main()
