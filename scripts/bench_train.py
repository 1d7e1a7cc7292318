"""Training step speed of the embedded SmolLM2 with LoRA on CPU: streaming mask versus plain block-causal, and
the system prompt run as a cache without gradients (``cache_prompt``) versus with them.

The same packed batches of rendered timelines (every batch holds hidden tokens: superseded recogniser partials or
results of modified calls) go through ``ClockSFTTrainer.training_step`` with ``mask_policy: streaming`` (an additive
float mask for sdpa, built per batch) and with ``mask_policy: causal`` (no mask, restarted ``position_ids``), the
baseline, both with ``cache_prompt: false``; then streaming with ``cache_prompt: true``. Prints tokens/s of each and
the ratios.

With ``--shared-rows N``, instead: batches of N rows of one timeline each, all of one domain (the demo's, so every
row starts with the same system prompt), with ``share_prompt`` off and on (the prompt once per batch, gradients
unchanged), and with ``cache_prompt`` added (once, without gradients); then the same N timelines as N one-row
micro-batches of gradient accumulation (no padding to the longest row; the prompt's cache kept for the step, as the
embedded CPU recipe trains). Prints tokens/s and timelines/s of each. The process holds freed heap memory, as
training on a CPU does (``clocktune.heap``); ``--default-heap`` leaves glibc's defaults, to time what that is worth.

With ``--step-variants``, instead: the recipe's own optimizer step (four one-timeline micro-batches of the demo's
domain over the step's cached prompt) in each precision and attention implementation the recipe could be given:
float32, bf16 autocast over float32 weights (the recipe's ``bf16``), bf16 weights (``dtype: bfloat16``), each with
``sdpa`` and ``eager``. The model is loaded again for each; every variant times the same ``--batches`` steps after
one warm-up step and prints seconds per step (median), the warm-up step's loss, and the ratio to float32 sdpa.

    python scripts/bench_train.py [--batches 6] [--batch-size 2]
    python scripts/bench_train.py --shared-rows 4 [--batches 2] [--bf16] [--default-heap]
With ``--busy-neighbour``, instead: the recipe's own step (float32 sdpa) on a quiet machine, then with one other
CPU-bound process running (``python -c "while True: pass"``) at torch's default threads, then with the same process
and ``clocktune.train.cpu_share.FairShare`` adjusting the threads every two steps as training on a CPU does, then
quiet again with the fair share on (it must give the cores back). Prints seconds per step (median) and the ratio to
the quiet step of each; the issue's line is a busy step at most 2.2x the quiet one.

    python scripts/bench_train.py --step-variants [--batches 3]
    python scripts/bench_train.py --busy-neighbour [--batches 6]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

import torch

from clocktune.collate import StreamingCollator
from clocktune.heap import hold_freed_memory
from clocktune.rendered_dataset import render_timelines
from clocktune.train.sft import load_model_and_tokenizer, make_parser
from clocktune.train.trainer import ClockSFTTrainer
from data_gen.config import GeneratorConfig
from data_gen.generate import generate_dialogue

RECIPE = "configs/smollm2-135m/sft_lora_cpu.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--shared-rows", type=int, default=0, help="time share_prompt on batches of this many rows")
    parser.add_argument("--bf16", action="store_true", help="bf16 mixed precision (autocast), as the recipe's bf16")
    parser.add_argument("--default-heap", action="store_true", help="keep glibc's defaults (clocktune.heap not used)")
    parser.add_argument("--step-variants", action="store_true", help="time the recipe's step per precision/attention")
    parser.add_argument(
        "--busy-neighbour", action="store_true", help="time the recipe's step beside a CPU-bound process"
    )
    args = parser.parse_args()
    torch.manual_seed(0)
    if not args.default_heap:
        hold_freed_memory()  # as clocktune.train.sft.main does on a CPU
    if args.step_variants:
        _step_variants_table(args.batches)
        return
    if args.busy_neighbour:
        _busy_neighbour_table(args.batches)
        return

    # Timelines with a hidden token each, so the streaming variant really builds and applies a mask.
    rows_per_batch = args.shared_rows or args.batch_size
    config = GeneratorConfig(domains=["smart_home"]) if args.shared_rows else GeneratorConfig()
    timelines, index = [], 0
    while len(timelines) < args.batches * rows_per_batch:
        timeline = generate_dialogue(index, 0, config)
        index += 1
        if any(event.revises for event in timeline.events):
            timelines.append(timeline)
    trainer, dataset = _recipe_trainer(["--bf16", str(args.bf16).lower()], timelines)
    training_args, tokenizer = trainer.args, trainer.processing_class
    collator = StreamingCollator(training_args.max_length, tokenizer.pad_token_id, pack=not args.shared_rows)
    rows = [dataset[i] for i in range(len(dataset))]
    batches = [collator(rows[i : i + rows_per_batch]) for i in range(0, len(rows), rows_per_batch)]
    tokens = sum(int(torch.isfinite(batch["time"]).sum()) for batch in batches)
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop, which this bench bypasses

    def timed(policy: str, cache_prompt: bool = False, share_prompt: bool = False) -> float:
        trainer.args.mask_policy = policy
        trainer.args.cache_prompt = cache_prompt
        trainer.args.share_prompt = share_prompt
        # The training loop's accelerate wraps the forward in autocast; this bench calls training_step bare.
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            trainer.training_step(trainer.model, {key: value.clone() for key, value in batches[0].items()})  # warm-up
            start = time.perf_counter()
            for batch in batches:
                trainer.training_step(trainer.model, {key: value.clone() for key, value in batch.items()})
        return tokens / (time.perf_counter() - start)

    def timed_micro_batches() -> float:
        # One optimizer step per group of rows: each row its own micro-batch, the step's labelled tokens the divisor.
        trainer.args.mask_policy = "streaming"
        trainer.args.cache_prompt = trainer.args.share_prompt = True
        groups = [
            [collator([row]) for row in rows[i : i + rows_per_batch]] for i in range(0, len(rows), rows_per_batch)
        ]
        seconds, _ = _accumulated_steps(trainer, groups, args.bf16)
        trainer.current_gradient_accumulation_steps = 1
        return tokens / sum(seconds)

    if args.shared_rows:
        _shared_prompt_table(timed, timed_micro_batches, len(batches), rows_per_batch, tokens)
        return
    causal = timed("causal")
    streaming = timed("streaming")
    causal_again = timed("causal")  # bracket the streaming run so drift in machine load shows
    cached = timed("streaming", cache_prompt=True)
    baseline = (causal + causal_again) / 2
    print(
        f"{len(batches)} batches of {args.batch_size} timelines, {tokens} tokens, torch threads {torch.get_num_threads()}"
    )
    print("| variant | tokens/s |")
    print("|---|---|")
    print(f"| block-causal (no mask), first run | {causal:.1f} |")
    print(f"| streaming mask (sdpa float 4D) | {streaming:.1f} |")
    print(f"| block-causal (no mask), second run | {causal_again:.1f} |")
    print(f"| streaming mask, system prompt cached without gradients | {cached:.1f} |")
    print(f"time per token, streaming / block-causal: {baseline / streaming:.3f} (goal <= 1.10)")
    print(f"speedup of cache_prompt over the streaming step: {cached / streaming:.2f}x")


# (name, attention implementation, model dtype, bf16 autocast)
STEP_VARIANTS = (
    ("float32", "sdpa", "float32", False),
    ("float32", "eager", "float32", False),
    ("bf16 autocast, float32 weights", "sdpa", "float32", True),
    ("bf16 autocast, float32 weights", "eager", "float32", True),
    ("bf16 weights", "sdpa", "bfloat16", False),
    ("bf16 weights", "eager", "bfloat16", False),
)


def _recipe_trainer(overrides: list[str], timelines: list) -> tuple[ClockSFTTrainer, Any]:
    """The recipe's trainer (LoRA with the new token rows trainable) on ``timelines``, rendered by its tokenizer.

    Args:
        overrides: Command-line overrides of the recipe's YAML.
        timelines: The timelines to render.

    Returns:
        ``(trainer, dataset)``.
    """
    from trl import get_peft_config

    base = ["--output_dir", "/tmp/clocktune-bench-train", "--report_to", "none", "--train_data", "unused"]
    _, training_args, model_args = make_parser().parse_args_and_config(["--config", RECIPE, *base, *overrides])
    model, tokenizer, model_format, new_ids = load_model_and_tokenizer(training_args, model_args)
    peft_config = get_peft_config(model_args)
    peft_config.trainable_token_indices = {"embed_tokens": new_ids}
    dataset = render_timelines(timelines, tokenizer, model_format)
    trainer = ClockSFTTrainer(
        model=model, args=training_args, train_dataset=dataset, processing_class=tokenizer, peft_config=peft_config
    )
    return trainer, dataset


def _accumulated_steps(
    trainer: ClockSFTTrainer, groups: list[list[dict]], autocast: bool
) -> tuple[list[float], float]:
    """Runs each group of one-row micro-batches as one optimizer step's gradient accumulation, the first group again
    first as a warm-up, as the embedded CPU recipe trains (the step's labelled tokens the loss's divisor).

    Args:
        trainer: The trainer.
        groups: Collated one-row micro-batches, a group per step.
        autocast: bf16 autocast around the steps, as the training loop's accelerate runs a ``bf16`` recipe.

    Returns:
        ``(seconds_per_step, warm_up_loss)``: the timed steps' seconds, and the warm-up step's loss, which is the
        loss at the loaded weights (``training_step`` only accumulates gradients; no optimizer step runs).
    """
    trainer.current_gradient_accumulation_steps = len(groups[0])
    seconds, warm_up_loss = [], 0.0
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        for step, group in enumerate([groups[0], *groups]):
            trainer.state.global_step = step
            labelled = sum(int((micro["labels"][:, 1:] != -100).sum()) for micro in group)
            started = time.perf_counter()
            loss = sum(
                float(trainer.training_step(trainer.model, dict(micro), num_items_in_batch=labelled))
                for micro in group
            )
            if step:
                seconds.append(time.perf_counter() - started)
            else:
                warm_up_loss = loss
    return seconds, warm_up_loss


def _time_recipe_steps(attention: str, dtype: str, autocast: bool, steps: int) -> tuple[list[float], float]:
    """Seconds of each of ``steps`` optimizer steps of the recipe, after a warm-up step, and the warm-up's loss.

    Args:
        attention: ``attn_implementation``.
        dtype: The model's dtype on load.
        autocast: bf16 autocast around the step, as the recipe's ``bf16: true`` runs it.
        steps: Timed steps of four one-timeline micro-batches each.

    Returns:
        As :func:`_accumulated_steps`; every variant's loss is that of the same weights and timelines.
    """
    overrides = ["--attn_implementation", attention, "--dtype", dtype, "--bf16", str(autocast).lower()]
    config = GeneratorConfig(domains=["smart_home"])
    rows_per_step = 4  # the recipe's gradient_accumulation_steps
    timelines = [generate_dialogue(index, 0, config) for index in range(steps * rows_per_step)]
    trainer, dataset = _recipe_trainer(overrides, timelines)
    assert trainer.args.gradient_accumulation_steps == rows_per_step, "the recipe's step is no longer 4 timelines"
    collator = StreamingCollator(trainer.args.max_length, trainer.processing_class.pad_token_id, pack=False)
    rows = [collator([dataset[i]]) for i in range(len(dataset))]
    return _accumulated_steps(
        trainer, [rows[i : i + rows_per_step] for i in range(0, len(rows), rows_per_step)], autocast
    )


def _step_variants_table(steps: int) -> None:
    """Times the recipe's step in each of ``STEP_VARIANTS`` and prints a table."""
    print(f"the recipe's step (4 one-timeline micro-batches, cached prompt), {steps} steps after one warm-up")
    print(f"torch threads {torch.get_num_threads()}; the loss is the warm-up step's, before any update")
    print("| precision | attention | s/step (median) | steps | first loss | speed vs float32 sdpa |")
    print("|---|---|---|---|---|---|")
    baseline = None
    for name, attention, dtype, autocast in STEP_VARIANTS:
        seconds, loss = _time_recipe_steps(attention, dtype, autocast, steps)
        median = statistics.median(seconds)
        baseline = baseline or median
        runs = ", ".join(f"{value:.2f}" for value in seconds)
        print(f"| {name} | {attention} | {median:.2f} | {runs} | {loss:.4f} | {baseline / median:.2f}x |")


def _busy_neighbour_table(steps: int) -> None:
    """Times the recipe's step quiet, beside a CPU-bound process at default threads and with the fair share, and
    quiet again with the fair share; prints a table (see the module docstring)."""
    import subprocess
    import sys

    from clocktune.train.cpu_share import FairShare

    config = GeneratorConfig(domains=["smart_home"])
    rows_per_step = 4
    timelines = [generate_dialogue(index, 0, config) for index in range(steps * rows_per_step)]
    trainer, dataset = _recipe_trainer(["--attn_implementation", "sdpa", "--dtype", "float32"], timelines)
    collator = StreamingCollator(trainer.args.max_length, trainer.processing_class.pad_token_id, pack=False)
    rows = [collator([dataset[i]]) for i in range(len(dataset))]
    groups = [rows[i : i + rows_per_step] for i in range(0, len(rows), rows_per_step)]
    default_threads = torch.get_num_threads()

    trainer.current_gradient_accumulation_steps = rows_per_step

    def step(group: list[dict]) -> float:
        # One optimizer step's gradient accumulation, as _accumulated_steps runs it, without its warm-up step.
        labelled = sum(int((micro["labels"][:, 1:] != -100).sum()) for micro in group)
        started = time.perf_counter()
        for micro in group:
            trainer.training_step(trainer.model, dict(micro), num_items_in_batch=labelled)
        return time.perf_counter() - started

    step(groups[0])  # warm-up

    def timed(name: str, share: FairShare | None) -> tuple[str, list[float], list[int]]:
        seconds, threads = [], []
        for index, group in enumerate(groups):
            threads.append(torch.get_num_threads())
            seconds.append(step(group))
            if share is not None and index % 2 == 1:
                share.adjust()  # as FairShareCallback does every two optimizer steps
        print(f"{name}: {', '.join(f'{value:.2f}' for value in seconds)} s on {threads} threads", flush=True)
        return name, seconds, threads

    rows_out = []
    rows_out.append(timed("quiet", None))
    quiet = rows_out[0][1]
    neighbour = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(1.0)
        rows_out.append(timed("one CPU-bound process beside, default threads", None))
        share = FairShare()
        share.settle(1.0)
        rows_out.append(timed("one CPU-bound process beside, fair share", share))
    finally:
        neighbour.kill()
        neighbour.wait()
    time.sleep(1.0)
    share.settle(1.0)
    rows_out.append(timed("quiet again, fair share", share))
    torch.set_num_threads(default_threads)

    baseline = statistics.median(quiet)
    print(f"the recipe's step (4 one-timeline micro-batches, cached prompt, float32 sdpa), {steps} steps a row")
    print(f"torch's default threads {default_threads}, cores {len(os.sched_getaffinity(0))}")
    print("| condition | s/step (median) | the steps | threads | vs quiet |")
    print("|---|---|---|---|---|")
    for name, seconds, threads in rows_out:
        median = statistics.median(seconds)
        runs = ", ".join(f"{value:.2f}" for value in seconds)
        used = ", ".join(str(value) for value in threads)
        print(f"| {name} | {median:.2f} | {runs} | {used} | {median / baseline:.2f}x |")


def _shared_prompt_table(timed, timed_micro_batches, batches: int, rows: int, tokens: int) -> None:
    """Times the streaming step with the prompt in every row, shared, shared without gradients, and as one-row
    micro-batches sharing the step's cached prompt; prints them."""
    plain = timed("streaming")
    shared = timed("streaming", share_prompt=True)
    plain_again = timed("streaming")  # bracket the shared run so drift in machine load shows
    cached = timed("streaming", cache_prompt=True, share_prompt=True)
    micro = timed_micro_batches()
    baseline = (plain + plain_again) / 2
    timelines_per_token = batches * rows / tokens
    print(f"{batches} batches of {rows} rows (one timeline each, one domain), {tokens} tokens")
    print("| variant | tokens/s | timelines/s |")
    print("|---|---|---|")
    for name, rate in (
        ("prompt in every row, first run", plain),
        ("prompt once per batch (share_prompt)", shared),
        ("prompt in every row, second run", plain_again),
        ("prompt once, without gradients (share_prompt + cache_prompt)", cached),
        ("one-row micro-batches, the step's prompt once without gradients", micro),
    ):
        print(f"| {name} | {rate:.1f} | {rate * timelines_per_token:.3f} |")
    print(f"speedup of share_prompt over the prompt in every row: {shared / baseline:.2f}x")
    print(f"speedup of share_prompt + cache_prompt: {cached / baseline:.2f}x")
    print(f"one-row micro-batches against the same rows padded into one batch: {micro / cached:.2f}x")


if __name__ == "__main__":
    main()
