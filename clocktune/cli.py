"""``clocktune``: the library's command line. Subcommands grow with the library (render, train, eval, push).

Examples:
    clocktune schema --out timeline.schema.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def cmd_schema(args: argparse.Namespace) -> int:
    from clocktune.timeline.io import dumps_schema

    text = dumps_schema()
    if args.out:
        Path(args.out).write_text(text + "\n")
    else:
        print(text)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``clocktune`` argument parser."""
    parser = argparse.ArgumentParser(prog="clocktune", description="clock-aware fine-tuning of real-time agents")
    sub = parser.add_subparsers(dest="command", required=True)
    schema = sub.add_parser("schema", help="print the JSON Schema of one timeline line")
    schema.add_argument("--out", default=None, help="write to this file instead of stdout")
    schema.set_defaults(func=cmd_schema)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``clocktune``."""
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
