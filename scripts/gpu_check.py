"""GPU throughput check: streaming attention (flex ``BlockMask``) against plain causal packing (sdpa), on
random-initialised Qwen2.5-3B and Llama-3.2-3B, with LoRA and with full fine-tuning.

Run from the repository root on the GPU machine; it installs nothing and needs no network:

    bash scripts/gpu_check.sh [--steps 20] [--max-length 8192] [--rows 4] [--models qwen2.5 llama3.2]
                              [--modes lora full] [--budget-s 420] [--peak-tflops 790] [--tiny]

(``python scripts/gpu_check.py`` with ``PYTHONPATH=.`` under ``timeout 480``, output teed to ``gpu_check.out``).
It imports torch, transformers, peft and clocktune's ``masks``, ``collate`` and ``runtime.incremental`` only.

Every row trains a freshly built bf16 model for ``--steps`` steps (the first 3 untimed: compilation, allocator
warm-up) on the same fixed list of packed batches: synthetic renderings (a seeded RNG; 800-3000 tokens, a 300-700
token sink prefix, ~3% of tokens hidden by a finite ``visible_until``, ~15% carrying labels) packed by
:class:`~clocktune.collate.StreamingCollator` into ``--rows`` rows of ``--max-length``. The streaming rows build the
mask as the trainer does, with :func:`~clocktune.masks.attention_inputs` on the batch on the GPU (a flex
``BlockMask``); the causal rows take the same batches with every token visible forever, which is the trainer's
``mask_policy="causal"`` and its sdpa fast path (restarting ``position_ids`` and no mask, from which transformers
derives the packed block-causal mask itself). The loss is the trainer's:
logits only at positions that predict a label (``logits_to_keep``), mean cross-entropy over the labels.

Time is guarded by ``--budget-s``: each row gets an equal share of the time left when it starts and stops timing
once that share is spent (after at least 3 timed steps; the note column says so), so every row gets measured even
when compilation is slow; rows that start after the budget is spent are skipped with a note. Rows are printed as they
finish, so a run cut short still leaves the rows it completed. A row that runs out of GPU memory prints ``OOM`` and
the check goes on.

After the training table, a second one times batch-1 decoding of each model (bf16, sdpa) as the runtime's model
policy runs it (:func:`clocktune.runtime.incremental.measure_rates`: a KV cache, the streaming mask): the prefill
and decode rates and per-action overhead of a device profile, to set against the ``h200-3b`` profile the default
operating point charges (20,000 and 150 tokens/s, 0.01 s). It gets ``DECODE_RESERVE_S`` per model of the budget.

A third table gives the speculative-decoding cost model's inputs per model (decode step, ``v(5)``, each self-drafter's
``c``) and the acceptance each drafter needs to pay by 10% (random weights have no meaningful acceptance of their own).

``--tiny`` swaps in 2-layer configs (hidden 64, vocab 1000) and 1024-token rows, and runs on CPU when there is no
GPU. flex_attention has no backward on CPU, so there the streaming rows use sdpa with the additive float mask that
``attention_inputs`` builds for sdpa, and the attention column says so. ``tests/test_gpu_check.py`` runs it so.
"""

from __future__ import annotations

import argparse
import gc
import math
import random
import sys
import time
import traceback
import warnings
from dataclasses import dataclass

import peft
import torch
import transformers
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

from clocktune.collate import IGNORE_INDEX, StreamingCollator, pack_best_fit
from clocktune.masks import attention_inputs
from clocktune.runtime.drafters import make_drafter
from clocktune.runtime.incremental import Rates, measure_rates, measure_verify_ratios
from clocktune.runtime.speculation_costs import describe_roofline, measure_draft_ratio, measure_roofline
from clocktune.runtime.speculative import SpeculationCosts, break_even_acceptance

WARMUP_STEPS = 3
MIN_TIMED_STEPS = 3  # a row stops early for time only after this many timed steps
DEFAULT_PEAK_TFLOPS = 790.0  # the lent H200's measured dense bf16 matmul rate (STACK-NOTES): the MFU ceiling
# Model FLOPs per parameter and token: forward 2, backward 4 (input and weight gradients); a frozen base (LoRA) has
# no weight gradient, so 2 + 2. Recomputation under gradient checkpointing is not model FLOPs.
FLOPS_PER_PARAM_TOKEN = {"lora": 4, "full": 6}
LEARNING_RATE = {"lora": 2e-4, "full": 1e-5}  # the 3B recipes' rates; they only keep the updates realistic
LORA = {"r": 16, "lora_alpha": 32, "lora_dropout": 0.05, "target_modules": "all-linear", "task_type": "CAUSAL_LM"}

# The real configs (STACK-NOTES "Real model configs"); rope_parameters: transformers 5's rope_theta + rope_scaling.
ARCHITECTURES = {
    "qwen2.5": (
        Qwen2Config,
        {
            "hidden_size": 2048,
            "intermediate_size": 11008,
            "num_hidden_layers": 36,
            "num_attention_heads": 16,
            "num_key_value_heads": 2,
            "vocab_size": 151936,
            "max_position_embeddings": 32768,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1e6},
            "tie_word_embeddings": True,
            "rms_norm_eps": 1e-6,
        },
    ),
    "llama3.2": (
        LlamaConfig,
        {
            "hidden_size": 3072,
            "intermediate_size": 8192,
            "num_hidden_layers": 28,
            "num_attention_heads": 24,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "vocab_size": 128256,
            "max_position_embeddings": 131072,
            "rope_parameters": {
                "rope_type": "llama3",
                "rope_theta": 500000.0,
                "factor": 32.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
            },
            "tie_word_embeddings": True,
            "rms_norm_eps": 1e-5,
        },
    ),
}
TINY = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 1000,
}
TINY_MAX_LENGTH = 1024

# Synthetic renderings. Sizes scale with the row length in --tiny so that rows still pack several renderings.
RENDERING_TOKENS = (800, 3000)
SINK_TOKENS = (300, 700)
EVENT_TOKENS = (8, 64)
EVENT_GAP_S = (0.1, 2.0)
HIDDEN_AFTER_S = (0.2, 3.0)  # a superseded partial stays visible this long after it arrived
# Shares of the events after the sink prefix (~75% of the tokens): ~15% of all tokens carry labels, ~3% are hidden.
AGENT_EVENT_SHARE = 0.2
HIDDEN_EVENT_SHARE = 0.045
MAX_PACKING_MISSES = 8  # renderings in a row that failed to fit close a batch: rows nearly full, as the trainer packs
ATTENTIONS = ("streaming", "causal")
BATCH_FIELDS = ("input_ids", "labels", "segment_ids", "time", "visible_until", "sink")


@dataclass(frozen=True)
class BatchStats:
    """What the fixed batches contain, for the header."""

    shape: tuple[int, int]
    renderings: float  # per batch
    real_share: float  # non-pad tokens / all positions
    hidden_share: float  # of real tokens, those with a finite visible_until
    label_share: float  # of real tokens, those carrying a label
    kept_share: float  # positions whose logits are computed (logits_to_keep) / positions


@dataclass(frozen=True)
class RowResult:
    timed_steps: int
    tokens_per_s: float
    mfu: float | None  # None without a known peak (CPU)
    peak_gib: float | None  # None on CPU
    warmup_s: float  # model build and warm-up steps, compilation included
    loss: float  # of the last step
    note: str = ""


def model_config(name: str, tiny: bool) -> Qwen2Config | LlamaConfig:
    """A fresh config per row: ``from_config`` writes the dtype and attention implementation into it."""
    config_class, kwargs = ARCHITECTURES[name]
    if tiny:
        kwargs = {**kwargs, **TINY}
        if "head_dim" in kwargs:
            kwargs["head_dim"] = TINY["hidden_size"] // TINY["num_attention_heads"]
    return config_class(**kwargs)


def synthetic_rendering(rng: random.Random, vocab_size: int, scale: float) -> dict[str, list]:
    """One rendering: a sink prefix at time 0, then events of user/tool tokens, agent tokens (labelled) and
    partials that a later event supersedes (finite ``visible_until``), at rising times."""
    length = rng.randint(*(round(size * scale) for size in RENDERING_TOKENS))
    sink = min(rng.randint(*(round(size * scale) for size in SINK_TOKENS)), length)
    input_ids = rng.choices(range(vocab_size), k=length)
    times = [0.0] * sink
    labels = [IGNORE_INDEX] * length
    visible_until = [math.inf] * length
    now, start = 0.0, sink
    while start < length:
        end = min(length, start + rng.randint(*EVENT_TOKENS))
        now += rng.uniform(*EVENT_GAP_S)
        times += [now] * (end - start)
        kind = rng.random()
        if kind < AGENT_EVENT_SHARE:
            labels[start:end] = input_ids[start:end]
        elif kind < AGENT_EVENT_SHARE + HIDDEN_EVENT_SHARE:
            visible_until[start:end] = [now + rng.uniform(*HIDDEN_AFTER_S)] * (end - start)
        start = end
    return {
        "input_ids": input_ids,
        "labels": labels,
        "time": times,
        "visible_until": visible_until,
        "sink": [True] * sink + [False] * (length - sink),
    }


def make_batches(
    count: int, rows: int, max_length: int, vocab_size: int, scale: float, seed: int = 0
) -> tuple[list[dict[str, torch.Tensor]], BatchStats]:
    """``count`` packed batches of ``rows`` rows, identical for every row of the table.

    ``pad_to_multiple_of=max_length`` pads every batch to the same width, so flex_attention compiles once, in the
    warm-up, instead of recompiling for a new width inside the timed steps.
    """
    rng = random.Random(seed)
    collator = StreamingCollator(max_length=max_length, pad_token_id=0, pad_to_multiple_of=max_length)
    batches, renderings = [], 0
    for _ in range(count):
        chosen: list[dict[str, list]] = []
        misses = 0
        while misses < MAX_PACKING_MISSES:
            candidate = synthetic_rendering(rng, vocab_size, scale)
            lengths = [len(rendering["input_ids"]) for rendering in chosen + [candidate]]
            if len(pack_best_fit(lengths, max_length)) <= rows:
                chosen.append(candidate)
                misses = 0
            else:
                misses += 1
        batch = collator(chosen)
        batches.append({key: batch[key] for key in BATCH_FIELDS})
        renderings += len(chosen)

    real = torch.stack([torch.isfinite(batch["time"]) for batch in batches])
    hidden = torch.stack([torch.isfinite(batch["visible_until"]) for batch in batches]) & real
    labelled = torch.stack([batch["labels"] != IGNORE_INDEX for batch in batches])
    kept = sum(int((batch["labels"][:, 1:] != IGNORE_INDEX).any(dim=0).sum()) for batch in batches)
    stats = BatchStats(
        shape=tuple(batches[0]["input_ids"].shape),
        renderings=renderings / count,
        real_share=float(real.float().mean()),
        hidden_share=int(hidden.sum()) / int(real.sum()),
        label_share=int(labelled.sum()) / int(real.sum()),
        kept_share=kept / (count * (batches[0]["input_ids"].shape[1] - 1)),
    )
    return batches, stats


def build_model(
    name: str, mode: str, implementation: str, tiny: bool, device: torch.device, dtype: torch.dtype
) -> tuple[torch.nn.Module, int]:
    """The model to train and its non-embedding parameter count N (the base model's, for LoRA too)."""
    # Built directly on the device: a 3B random init on the CPU takes longer than the rows it feeds.
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(
            model_config(name, tiny), dtype=dtype, attn_implementation=implementation
        )
    # The embedding is a lookup, and the tied LM head only runs at the label positions: neither is in N.
    embedding = model.get_input_embeddings().weight
    non_embedding = sum(param.numel() for param in model.parameters() if param is not embedding)
    # Both modes checkpoint: 4 x 8192 tokens of a 3B model keep ~120 GB of activations without it, LoRA included.
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if mode == "lora":
        model = get_peft_model(model, LoraConfig(**LORA))
    model.train()
    return model, non_embedding


def train_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: dict[str, torch.Tensor],
    implementation: str,
    causal: bool,
    dtype: torch.dtype,
) -> torch.Tensor:
    """One optimizer step with ``ClockSFTTrainer.compute_loss``'s mask and loss; returns the detached loss."""
    meta = batch
    if causal:
        # The trainer's mask_policy="causal": every token visible forever, which selects the fast path.
        meta = {**batch, "visible_until": torch.full_like(batch["visible_until"], math.inf)}
    inputs = attention_inputs(meta, implementation, None, dtype)
    targets_all = batch["labels"][:, 1:]
    positions = (targets_all != IGNORE_INDEX).any(dim=0).nonzero().squeeze(-1)
    # bf16 autocast as accelerate applies it for bf16=True (it matters for PEFT's float32 adapter weights).
    with torch.autocast(batch["input_ids"].device.type, dtype=dtype, enabled=dtype == torch.bfloat16):
        outputs = model(input_ids=batch["input_ids"], **inputs, use_cache=False, logits_to_keep=positions)
    targets = targets_all[:, positions]
    label_mask = targets != IGNORE_INDEX
    nll = torch.nn.functional.cross_entropy(
        outputs.logits.float().transpose(1, 2), targets.masked_fill(~label_mask, 0), reduction="none"
    ).masked_fill(~label_mask, 0.0)
    loss = nll.sum() / label_mask.sum().clamp(min=1)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach()


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_row(
    name: str,
    mode: str,
    attention: str,
    batches: list[dict[str, torch.Tensor]],
    real_tokens: list[int],
    args: argparse.Namespace,
    device: torch.device,
    row_deadline: float,
) -> RowResult:
    """Build, warm up and time one (model, mode, attention) row.

    The model and optimizer live only in this frame, so they are freed when it returns or raises.
    """
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32  # the trainer's bf16 default, by device
    implementation = "flex_attention" if attention == "streaming" and device.type == "cuda" else "sdpa"
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    started = time.monotonic()
    torch.manual_seed(0)
    model, non_embedding = build_model(name, mode, implementation, args.tiny, device, dtype)
    trainable = [param for param in model.parameters() if param.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=LEARNING_RATE[mode], fused=device.type == "cuda")

    timed_from = tokens = 0
    note = ""
    for step, batch in enumerate(batches):
        if step == WARMUP_STEPS:
            synchronize(device)
            timed_from = time.monotonic()
            warmup_s = timed_from - started
        loss = train_step(model, optimizer, batch, implementation, attention == "causal", dtype)
        timed_steps = step + 1 - WARMUP_STEPS
        if timed_steps > 0:
            tokens += real_tokens[step]
            last = step == len(batches) - 1
            if not last and timed_steps >= MIN_TIMED_STEPS and time.monotonic() > row_deadline:
                note = f"time share spent: timed {timed_steps} of {len(batches) - WARMUP_STEPS} steps"
                break
    synchronize(device)
    elapsed = time.monotonic() - timed_from
    tokens_per_s = tokens / elapsed
    mfu = None
    if device.type == "cuda":
        mfu = FLOPS_PER_PARAM_TOKEN[mode] * non_embedding * tokens_per_s / (args.peak_tflops * 1e12)
    peak_gib = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
    return RowResult(timed_steps, tokens_per_s, mfu, peak_gib, warmup_s, float(loss), note)


ROW_FORMAT = "{:<13} {:<4} {:<15} {:>5} {:>10} {:>6} {:>8} {:>9} {:>7}  {}"
DECODE_FORMAT = "{:<13} {:>14} {:>13} {:>11} {:>18}  {}"
DECODE_HEADER = DECODE_FORMAT.format(
    "model", "prefill tok/s", "decode tok/s", "overhead s", "20-token action s", ""
).rstrip()
# Kept from the training rows' budget for the decoding rows: building a bf16 3B on the GPU and timing it.
DECODE_RESERVE_S = 30.0
SPECULATION_DRAFTERS = ("layer_skip", "int8", "int4")
SPECULATION_FORMAT = "{:<13} {:>8} {:>6} " + " ".join("{:>17}" for _ in SPECULATION_DRAFTERS) + "  {}"
SPECULATION_HEADER = SPECULATION_FORMAT.format(
    "model", "step ms", "v(5)", *(f"{name} c / α≥" for name in SPECULATION_DRAFTERS), ""
).rstrip()
SPECULATION_RESERVE_S = 45.0  # a bf16 3B again, its int8 and int4 copies, the timings
TABLE_HEADER = ROW_FORMAT.format(
    "model", "mode", "attention", "steps", "tokens/s", "MFU", "peak GiB", "warm-up s", "loss", "note"
)


def row_error(error: Exception) -> str:
    """Prints the traceback of a row that broke and returns the row's text for the table."""
    traceback.print_exc()
    return f"error: {type(error).__name__}: {(str(error).splitlines() or [''])[0]}"


def release_memory(device: torch.device) -> None:
    """Frees the last row's model before the next row builds its own."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def build_inference_model(name: str, tiny: bool, device: torch.device) -> torch.nn.Module:
    """A freshly built model for batch-1 decoding, bf16 on a GPU, in eval mode."""
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(model_config(name, tiny), dtype=dtype, attn_implementation="sdpa")
    return model.eval()


def run_decode_row(name: str, tiny: bool, device: torch.device) -> Rates:
    """Batch-1 reading and writing of a freshly built model, timed as the runtime's policy runs it."""
    model = build_inference_model(name, tiny, device)
    sizes = {"context_tokens": 256, "prefill_tokens": 64} if tiny else {}
    return measure_rates(model, **sizes)


def format_decode_row(model: str, result: Rates | str) -> str:
    """A line of the decoding table; ``result`` is the rates or the text of a row without them."""
    if isinstance(result, str):
        return DECODE_FORMAT.format(model, "", "", "", "", result).rstrip()
    # DeviceProfile.action_s(20), written out: clocktune.clock needs pydantic, which the device image may lack.
    action_s = result.action_overhead_s + 20 / result.decode_tokens_per_s
    return DECODE_FORMAT.format(
        model,
        f"{result.prefill_tokens_per_s:,.0f}",
        f"{result.decode_tokens_per_s:.1f}",
        f"{result.action_overhead_s:.4f}",
        f"{action_s:.3f}",
        "",
    ).rstrip()


def run_speculation_row(name: str, tiny: bool, device: torch.device) -> tuple[SpeculationCosts, dict[str, str]]:
    """The cost model's inputs on a freshly built model, and why a drafter could not be timed."""
    model = build_inference_model(name, tiny, device)
    context = 256 if tiny else 1024
    step_s, verify = measure_verify_ratios(model, context, max_tokens=7)
    ratios, errors = {}, {}
    for drafter in SPECULATION_DRAFTERS:
        try:
            ratios[drafter] = measure_draft_ratio(make_drafter(drafter, model), model, context)
        except Exception as error:  # a missing kernel (torchao's int4 on CPU needs mslk) must not cost the others
            errors[drafter] = f"{type(error).__name__}: {error}"
    roofline = measure_roofline(model, context, batches=(1, 4, 16, 64), repeats=2)[0]  # the engine's, by batch
    return SpeculationCosts(step_s, verify, ratios, roofline=roofline), errors


def format_speculation_row(model: str, result: tuple[SpeculationCosts, dict[str, str]] | str) -> str:
    """The speculation table's line of a model (and a line per drafter that could not be timed)."""
    if isinstance(result, str):
        return SPECULATION_FORMAT.format(model, "", "", *("" for _ in SPECULATION_DRAFTERS), result).rstrip()
    costs, errors = result
    cells = []
    for drafter in SPECULATION_DRAFTERS:
        ratio = costs.draft_ratio.get(drafter)
        alpha = None if ratio is None else break_even_acceptance(ratio, costs.verify)
        cells.append("n/a" if ratio is None else f"{ratio:.3f} / {'never' if alpha is None else f'{alpha:.2f}'}")
    line = SPECULATION_FORMAT.format(model, f"{costs.step_s * 1000:.2f}", f"{costs.verify(5):.2f}", *cells, "")
    return "\n".join(
        [line.rstrip(), f"  {describe_roofline(costs)}", *(f"  {d} n/a: {why}" for d, why in errors.items())]
    )


def format_row(model: str, mode: str, attention: str, result: RowResult | str) -> str:
    """A table line; ``result`` is a RowResult or the text of a row without one (OOM, skipped, error)."""
    if isinstance(result, str):
        return ROW_FORMAT.format(model, mode, attention, "", "", "", "", "", "", result).rstrip()
    return ROW_FORMAT.format(
        model,
        mode,
        attention,
        result.timed_steps,
        f"{result.tokens_per_s:.0f}",
        "n/a" if result.mfu is None else f"{100 * result.mfu:.1f}%",
        "n/a" if result.peak_gib is None else f"{result.peak_gib:.1f}",
        f"{result.warmup_s:.1f}",
        f"{result.loss:.3f}",
        result.note,
    ).rstrip()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20, help=f"steps per row, the first {WARMUP_STEPS} untimed")
    parser.add_argument("--max-length", type=int, help=f"row length (default 8192; {TINY_MAX_LENGTH} with --tiny)")
    parser.add_argument("--rows", type=int, default=4, help="packed rows per batch")
    parser.add_argument("--models", nargs="+", choices=list(ARCHITECTURES), default=list(ARCHITECTURES))
    parser.add_argument("--modes", nargs="+", choices=list(FLOPS_PER_PARAM_TOKEN), default=list(FLOPS_PER_PARAM_TOKEN))
    parser.add_argument(
        "--budget-s", type=float, default=420.0, help="seconds for all rows; each gets an equal share of what is left"
    )
    parser.add_argument("--peak-tflops", type=float, default=DEFAULT_PEAK_TFLOPS, help="MFU ceiling (bf16 dense)")
    parser.add_argument("--tiny", action="store_true", help="tiny configs and rows; runs on CPU without a GPU")
    args = parser.parse_args(argv)
    if args.steps <= WARMUP_STEPS:
        parser.error(f"--steps must exceed the {WARMUP_STEPS} warm-up steps")
    if args.max_length is None:
        args.max_length = TINY_MAX_LENGTH if args.tiny else 8192
    return args


def print_model_rows(run, format_line, args: argparse.Namespace, device: torch.device, deadline: float) -> bool:
    """Prints a row per model of a batch-1 table (``run(name, tiny, device)``); returns whether any row broke."""
    failed = False
    for name in args.models:
        if time.monotonic() > deadline:
            result = f"skipped: --budget-s {args.budget_s:.0f} spent"
        else:
            try:
                result = run(name, args.tiny, device)
            except Exception as error:  # the rows before keep their results
                result, failed = row_error(error), True
            release_memory(device)
        print(format_line(name + ("-tiny" if args.tiny else "-3b"), result), flush=True)
    return failed


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    deadline = started + args.budget_s
    reserve_s = DECODE_RESERVE_S + SPECULATION_RESERVE_S
    train_deadline = deadline - (0.0 if args.tiny else reserve_s * len(args.models))
    if torch.cuda.is_available():
        device = torch.device("cuda")
        properties = torch.cuda.get_device_properties(device)
        device_text = f"{properties.name}, {properties.total_memory / 2**30:.0f} GiB"
    elif args.tiny:
        device = torch.device("cpu")
        device_text = f"cpu, {torch.get_num_threads()} threads"
    else:
        print("gpu_check needs a CUDA device; use --tiny to run the tiny configs on CPU", file=sys.stderr)
        return 2
    # Each model compiles flex_attention for its own static shapes; without this, the second model's compile would
    # mark the head dimensions dynamic and its kernels would depend on the row order.
    torch._dynamo.config.automatic_dynamic_shapes = False
    # transformers 5.2x renamed gradient checkpointing (the old names still work, and 5.17 has only those); its
    # warnings, from this script and from PEFT, would break up the table.
    warnings.filterwarnings("ignore", message=".*gradient_checkpointing", category=FutureWarning)

    vocab_size = TINY["vocab_size"] if args.tiny else min(ARCHITECTURES[name][1]["vocab_size"] for name in args.models)
    scale = args.max_length / 8192 if args.tiny else 1.0
    batches, stats = make_batches(args.steps, args.rows, args.max_length, vocab_size, scale)
    real_tokens = [int(torch.isfinite(batch["time"]).sum()) for batch in batches]
    # Moved once, before any row: the masks are then built on the device from device tensors, inside the timed steps.
    batches = [{key: value.to(device) for key, value in batch.items()} for batch in batches]

    print(
        f"gpu_check: torch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__}; "
        f"device {device_text}{'; TINY configs' if args.tiny else ''}"
    )
    print(
        f"batches: {args.steps} x {list(stats.shape)}, {stats.renderings:.1f} renderings each, "
        f"{100 * stats.real_share:.1f}% real tokens; of these {100 * stats.hidden_share:.1f}% hidden, "
        f"{100 * stats.label_share:.1f}% labelled; logits kept at {100 * stats.kept_share:.1f}% of positions"
    )
    print(
        f"training: {'bf16 (autocast)' if device.type == 'cuda' else 'float32'}, gradient checkpointing (non-reentrant)"
        f" in both modes, AdamW (fused on CUDA); LoRA r={LORA['r']} alpha={LORA['lora_alpha']} all-linear; {WARMUP_STEPS} warm-up "
        "steps untimed; tokens/s counts non-pad tokens"
    )
    print(
        f"MFU = model FLOPs / {args.peak_tflops:.0f} TFLOP/s: full 6*N*T, LoRA 4*N*T (frozen base: forward + "
        "input-gradient backward); N = non-embedding parameters; attention, LM head, adapter and "
        "checkpoint-recompute FLOPs ignored"
    )
    print()
    print(TABLE_HEADER)

    label_suffix = "-tiny" if args.tiny else "-3b"
    streaming_label = "flex streaming" if device.type == "cuda" else "sdpa streaming"
    results: dict[tuple[str, str, str], RowResult] = {}
    failed = False
    # Mode-major: the LoRA rows of both models come first, so if the budget runs out it cuts the full fine-tunes.
    plan = [(mode, name, attention) for mode in args.modes for name in args.models for attention in ATTENTIONS]
    for index, (mode, name, attention) in enumerate(plan):
        now = time.monotonic()
        if now > train_deadline:
            result: RowResult | str = f"skipped: --budget-s {args.budget_s:.0f} spent"
        else:
            row_deadline = now + (train_deadline - now) / (len(plan) - index)
            try:
                result = run_row(name, mode, attention, batches, real_tokens, args, device, row_deadline)
                results[name, mode, attention] = result
            except torch.cuda.OutOfMemoryError:
                result = "OOM"
            except Exception as error:  # one broken row must not cost the others their results
                result, failed = row_error(error), True
            release_memory(device)
        label = streaming_label if attention == "streaming" else "sdpa causal"
        print(format_row(name + label_suffix, mode, label, result), flush=True)

    print()
    print("streaming/causal tokens/s:")
    for mode in args.modes:
        for name in args.models:
            streaming, causal = results.get((name, mode, "streaming")), results.get((name, mode, "causal"))
            ratio = (
                "n/a" if streaming is None or causal is None else f"{streaming.tokens_per_s / causal.tokens_per_s:.2f}"
            )
            print(f"  {name + label_suffix:<13} {mode:<4} {ratio}")

    # What the runtime's h200-3b profile assumes (20,000 / 150 / 0.01) against what this device does.
    print()
    print(
        f"batch-1 decoding as the runtime's model policy runs it (KV cache, streaming mask, sdpa, "
        f"{'bf16' if device.type == 'cuda' else 'float32'}; the rates of a device profile):"
    )
    print(DECODE_HEADER)
    failed |= print_model_rows(run_decode_row, format_decode_row, args, device, deadline)

    print()
    cache = "256" if args.tiny else "1,024"
    print(f"speculative decoding's costs (a {cache}-token cache): c, and the acceptance at which a drafter pays 10%:")
    print(SPECULATION_HEADER)
    failed |= print_model_rows(run_speculation_row, format_speculation_row, args, device, deadline)
    print(f"total {time.monotonic() - started:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
