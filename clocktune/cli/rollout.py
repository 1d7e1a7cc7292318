"""``clocktune rollout``: a checkpoint plays generated training tasks live; an expert labels what it did (DAgger).

    clocktune rollout --model runs/demo/checkpoint --data runs/demo/data/train --limit 200 --out runs/demo/round1

Then train the next round on both folders: ``train_data: [runs/demo/data/train, runs/demo/round1]`` (see
``clocktune.train.rollout`` for which actions carry loss).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from clocktune.cli.arguments import (
    add_batch_size_flag,
    add_constrained_flag,
    add_trust_flag,
    check_out_apart,
    draft_name,
    output_folder,
    positive_int,
)
from clocktune.clock import PROFILES

__all__ = ["add_rollout_parser", "cmd_rollout"]


def cmd_rollout(args: argparse.Namespace) -> int:
    """``clocktune rollout``: plays, labels and writes ``OUT/data/rollouts.jsonl`` and ``OUT/summary.json``, and the
    student's decoding metrics of this run (timings, so never the same twice) to ``OUT/decoding.json``.

    Args:
        args: The parsed command line.

    Returns:
        The exit status, 0.
    """
    from clocktune.cli.decoding_report import add_decoding_summary
    from clocktune.rendered_dataset import load_timeline_files
    from clocktune.runtime.device_profiles import load_device_profile, load_speculation_costs
    from clocktune.runtime.journal import checkpoint_stamp
    from clocktune.runtime.policy_factories import load_policy_model, policy_spec
    from clocktune.runtime.session import SessionConfig
    from clocktune.train.rollout import rollout
    from data_gen.backends import check_domain_code, session_backends
    from data_gen.expert import experts_of_data

    check_out_apart(args.out, args.data, "--data")
    experts = experts_of_data(args.expert, args.data)
    timelines = load_timeline_files([args.data])[: args.limit]
    check_domain_code(timelines, args.trust_domain_code)  # before the model loads
    student = policy_spec(
        args.strategy,
        args.model,
        load_policy_model(args.model),
        constrained=args.constrained,
        draft=args.draft,
        costs=load_speculation_costs(args.profile),
        batch_size=args.batch_size,
    )
    session_config = SessionConfig(device=load_device_profile(args.profile))
    settings = {
        "model": args.model,
        "model_stamp": checkpoint_stamp(args.model),
        "data": args.data,
        "limit": args.limit,
        "expert": args.expert,
        "strategy": args.strategy,
        "profile": args.profile,
        "constrained": args.constrained,
        "draft": args.draft,
    }  # the batch size is not a setting of the run: a session's log is the same at any
    summary = rollout(
        timelines,
        student,
        experts,
        session_backends(args.trust_domain_code),
        session_config,
        args.out,
        settings,
        takeover=args.takeover,
    )
    print(
        f"{summary.sessions} sessions: the student completed {summary.completed} live "
        f"({summary.live_accuracy:.2f}), took the expert's action at {summary.agreed} of {summary.decisions} "
        f"decision points; {summary.examples} examples, labels {summary.labels}"
        + (f"; the expert took over {summary.taken_over} sessions" if args.takeover else "")
    )
    add_decoding_summary(Path(args.out) / "decoding.json", {"student": student.factory})
    print(f"wrote {args.out}/data/rollouts.jsonl, {args.out}/summary.json and {args.out}/decoding.json")
    return 0


def add_rollout_parser(sub: argparse._SubParsersAction) -> None:
    """Adds the ``rollout`` command to ``clocktune``'s subcommands.

    Args:
        sub: The subparsers of ``clocktune``.
    """
    rollout = sub.add_parser(
        "rollout", help="play a checkpoint live on training tasks; an expert labels each decision"
    )
    rollout.add_argument("--model", required=True, help="the checkpoint that plays (the student)")
    rollout.add_argument("--data", required=True, help="a folder of generated timelines (with its generation.json)")
    rollout.add_argument("--out", type=output_folder, required=True, help="where examples, summary and journal go")
    rollout.add_argument("--limit", type=positive_int, default=None, help="first N timelines only")
    rollout.add_argument(
        "--expert", default="speculative", help="the expert strategy that labels (the teacher of the training data)"
    )
    rollout.add_argument("--strategy", default="speculative", help="the name the student's sessions carry")
    rollout.add_argument(
        "--profile",
        default="phone-135m",
        help=f"device compute profile of the virtual clock: {', '.join(sorted(PROFILES))}, or a YAML file",
    )
    add_constrained_flag(rollout, "the student's actions")
    rollout.add_argument(
        "--takeover",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="the expert plays each session on from the student's first divergence (recovery demonstrations)",
    )
    rollout.add_argument(
        "--draft",
        default="none",
        type=draft_name,
        help="the student's drafter for speculative decoding (lossless: the same data, sooner): none, "
        "prompt_lookup[:N], layer_skip[:N], int8, int4, auto",
    )
    add_batch_size_flag(rollout)
    add_trust_flag(rollout)
    rollout.set_defaults(func=cmd_rollout)
