"""``clocktune``: the library's command line, its argument parsers and one short ``cmd_*`` function per command.

What the commands do lives in the library below (``clocktune.tokenizers``, ``clocktune.inspection``,
``clocktune.rendered_dataset``, ``clocktune.hub``, ``clocktune.runtime``); here it is only wired to arguments.

Examples:
    clocktune schema --out timeline.schema.json
    clocktune render --input data/demo/data --tokenizer embedded --model-format chatml --out runs/rendered
    clocktune inspect data/demo/data/train-00000-of-00002.jsonl --index 3 --tokenizer runs/rendered/tokenizer
    clocktune train --config configs/smollm2-135m/sft_lora_cpu.yaml --max_steps 20
    clocktune push --checkpoint runs/demo/checkpoint --repo-id me/smollm2-realtime --merge-lora
    clocktune profile --model embedded --out runs/cpu-135m.yaml
    clocktune eval --data data/eval/data --profile runs/cpu-135m.yaml --out runs/eval

Errors in the input (a missing file, a line that is not a timeline, a tokenizer of another encoding, a folder that
cannot be written) print ``error: ...`` naming ``file:line:field`` where there is one, and exit with status 2; a
number that makes no sense (``--limit 0``) is refused by argparse, also with status 2
(``clocktune.cli.arguments``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from clocktune.cli.arguments import (
    add_batch_size_flag,
    add_constrained_flag,
    add_trust_flag,
    check_out_apart,
    draft_name,
    non_negative_int,
    output_file,
    output_folder,
    positive_float,
    positive_int,
    probability,
    run_command,
)
from clocktune.cli.decoding_report import add_decoding_summary
from clocktune.cli.rollout import add_rollout_parser
from clocktune.cli.serve import add_serve_parsers
from clocktune.tokenizers import DEFAULT_CODEC, load_tokenizer, prepare_tokenizer


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


def _print_summary(summary: dict[str, Any]) -> None:
    """Prints ``clocktune render``'s summary as a table."""
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

    from clocktune.atomic import atomic_write_folder, atomic_write_text
    from clocktune.rendered_dataset import load_timeline_files, render_timelines, summarize

    check_out_apart(args.out, args.input, "--input")
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
    atomic_write_folder(out / "tokenizer", tokenizer.save_pretrained)
    atomic_write_folder(out / "dataset", dataset.save_to_disk)
    summary = {
        **summarize(dataset, args.max_length),
        "encoding": encoding.to_dict(),
        "agent_clock_loss": args.agent_clock_loss,
        "inputs": [str(path) for path in args.input],
        "tokenizer": args.tokenizer,
    }
    atomic_write_text(out / "render_summary.json", json.dumps(summary, indent=2) + "\n")
    if not args.quiet:
        _print_summary(summary)
        print(f"wrote {out / 'dataset'}, {out / 'tokenizer'} and {out / 'render_summary.json'}")
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    """``clocktune inspect``: prints one rendered timeline token by token (``clocktune.inspection``).

    Args:
        args: The parsed command line.

    Returns:
        The exit status, 0; errors are raised for :func:`main` to report.
    """
    from clocktune.inspection import format_inspection
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
    """``clocktune train --config FILE [overrides]``: the recipe of ``recipes/sft.py`` in this process, then the
    upload of its output when the recipe sets ``push_to_hub`` (``clocktune.cli.train_push``).

    Args:
        args: The parsed command line; ``args.recipe_args`` go to the recipe's own parser (TRL's ``TrlParser``).

    Returns:
        The exit status, 0.
    """
    from clocktune.cli.train_push import push_trained
    from clocktune.train.sft import run
    from data_gen.backends import check_domain_code, session_backends
    from data_gen.expert import experts_of_data

    # The generator's backends serve the sessions of the live evaluation (`live_eval_steps`) and of the on-policy
    # rollouts (`on_policy_rounds`), whose experts label them; the recipe's --trust-domain-code picks their trust.
    _, training_args = run(
        args.recipe_args, backends=session_backends, experts=experts_of_data, check_backends=check_domain_code
    )
    push_trained(training_args)
    return 0


def cmd_push(args: argparse.Namespace) -> int:
    """``clocktune push``: uploads a checkpoint (model or LoRA adapter), its tokenizer and a model card.

    Args:
        args: The parsed command line.

    Returns:
        The exit status, 0.
    """
    from clocktune.hub import check_checkpoint, push_checkpoint
    from clocktune.model_card import card_info_for

    check_checkpoint(args.checkpoint)  # links leaving the folder, FIFOs, devices: refused before the card reads them
    card_info = card_info_for(args.checkpoint, args.dataset, args.dataset_stats, args.eval_summary)
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
    from clocktune.runtime.device_profiles import (
        charge_drafter,
        measure_device_profile,
        measure_speculation,
        save_device_profile,
    )
    from clocktune.runtime.policy_factories import load_policy_model

    model, tokenizer = load_policy_model(resolve_model_path(args.model))
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    model.to(device=device, dtype=getattr(torch, args.dtype) if args.dtype else None)
    parameter = next(model.parameters())
    name = args.name or f"measured-{device}"
    print(f"measuring {args.model} on {parameter.device} in {parameter.dtype} (batch 1, KV cache, streaming mask)")
    profile = measure_device_profile(model, name, context_tokens=args.context_tokens)
    costs = None
    if args.drafters:
        timelines, backends = None, None
        if args.data:  # acceptance needs sessions: held-out timelines, played live under each drafter
            from clocktune.rendered_dataset import load_timeline_files
            from data_gen.backends import check_domain_code, session_backends

            timelines = load_timeline_files(args.data)[: args.limit]
            check_domain_code(timelines, args.trust_domain_code)
            backends = session_backends(args.trust_domain_code)
        costs = measure_speculation(
            model, tokenizer, args.drafters, args.context_tokens, timelines, backends, constrained=args.constrained
        )
        if args.draft != "none":
            profile = charge_drafter(profile, costs, args.draft)
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
        save_device_profile(profile, args.out, costs)
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
    from clocktune.runtime.clocks import clock_named
    from clocktune.runtime.device_profiles import load_device_profile, load_speculation_costs
    from clocktune.runtime.evaluate import compare_policies
    from clocktune.runtime.journal import checkpoint_stamp
    from clocktune.runtime.policy_factories import (
        EndpointLimits,
        bound_specs,
        is_checkpoint,
        load_policy_model,
        policy_spec,
    )
    from clocktune.runtime.session import SessionConfig
    from data_gen.backends import check_domain_code, session_backends

    check_out_apart(args.out, args.data, "--data")
    timelines = load_timeline_files(args.data)[: args.limit]
    check_domain_code(timelines, args.trust_domain_code)  # before any model loads or the journal is stamped
    clock = clock_named(args.clock)
    config = SessionConfig(device=load_device_profile(args.profile), clock=clock, failure_rate=args.failure_rate)
    baseline_model = args.baseline_model or args.model
    endpoint = EndpointLimits(args.request_timeout, args.endpoint_budget, args.allow_insecure_http)
    loaded = {path: load_policy_model(path) for path in {args.model, baseline_model} if is_checkpoint(path)}
    costs = load_speculation_costs(args.profile)  # the cost model's inputs, measured by `clocktune profile`
    policy = policy_spec(
        args.policy,
        args.model,
        loaded.get(args.model),
        endpoint,
        args.constrained,
        args.draft,
        costs,
        call_bias=args.call_bias,
        batch_size=args.batch_size,
    )
    baseline = policy_spec(
        args.baseline,
        baseline_model,
        loaded.get(baseline_model),
        endpoint,
        args.constrained,
        args.baseline_draft,
        costs,
        batch_size=args.batch_size,
    )
    compare_policies(
        timelines,
        policy,
        baseline,
        session_backends(args.trust_domain_code),
        config,
        args.out,
        bound=bound_specs(),
        concurrency=args.concurrency or _default_concurrency(args.clock, bool(loaded)),
        session_logs=args.session_logs,
        extra={
            "profile": args.profile,
            "clock": args.clock,
            "failure_rate": args.failure_rate,
            "model": args.model,
            "model_stamp": checkpoint_stamp(args.model),
            "baseline_model": baseline_model,
            "baseline_model_stamp": checkpoint_stamp(baseline_model),
            "constrained": args.constrained,
            "draft": args.draft,
            "baseline_draft": args.baseline_draft,
            "call_bias": args.call_bias,
            "batch_size": args.batch_size,
        },
    )
    add_decoding_summary(Path(args.out) / "summary.json", {"policy": policy.factory, "baseline": baseline.factory})
    sessions = ", sessions_<policy>.jsonl" if args.session_logs else ""
    print(f"wrote {args.out}/summary.json, results.jsonl{sessions} and the plots")
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
    schema.add_argument("--out", type=output_file, default=None, help="write to this file instead of stdout")
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
    render.add_argument(
        "--max-length", type=positive_int, default=4096, help="row length the summary's packing assumes"
    )
    render.add_argument(
        "--out",
        type=output_folder,
        required=True,
        help="writes OUT/dataset, OUT/tokenizer and OUT/render_summary.json",
    )
    render.add_argument("--quiet", action="store_true", help="no progress bar or summary table")
    render.set_defaults(func=cmd_render)

    inspect = sub.add_parser("inspect", help="print one rendered timeline token by token")
    inspect.add_argument("file", help="a .jsonl/.parquet timeline file")
    inspect.add_argument("--index", type=non_negative_int, default=0, help="0-based position in the file")
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
    from clocktune.runtime.policy_factories import EndpointLimits
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
    evaluate.add_argument("--failure-rate", type=probability, default=0.0, help="injected tool failure probability")
    evaluate.add_argument("--limit", type=positive_int, default=None, help="first N timelines only")
    evaluate.add_argument(
        "--request-timeout",
        type=positive_float,
        default=EndpointLimits.request_timeout_s,
        help="seconds an endpoint request may take in all, a trickling reply included (openai:... models)",
    )
    evaluate.add_argument(
        "--endpoint-budget",
        type=positive_float,
        default=EndpointLimits.session_budget_s,
        help="seconds of endpoint time one session may spend before it gives up (openai:... models)",
    )
    evaluate.add_argument(
        "--allow-insecure-http",
        action="store_true",
        help="send OPENAI_API_KEY over plain http to a host that is not loopback",
    )
    evaluate.add_argument(
        "--concurrency",
        type=positive_int,
        default=None,
        help="sessions at once (default: all on the virtual clock; on the wall clock 1 with a checkpoint, else 8)",
    )
    evaluate.add_argument(
        "--out",
        type=output_folder,
        required=True,
        help="output folder; an interrupted run resumes from OUT/journal when run again",
    )
    evaluate.add_argument(
        "--session-logs",
        action="store_true",
        help="also write each session's log as a timeline (OUT/sessions_<policy>.jsonl; several times the data's size)",
    )
    add_constrained_flag(evaluate)
    draft_help = (
        "speculative decoding of a checkpoint's actions, lossless (the same actions, faster or not): none, "
        "prompt_lookup[:N] (n-grams of at least N tokens), layer_skip[:N] (its first N layers), int8/int4 (torchao; needs it), or auto (the cost "
        "model picks from the profile's measured costs; none when nothing pays)"
    )
    evaluate.add_argument("--draft", default="none", type=draft_name, help=f"the policy's drafter: {draft_help}")
    evaluate.add_argument(
        "--baseline-draft", default="none", type=draft_name, help="the baseline's drafter (default: none)"
    )
    evaluate.add_argument(
        "--call-bias",
        type=float,
        default=0.0,
        help="added to the call marker's logit at a checkpoint's first action token while the user speaks: calls"
        " sooner, faster answers, more wrong guesses (default 0; BENCHMARKS.md, 'Speculation bias')",
    )
    add_batch_size_flag(evaluate)
    add_trust_flag(evaluate)
    evaluate.set_defaults(func=cmd_eval)

    profile = sub.add_parser("profile", help="measure a model's prefill and decode rates on this device")
    profile.add_argument("--model", default="embedded", help="'embedded', a checkpoint folder or a Hub id")
    profile.add_argument("--device", default=None, help="torch device (default: cuda when there is one, else cpu)")
    profile.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"], help="default: as saved")
    profile.add_argument(
        "--context-tokens", type=positive_int, default=1024, help="tokens in the KV cache while timing"
    )
    profile.add_argument("--name", default=None, help="the profile's name (default: measured-<device>)")
    profile.add_argument(
        "--drafters",
        nargs="*",
        type=draft_name,
        default=["prompt_lookup", "layer_skip", "int8"],
        help="drafters whose cost of speculative decoding to measure (none: skip the speculation section)",
    )
    profile.add_argument(
        "--data", nargs="+", default=None, help="held-out timelines: also measure each drafter's acceptance live"
    )
    profile.add_argument("--limit", type=positive_int, default=5, help="sessions played per drafter with --data")
    profile.add_argument(
        "--draft",
        default="none",
        type=draft_name,
        help="charge this drafter's decode rate measured on the --data sessions (default: plain decoding's)",
    )
    add_constrained_flag(profile, "the --data sessions, as `eval` does (acceptance differs between the two),")
    profile.add_argument(
        "--out", type=output_file, default=None, help="write the profile here as YAML, for `clocktune eval --profile`"
    )
    add_trust_flag(profile)
    profile.set_defaults(func=cmd_profile)

    add_rollout_parser(sub)
    add_serve_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``clocktune``.

    Args:
        argv: Arguments without the program name; ``None`` reads ``sys.argv``.

    Returns:
        0 on success, 2 on an input error (printed as ``error: ...``; a TimelineFormatError lists file:line:field
        of each bad line) or a flag argparse refuses.
    """
    parser = build_parser()
    # The recipe's flags go to its own parser (TrlParser), so `train` takes whatever it does not know itself:
    # argparse.REMAINDER alone lets a first remainder that looks like a flag (`--config`) fall out as unrecognised.
    args, unknown = parser.parse_known_args(argv)
    if args.func is cmd_train:
        args.recipe_args = unknown + args.recipe_args
    elif unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    return run_command(args.func, args)


if __name__ == "__main__":
    sys.exit(main())
