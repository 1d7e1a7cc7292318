"""``clocktune``: the library's command line.

Examples:
    clocktune schema --out timeline.schema.json
    clocktune render --input data/demo/data --tokenizer embedded --model-format chatml --out runs/rendered
    clocktune inspect data/demo/data/train-00000-of-00002.jsonl --index 3 --tokenizer runs/rendered/tokenizer
    clocktune train --config configs/smollm2-135m/sft_lora_cpu.yaml --max_steps 20
    clocktune push --checkpoint runs/demo/checkpoint --repo-id me/smollm2-realtime --merge-lora
    clocktune profile --model embedded --out runs/cpu-135m.yaml
    clocktune eval --data data/eval/data --profile runs/cpu-135m.yaml --out runs/eval

Errors in the input (a missing file, a line that is not a timeline, a tokenizer of another encoding) print
``error: ...`` naming ``file:line:field`` where there is one, and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

DEFAULT_CODEC = "abs_bins"


def cmd_schema(args: argparse.Namespace) -> int:
    """``clocktune schema``: prints or writes the JSON Schema of one timeline line.

    Args:
        args: The parsed command line.

    Returns:
        The exit status, 0; errors are raised for :func:`main` to report.
    """
    from clocktune.timeline.io import dumps_schema

    text = dumps_schema()
    if args.out:
        Path(args.out).write_text(text + "\n")
    else:
        print(text)
    return 0


def load_tokenizer(name: str) -> Any:
    """Loads a tokenizer by path or Hub id; ``embedded`` is the embedded SmolLM2 (converted on first use).

    Args:
        name: A folder, a Hub id, or ``"embedded"``.

    Returns:
        The ``AutoTokenizer``.

    Raises:
        FileNotFoundError: When a path (starting with ``/``, ``.`` or ``~``) does not exist.
        OSError: When transformers cannot load it.
    """
    from transformers import AutoTokenizer

    from clocktune.models import EMBEDDED, resolve_model_path

    if name == EMBEDDED:
        name = resolve_model_path(name)
    elif name.startswith(("/", ".", "~")) and not Path(name).expanduser().exists():
        # Otherwise transformers reports it as a malformed Hub id.
        raise FileNotFoundError(f"{name}: no such tokenizer folder")
    return AutoTokenizer.from_pretrained(Path(name).expanduser() if name.startswith("~") else name)


def prepare_tokenizer(tokenizer: Any, model_format: str | None, time_codec: str | None) -> Any:
    """Extends a tokenizer for clocktune, or checks the encoding it already carries.

    Args:
        tokenizer: A tokenizer, extended or not; extended in place when it carries no clocktune encoding.
        model_format: The wanted model format (needed to extend); ``None`` accepts what the tokenizer carries.
        time_codec: The wanted codec name; ``None`` means the tokenizer's own, or ``abs_bins`` when extending.

    Returns:
        The tokenizer's ``clocktune.encoding.Encoding``.

    Raises:
        ValueError: When the carried encoding differs from the one asked for, or there is none and no
            ``model_format`` to extend with.
    """
    from clocktune.encoding import extend_tokenizer, get_format, load_encoding

    template = tokenizer.chat_template
    # A clocktune template that load_encoding rejects (e.g. a newer version) must fail, not be overwritten.
    if isinstance(template, str) and "clocktune-encoding" in template:
        encoding = load_encoding(tokenizer)
        carried = f"model format {encoding.model_format.name!r} and time codec {encoding.codec.name!r}"
        if model_format is not None and get_format(model_format).name != encoding.model_format.name:
            raise ValueError(f"tokenizer is already extended for {carried}, not model format {model_format!r}")
        if time_codec is not None and time_codec != encoding.codec.name:
            raise ValueError(f"tokenizer is already extended for {carried}, not time codec {time_codec!r}")
        return encoding
    if model_format is None:
        raise ValueError("the tokenizer carries no clocktune encoding: pass --model-format to extend it")
    extend_tokenizer(tokenizer, time_codec or DEFAULT_CODEC, model_format)
    return load_encoding(tokenizer)


def save_atomically(save: Callable[[Path], object], target: Path) -> None:
    """Writes a folder through a temporary sibling and renames it into place, replacing any previous one.

    A reader never sees a half-written folder: it sees the old one, then (after a brief absence) the new one.

    Args:
        save: Writes the content into the folder it is given (which exists and is empty).
        target: The folder to create or replace.
    """
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"))
    try:
        os.chmod(staging, 0o777 & ~_umask())  # mkdtemp makes it private; the result should not be
        save(staging)
        if target.exists():
            # Renaming onto an empty folder replaces it; the old content is deleted once the new one is in place.
            old = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".old"))
            os.replace(target, old)
            os.replace(staging, target)
            shutil.rmtree(old)
        else:
            os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text_atomically(path: Path, text: str) -> None:
    """Writes a text file through a temporary sibling and a rename, with the usual (umask) permissions.

    Args:
        path: The file to create or replace.
        text: Its content.
    """
    staging = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        staging.write_text(text)
        os.replace(staging, path)
    except BaseException:
        staging.unlink(missing_ok=True)
        raise


def _print_summary(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="rendered dataset", show_header=True)
    table.add_column("statistic")
    table.add_column("value", justify="right")
    table.add_row("timelines", f"{summary['timelines']:,}")
    table.add_row("tokens", f"{summary['tokens']:,}")
    table.add_row("loss-bearing tokens", f"{summary['loss_tokens']:,} ({summary['loss_share']:.1%})")
    table.add_row(
        "packing efficiency",
        f"{summary['packing_efficiency']:.1%} ({summary['packed_rows']:,} rows of {summary['max_length']:,})",
    )
    table.add_row("truncated timelines", f"{summary['truncated_timelines']:,}")
    Console().print(table)


def cmd_render(args: argparse.Namespace) -> int:
    """``clocktune render``: renders timeline files into ``OUT/dataset`` with ``OUT/tokenizer`` and a summary.

    Args:
        args: The parsed command line.

    Returns:
        The exit status, 0; errors are raised for :func:`main` to report.
    """
    from tqdm import tqdm

    from clocktune.rendered_dataset import load_timeline_files, render_timelines, summarize

    timelines = load_timeline_files(args.input)
    tokenizer = load_tokenizer(args.tokenizer)
    encoding = prepare_tokenizer(tokenizer, args.model_format, args.time_codec)
    progress = tqdm(timelines, desc="rendering", unit="timeline", disable=args.quiet)
    dataset = render_timelines(progress, tokenizer, agent_clock_loss=args.agent_clock_loss)

    if args.quiet:
        from datasets import disable_progress_bars

        disable_progress_bars()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # The tokenizer first: a dataset is only usable with the tokenizer that rendered it.
    save_atomically(tokenizer.save_pretrained, out / "tokenizer")
    save_atomically(dataset.save_to_disk, out / "dataset")
    summary = {
        **summarize(dataset, args.max_length),
        "encoding": encoding.to_dict(),
        "agent_clock_loss": args.agent_clock_loss,
        "inputs": [str(path) for path in args.input],
        "tokenizer": args.tokenizer,
    }
    write_text_atomically(out / "render_summary.json", json.dumps(summary, indent=2) + "\n")
    if not args.quiet:
        _print_summary(summary)
        print(f"wrote {out / 'dataset'}, {out / 'tokenizer'} and {out / 'render_summary.json'}")
    return 0


def _token_texts(tokenizer: Any, ids: list[int]) -> list[str]:
    # Decoded one by one, without clean-up, so the texts concatenate to the rendered text (except where a token
    # holds part of a multi-byte character).
    return [tokenizer.decode([i], skip_special_tokens=False, clean_up_tokenization_spaces=False) for i in ids]


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")


def _marked_tokens(texts: list[str], loss: list[bool], clock: list[bool]) -> str:
    """Tokens joined by ``|``; runs of loss-bearing tokens in ``[...]``, of clock tokens in ``{...}``, of
    loss-bearing clock tokens (``--agent-clock-loss``) in ``[{...}]``."""
    runs: list[tuple[tuple[bool, bool], list[str]]] = []
    for text, kind in zip(texts, zip(loss, clock, strict=True), strict=True):
        if runs and runs[-1][0] == kind:
            runs[-1][1].append(_escape(text))
        else:
            runs.append((kind, [_escape(text)]))
    brackets = {
        (False, False): ("", ""),
        (True, False): ("[", "]"),
        (False, True): ("{", "}"),
        (True, True): ("[{", "}]"),
    }
    return " ".join(f"{brackets[kind][0]}{'|'.join(tokens)}{brackets[kind][1]}" for kind, tokens in runs)


def format_inspection(timeline: Any, rendering: Any, tokenizer: Any, encoding: Any, show_system: bool) -> str:
    """Lays out a rendering token by token, one block per event, readable without colour.

    Args:
        timeline: The rendered timeline.
        rendering: ``clocktune.render.render(timeline, tokenizer, ...)``.
        tokenizer: The tokenizer that rendered it.
        encoding: Its ``clocktune.encoding.Encoding``.
        show_system: Whether to print the system prefix's tokens, not only their count.

    Returns:
        The text: a legend, the events with loss-bearing ``[...]``, clock ``{...}`` and hidden tokens marked, and
        totals.
    """
    fmt, codec = encoding.model_format, encoding.codec
    spans: dict[int, list[int]] = {}
    for position, index in enumerate(rendering.event_index):
        spans.setdefault(index, [position, position])[1] = position + 1
    hidden = sum(until != float("inf") for until in rendering.visible_until)
    loss = [label != -100 for label in rendering.labels]
    lines = [
        f"timeline {timeline.id}  {timeline.domain}/{timeline.task}  {fmt.name}, {codec.name}: "
        f"{len(rendering):,} tokens, {sum(loss):,} loss-bearing, {hidden:,} hidden at some point",
        "legend: tokens separated by |, [loss-bearing], {clock}, [{loss-bearing clock}], plain = context; "
        "HIDDEN events are invisible to every token from their visible_until time on",
    ]
    start, end = spans[-1]
    lines.append(
        f"system prefix (sink, t=0): {end - start} tokens" + ("" if show_system else ", --system prints them")
    )
    if show_system:
        texts = _token_texts(tokenizer, rendering.input_ids[start:end])
        lines.append("    " + _marked_tokens(texts, loss[start:end], [False] * (end - start)))

    prev_t = 0.0
    for index, event in enumerate(timeline.events):
        start, end = spans[index]
        # Every message is header + clock (+ state line for agent actions) + body + end + tail: the clock's tokens are
        # those overlapping the characters after the header.
        role, _ = fmt.message(event)
        clock_start = len(fmt.header(role))
        clock_end = clock_start + len(codec.encode(event.t, prev_t))
        prev_t = event.t
        texts = _token_texts(tokenizer, rendering.input_ids[start:end])
        clock, offset = [], 0
        for text in texts:
            clock.append(offset < clock_end and offset + len(text) > clock_start)
            offset += len(text)
        until = min(rendering.visible_until[start:end])
        header = f"#{index:<4} {f't={event.t:.3f}s':<12} {event.kind:<11} {event.source:<6}"
        if until != float("inf"):
            header += f"  HIDDEN from t={until:.3f}s (visible_until)"
        lines.append(header.rstrip())
        lines.append("    " + _marked_tokens(texts, loss[start:end], clock))
    return "\n".join(lines)


def cmd_inspect(args: argparse.Namespace) -> int:
    """``clocktune inspect``: prints one rendered timeline token by token (:func:`format_inspection`).

    Args:
        args: The parsed command line.

    Returns:
        The exit status, 0; errors are raised for :func:`main` to report.
    """
    from clocktune.render import render
    from clocktune.timeline.io import TimelineFormatError, iter_timeline_file

    path = Path(args.file)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    items = list(iter_timeline_file(path))
    if not 0 <= args.index < len(items):
        raise ValueError(f"{path}: index {args.index} out of range (0..{len(items) - 1})")
    _, item = items[args.index]
    if isinstance(item, list):
        raise TimelineFormatError(item)
    tokenizer = load_tokenizer(args.tokenizer)
    encoding = prepare_tokenizer(tokenizer, args.model_format, args.time_codec)
    rendering = render(item, tokenizer, agent_clock_loss=args.agent_clock_loss)
    print(format_inspection(item, rendering, tokenizer, encoding, args.system))
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    """``clocktune train --config FILE [overrides]``: the recipe of ``recipes/sft.py`` in this process.

    Args:
        args: The parsed command line; ``args.recipe_args`` go to the recipe's own parser (TRL's ``TrlParser``).

    Returns:
        The exit status, 0.
    """
    from clocktune.train.sft import run

    run(args.recipe_args)
    return 0


def _read_json(path: str | None) -> dict:
    if path is None:
        return {}
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def _codec_settings(codec: dict) -> dict:
    """``{"name": "abs_bins", "resolution": 0.1}`` as card rows: ``time_codec``, ``time_codec.resolution``."""
    return {("time_codec" if key == "name" else f"time_codec.{key}"): value for key, value in codec.items()}


def cmd_push(args: argparse.Namespace) -> int:
    """``clocktune push``: uploads a checkpoint (model or LoRA adapter), its tokenizer and a model card.

    Args:
        args: The parsed command line.

    Returns:
        The exit status, 0.
    """
    from transformers import AutoTokenizer

    from clocktune.encoding import load_encoding
    from clocktune.hub import push_checkpoint

    encoding = load_encoding(AutoTokenizer.from_pretrained(args.checkpoint))
    evaluation = {key: value for key, value in _read_json(args.eval_summary).items() if isinstance(value, int | float)}
    card_info = {
        "clock": {"model_format": encoding.model_format.name, **_codec_settings(encoding.codec.to_dict())},
        "dataset": args.dataset,
        "dataset_stats": _read_json(args.dataset_stats),
        "eval": evaluation,
    }
    url = push_checkpoint(
        args.checkpoint, args.repo_id, private=args.private, merge_lora=args.merge_lora, card_info=card_info
    )
    print(f"pushed {args.checkpoint} to {url}")
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    """``clocktune profile``: measures how fast a model reads and writes on this device, as a policy runs it.

    Args:
        args: The parsed command line.

    Returns:
        The exit status, 0.
    """
    import torch
    from rich.console import Console
    from rich.table import Table

    from clocktune.clock import PROFILES
    from clocktune.models import resolve_model_path
    from clocktune.runtime.device_profiles import measure_device_profile, save_device_profile
    from clocktune.runtime.policies import load_policy_model

    model, _ = load_policy_model(resolve_model_path(args.model))
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    model.to(device=device, dtype=getattr(torch, args.dtype) if args.dtype else None)
    parameter = next(model.parameters())
    name = args.name or f"measured-{device}"
    print(f"measuring {args.model} on {parameter.device} in {parameter.dtype} (batch 1, KV cache, streaming mask)")
    profile = measure_device_profile(model, name, context_tokens=args.context_tokens)
    table = Table(title="device profiles: seconds the virtual clock charges")
    for column in ("profile", "prefill tokens/s", "decode tokens/s", "overhead s", "20-token action s"):
        table.add_column(column, justify="left" if column == "profile" else "right")
    for row in (profile, *PROFILES.values()):
        style = "bold" if row is profile else None
        table.add_row(
            row.name,
            f"{row.prefill_tokens_per_s:,.0f}",
            f"{row.decode_tokens_per_s:,.1f}",
            f"{row.action_overhead_s:.4f}",
            f"{row.action_s(20):.3f}",
            style=style,
        )
    Console().print(table)
    if args.out:
        save_device_profile(profile, args.out)
        print(f"wrote {args.out}: clocktune eval --profile {args.out} charges these rates")
    return 0


def _default_concurrency(clock: str, local_model: bool) -> int:
    # Virtual sessions cost no real time to wait: all at once. On the wall clock a local model's forwards are
    # served one at a time (clocktune.runtime.wall_clock), so concurrent sessions would queue for them and their
    # latency would count the queue; scripted policies and endpoints overlap their waits.
    if clock == "virtual":
        return 10_000
    return 1 if local_model else 8


def cmd_eval(args: argparse.Namespace) -> int:
    """``clocktune eval``: a policy against a baseline on the same timelines; writes results, summary and plots.

    Args:
        args: The parsed command line.

    Returns:
        The exit status, 0.
    """
    from clocktune.rendered_dataset import load_timeline_files
    from clocktune.runtime.device_profiles import load_device_profile
    from clocktune.runtime.evaluate import compare_policies
    from clocktune.runtime.journal import checkpoint_stamp
    from clocktune.runtime.policies import is_checkpoint, load_policy_model, policy_factory
    from clocktune.runtime.session import SessionConfig

    timelines = load_timeline_files(args.data)[: args.limit]
    config = SessionConfig(device=load_device_profile(args.profile), clock=args.clock, failure_rate=args.failure_rate)
    baseline_model = args.baseline_model or args.model
    loaded = {path: load_policy_model(path) for path in {args.model, baseline_model} if is_checkpoint(path)}
    compare_policies(
        timelines,
        (args.policy, policy_factory(args.policy, args.model, loaded.get(args.model))),
        (args.baseline, policy_factory(args.baseline, baseline_model, loaded.get(baseline_model))),
        config,
        args.out,
        concurrency=args.concurrency or _default_concurrency(args.clock, bool(loaded)),
        extra={
            "profile": args.profile,
            "clock": args.clock,
            "failure_rate": args.failure_rate,
            "model": args.model,
            "model_stamp": checkpoint_stamp(args.model),
            "baseline_model": baseline_model,
            "baseline_model_stamp": checkpoint_stamp(baseline_model),
        },
    )
    print(f"wrote {args.out}/summary.json, results.jsonl, sessions_<policy>.jsonl and the plots")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """Builds the ``clocktune`` argument parser.

    Returns:
        The parser; each subcommand sets ``func``, the function that runs it.
    """
    from clocktune.encoding import CODECS, FORMATS

    parser = argparse.ArgumentParser(prog="clocktune", description="clock-aware fine-tuning of real-time agents")
    sub = parser.add_subparsers(dest="command", required=True)
    schema = sub.add_parser("schema", help="print the JSON Schema of one timeline line")
    schema.add_argument("--out", default=None, help="write to this file instead of stdout")
    schema.set_defaults(func=cmd_schema)

    from clocktune.models import EMBEDDED

    tokenizer_help = f"tokenizer folder or Hub id; {EMBEDDED!r} is the embedded SmolLM2-135M-Instruct"
    codec_help = f"time codec; default: the tokenizer's when already extended, else {DEFAULT_CODEC}"

    render = sub.add_parser("render", help="render timelines into a tokenized dataset with its tokenizer")
    render.add_argument("--input", nargs="+", required=True, help=".jsonl/.parquet timeline files or folders")
    render.add_argument("--tokenizer", required=True, help=tokenizer_help)
    render.add_argument("--model-format", required=True, choices=sorted(FORMATS))
    render.add_argument("--time-codec", default=None, choices=sorted(CODECS), help=codec_help)
    render.add_argument("--agent-clock-loss", action="store_true", help="train the clock of agent messages too")
    render.add_argument("--max-length", type=int, default=4096, help="row length the summary's packing assumes")
    render.add_argument("--out", required=True, help="writes OUT/dataset, OUT/tokenizer and OUT/render_summary.json")
    render.add_argument("--quiet", action="store_true", help="no progress bar or summary table")
    render.set_defaults(func=cmd_render)

    inspect = sub.add_parser("inspect", help="print one rendered timeline token by token")
    inspect.add_argument("file", help="a .jsonl/.parquet timeline file")
    inspect.add_argument("--index", type=int, default=0, help="0-based position in the file")
    inspect.add_argument("--tokenizer", required=True, help=tokenizer_help)
    inspect.add_argument("--model-format", default=None, choices=sorted(FORMATS), help="needed if not extended")
    inspect.add_argument("--time-codec", default=None, choices=sorted(CODECS), help=codec_help)
    inspect.add_argument("--agent-clock-loss", action="store_true", help="show the clock loss of agent messages")
    inspect.add_argument("--system", action="store_true", help="also print the system prefix's tokens")
    inspect.set_defaults(func=cmd_inspect)

    train = sub.add_parser("train", help="fine-tune with a recipe YAML: clocktune train --config FILE [overrides]")
    train.add_argument("recipe_args", nargs=argparse.REMAINDER, help="--config FILE, then --field value overrides")
    train.set_defaults(func=cmd_train)

    push = sub.add_parser("push", help="upload a checkpoint, its tokenizer and a model card to the Hub")
    push.add_argument("--checkpoint", required=True, help="folder written by training (model or LoRA adapter)")
    push.add_argument("--repo-id", required=True, help="ORG/NAME")
    push.add_argument("--merge-lora", action="store_true", help="merge a LoRA adapter into its base before upload")
    push.add_argument("--private", action="store_true")
    push.add_argument("--dataset", default=None, help="training dataset (Hub id or path) for the card")
    push.add_argument("--dataset-stats", default=None, help="stats.json of the training data, for the card")
    push.add_argument("--eval-summary", default=None, help="a summary.json whose numbers go in the card")
    push.set_defaults(func=cmd_push)

    from clocktune.clock import PROFILES
    from clocktune.runtime.scripted import SCRIPTED_POLICIES

    evaluate = sub.add_parser("eval", help="latency/accuracy benchmark of a policy against a baseline")
    evaluate.add_argument("--data", nargs="+", required=True, help=".jsonl/.parquet timeline files or folders")
    evaluate.add_argument("--policy", default="speculative", help=f"scripted: {', '.join(SCRIPTED_POLICIES)}")
    evaluate.add_argument("--baseline", default="sync", help="the policy the speedup divides (default: sync)")
    evaluate.add_argument(
        "--model",
        default="scripted",
        help="'scripted'/'oracle' (recorded plan), a checkpoint, or 'openai:MODEL[@URL]' (key from OPENAI_API_KEY)",
    )
    evaluate.add_argument("--baseline-model", default=None, help="checkpoint of the baseline (default: --model)")
    evaluate.add_argument(
        "--profile",
        default="h200-3b",
        help=f"device compute profile: {', '.join(sorted(PROFILES))}, or a YAML file (`clocktune profile --out`)",
    )
    evaluate.add_argument("--clock", default="virtual", choices=["virtual", "wall"])
    evaluate.add_argument("--failure-rate", type=float, default=0.0, help="injected tool failure probability")
    evaluate.add_argument("--limit", type=int, default=None, help="first N timelines only")
    evaluate.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="sessions at once (default: all on the virtual clock; on the wall clock 1 with a checkpoint, else 8)",
    )
    evaluate.add_argument(
        "--out", required=True, help="output folder; an interrupted run resumes from OUT/journal when run again"
    )
    evaluate.set_defaults(func=cmd_eval)

    profile = sub.add_parser("profile", help="measure a model's prefill and decode rates on this device")
    profile.add_argument("--model", default="embedded", help="'embedded', a checkpoint folder or a Hub id")
    profile.add_argument("--device", default=None, help="torch device (default: cuda when there is one, else cpu)")
    profile.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"], help="default: as saved")
    profile.add_argument("--context-tokens", type=int, default=1024, help="tokens in the KV cache while timing")
    profile.add_argument("--name", default=None, help="the profile's name (default: measured-<device>)")
    profile.add_argument("--out", default=None, help="write the profile here as YAML, for `clocktune eval --profile`")
    profile.set_defaults(func=cmd_profile)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``clocktune``.

    Args:
        argv: Arguments without the program name; ``None`` reads ``sys.argv``.

    Returns:
        0 on success, 2 on an input error (printed as ``error: ...``).
    """
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, OSError) as error:
        # TimelineFormatError is a ValueError listing file:line:field of each bad line.
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
