"""``clocktune-datagen``: generate, validate and show streaming dialogue timelines.

Examples:
    clocktune-datagen generate --config configs/datagen/default.yaml --num 1000 --seed 0 --out data/demo
    clocktune-datagen generate --domain examples/pharmacy.yaml --num 200 --out data/pharmacy
    clocktune-datagen validate data/demo/data/*.jsonl [--strict]
    clocktune-datagen show data/demo/data/train-00000-of-00002.jsonl --index 3 --png timeline.png
    clocktune-datagen push data/demo --repo-id me/clocktune-demo
    clocktune-datagen import-bfcl --category multi_turn_base --out data/bfcl-base
    clocktune-datagen import-chat examples/conversations.jsonl --out data/chat
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clocktune.cli.arguments import (
    add_trust_flag,
    check_out_apart,
    non_negative_int,
    output_file,
    output_folder,
    positive_int,
    run_command,
)

DOMAIN_FILE_SUFFIXES = (".yaml", ".yml", ".json")


def _dialogue_count(text: str) -> int:
    # --num: a positive integer up to the writer's cap, refused by argparse before anything is built.
    from data_gen.writer import MAX_DIALOGUES

    value = positive_int(text)
    if value > MAX_DIALOGUES:
        raise argparse.ArgumentTypeError(f"must be ≤ {MAX_DIALOGUES:,} (generate more as several runs), got {text}")
    return value


def _print_stats(stats: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="dataset statistics", show_header=True)
    table.add_column("statistic")
    table.add_column("value", justify="right")
    for key, value in stats.items():
        if isinstance(value, dict):
            value = ", ".join(f"{name} {count}" for name, count in value.items())
        table.add_row(key, str(value))
    Console().print(table)


def cmd_generate(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from data_gen.config import load_config
    from data_gen.writer import GenerationJob, run_generation

    config = load_config(args.config)
    if args.teacher is not None:
        config = replace(config, teacher=args.teacher)
    if args.domain:
        # A path names a declarative domain file, anything else a registered domain; both replace the config's.
        files = [name for name in args.domain if Path(name).suffix in DOMAIN_FILE_SUFFIXES or Path(name).is_file()]
        names = [name for name in args.domain if name not in files]
        config = replace(config, domains=names, domain_files=files)
    job = GenerationJob(config, args.num, args.seed, Path(args.out), args.format, args.shard_size)
    stats = run_generation(job, num_proc=args.num_proc, progress=not args.quiet)
    if not args.quiet:
        _print_stats(stats)
        print(f"wrote {job.num_shards} shard(s) to {job.out_dir / 'data'} and {job.out_dir / 'stats.json'}")
    return 0


def _expand(paths: list[str]) -> list[Path]:
    files = []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            files += sorted(p for p in path.rglob("*") if p.suffix in (".jsonl", ".parquet"))
        else:
            files.append(path)
    return files


def _replay_check(unreplayed: dict[str, tuple[int, str]], trust_domain_code: bool) -> Callable[..., list]:
    """The ground-truth rule of ``validate``, counting the timelines no backend serves (by domain, with why).

    A timeline whose domain file would run code the user did not trust stops the command (the error propagates):
    the refusal is one line naming the module and the flag, not a count among the unreplayed.
    """
    from data_gen.backends import backend_factory, check_ground_truth_state
    from data_gen.declarative import UntrustedDomainCodeError

    def check(timeline: Any, path: str, line: int) -> list:
        try:
            reason = "" if backend_factory(timeline, trust_domain_code) is not None else "no plugin serves it"
        except UntrustedDomainCodeError as error:
            raise UntrustedDomainCodeError(f"{path}:{line}: {error}") from None
        except ValueError as error:
            reason = str(error)
        if reason:
            count, _ = unreplayed.get(timeline.domain, (0, reason))
            unreplayed[timeline.domain] = (count + 1, reason)
            return []
        return check_ground_truth_state(timeline, path, line, trust_domain_code)

    return check


def cmd_validate(args: argparse.Namespace) -> int:
    from clocktune.timeline.validate import validate_file
    from data_gen.declarative import UntrustedDomainCodeError

    total, bad_lines, issues_found = 0, 0, 0
    unreplayed: dict[str, tuple[int, str]] = {}
    check = _replay_check(unreplayed, args.trust_domain_code)
    files = []
    for name in args.paths:
        expanded = _expand([name])
        if not expanded:
            # A folder without timeline files validates nothing: passing it would hide a wrong path.
            print(f"{name}:0:-: no timelines in {name}")
            issues_found += 1
        files += expanded
    for path in files:
        if not path.exists():
            print(f"{path}:0:-: no such file")
            issues_found += 1
            continue
        try:
            count, issues = validate_file(path, check)
        except UntrustedDomainCodeError:
            raise
        except (OSError, UnicodeDecodeError, ValueError) as error:
            print(f"{path}:0:-: cannot read ({error})")
            issues_found += 1
            continue
        total += count
        issues_found += len(issues)
        bad_lines += len({issue.line for issue in issues if issue.line})  # line 0 is the file, not a timeline
        for issue in issues:
            print(issue)
    if unreplayed:
        # Valid without a replay is weaker than valid: say so, so that a missing plugin or domain file is noticed.
        skipped = sum(count for count, _ in unreplayed.values())
        domains = "; ".join(f"{domain} ({count}: {reason})" for domain, (count, reason) in sorted(unreplayed.items()))
        level = "error" if args.strict else "warning"
        print(f"{level}: ground truth of {skipped} timeline(s) not replayed, no tool backend for domain(s) {domains}")
        issues_found += 1 if args.strict else 0
    if issues_found:
        print(f"{issues_found} issue(s) on {bad_lines} of {total} timeline(s)")
        return 1
    print(f"{total} timeline(s) valid")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from clocktune.timeline.io import iter_timeline_file
    from clocktune.timeline.show import draw_gantt, format_timeline

    items = list(iter_timeline_file(args.file))
    if not items:
        print(f"{args.file}:0:-: no timelines in {args.file}", file=sys.stderr)
        return 1
    if not 0 <= args.index < len(items):
        print(f"{args.file}: index {args.index} out of range (0..{len(items) - 1})", file=sys.stderr)
        return 1
    line, item = items[args.index]
    if isinstance(item, list):
        for issue in item:
            print(issue, file=sys.stderr)
        return 1
    print(format_timeline(item))
    if args.png:
        draw_gantt(item, args.png)
        print(f"wrote {args.png}")
    return 0


def cmd_push(args: argparse.Namespace) -> int:
    from clocktune.hub import push_dataset

    url = push_dataset(args.dir, args.repo_id, private=args.private)
    print(f"pushed {args.dir} to {url}")
    return 0


def cmd_import_bfcl(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from data_gen.config import load_config
    from data_gen.importers.bfcl import import_bfcl

    check_out_apart(args.out, args.data_dir, "--data-dir")
    config = load_config(args.config)
    if args.teacher is not None:
        config = replace(config, teacher=args.teacher)
    result = import_bfcl(
        args.category, Path(args.out), args.limit, args.seed, config, bfcl_dir=args.bfcl_dir, data_dir=args.data_dir
    )
    for entry_id, reason in result["skipped"].items():
        print(f"skipped {entry_id}: {reason}")
    print(
        f"imported {result['written']} of {result['entries']} {args.category} entries to {result['path']} "
        f"({len(result['skipped'])} skipped) in {result['seconds']:.1f} s"
    )
    return 0


def cmd_import_chat(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from data_gen.config import load_config
    from data_gen.importers.chat import ChatImportError, import_chat

    check_out_apart(args.out, args.source, "source")
    config = load_config(args.config)
    if args.teacher is not None:
        config = replace(config, teacher=args.teacher)
    try:
        result = import_chat(args.source, Path(args.out), args.limit, args.seed, config, name=args.name)
    except ChatImportError as error:
        # Every bad row, as validate lists them; nothing was written.
        for issue in error.issues:
            print(issue)
        print(str(error))
        return 1
    print(f"imported {result['written']} conversation(s) to {result['path']} in {result['seconds']:.1f} s")
    print("calls by the kinds of their arguments (a call counts once under each kind it has):")
    print(f"  {'argument kind':<14} {'before the end':>14} {'at the end':>10}")
    for kind, counts in result["placement"].items():
        print(f"  {kind:<14} {counts['early']:>14} {counts['end']:>10}")
    print(f"{result['at_end']} conversation(s) with every call at the end of speech: {result['at_end_path']}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``clocktune-datagen`` argument parser."""
    parser = argparse.ArgumentParser(prog="clocktune-datagen", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    gen = sub.add_parser("generate", help="generate timelines into sharded files with stats.json")
    gen.add_argument("--config", default=None, help="generator YAML (defaults when omitted)")
    gen.add_argument("--num", type=_dialogue_count, required=True, help="number of dialogues (at most 10,000,000)")
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--out", type=output_folder, required=True, help="output folder (shards in OUT/data)")
    gen.add_argument("--num-proc", type=positive_int, default=1)
    gen.add_argument("--format", choices=("jsonl", "parquet"), default="jsonl")
    gen.add_argument("--teacher", choices=("speculative", "sync"), default=None, help="overrides the config")
    gen.add_argument("--shard-size", type=positive_int, default=500)
    gen.add_argument(
        "--domain",
        action="append",
        default=None,
        help="a declarative domain file (.yaml/.json, see data_gen/declarative) or a registered domain's name; "
        "repeatable; replaces the config's domains and domain_files",
    )
    gen.add_argument("--quiet", action="store_true")
    gen.set_defaults(func=cmd_generate)

    val = sub.add_parser("validate", help="check timeline files; exit 1 listing file:line:field of every issue")
    val.add_argument("paths", nargs="+", help=".jsonl/.parquet files or folders")
    val.add_argument(
        "--strict", action="store_true", help="a timeline whose ground truth no backend can replay is an issue"
    )
    add_trust_flag(val)
    val.set_defaults(func=cmd_validate)

    show = sub.add_parser("show", help="print one timeline and optionally draw it")
    show.add_argument("file")
    show.add_argument("--index", type=non_negative_int, default=0, help="0-based position in the file")
    show.add_argument("--png", type=output_file, default=None, help="write a Gantt chart here")
    show.set_defaults(func=cmd_show)

    bfcl = sub.add_parser("import-bfcl", help="import a BFCL v4 multi-turn category as timelines (needs `make bfcl`)")
    bfcl.add_argument(
        "--category",
        required=True,
        choices=("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context"),
    )
    bfcl.add_argument("--out", type=output_folder, required=True, help="output folder (timelines in OUT/data)")
    bfcl.add_argument("--limit", type=positive_int, default=None, help="import only the first N entries")
    bfcl.add_argument("--seed", type=int, default=0)
    bfcl.add_argument("--config", default=None, help="generator YAML: speech, latencies, device, teacher")
    bfcl.add_argument("--teacher", choices=("speculative", "sync"), default=None, help="overrides the config")
    bfcl.add_argument("--bfcl-dir", default=None, help="bfcl_eval folder (default $CLOCKTUNE_BFCL_DIR or the cache)")
    bfcl.add_argument("--data-dir", default=None, help="folder with the entry files (default: the wheel's data)")
    bfcl.set_defaults(func=cmd_import_bfcl)

    chat = sub.add_parser(
        "import-chat", help="import tool-calling conversations (messages + tools) as timelines; exit 1 on bad rows"
    )
    chat.add_argument("source", help=".jsonl/.json/.parquet file, a saved datasets folder, or a folder of files")
    chat.add_argument("--out", type=output_folder, required=True, help="output folder (timelines in OUT/data)")
    chat.add_argument("--limit", type=positive_int, default=None, help="import only the first N rows")
    chat.add_argument("--seed", type=int, default=0)
    chat.add_argument("--name", default=None, help="dataset name, the timelines' task (default: the source's name)")
    chat.add_argument("--config", default=None, help="generator YAML: speech, latencies, device, teacher")
    chat.add_argument("--teacher", choices=("speculative", "sync"), default=None, help="overrides the config")
    chat.set_defaults(func=cmd_import_chat)

    push = sub.add_parser("push", help="upload a generated dataset folder (shards, stats.json) to the Hub")
    push.add_argument("dir", help="folder written by generate")
    push.add_argument("--repo-id", required=True, help="ORG/NAME of the dataset repo")
    push.add_argument("--private", action="store_true")
    push.set_defaults(func=cmd_push)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``clocktune-datagen``.

    Args:
        argv: Arguments without the program name; ``None`` reads ``sys.argv``.

    Returns:
        0 on success, 1 when ``validate`` or ``show`` found problems, 2 on bad input (printed as one line
        ``error: ...``; argparse prints its own usage error and exits 2 for a bad flag).
    """
    args = build_parser().parse_args(argv)
    return run_command(args.func, args)


if __name__ == "__main__":
    sys.exit(main())
