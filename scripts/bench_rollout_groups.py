"""Benchmark: what a GRPO group holds to learn from, on the tasks the greedy policy fails and on those it completes.

Live accuracy is greedy play; GRPO learns from groups of sampled rollouts of one task, and a group teaches the greedy
policy to do a task it fails only if one of the group's samples completes it (with the success reward, a group whose
rollouts all fail moves only by their latency). This plays ``--tasks`` training tasks once greedily and ``--group``
times sampled at each ``--temperatures``, as GRPO's rollouts do, through GRPO's own task screen
(``clocktune.train.task_screen``: the same runtime, engine, call bias and device profile; each copy its own sampling
noise; greedy play again for each temperature, the same sessions each time), and prints, per temperature: the
samples' success, the share of tasks the greedy policy fails whose group holds a success (the signal toward them),
the share of tasks it completes whose group holds a failure (the signal that can only hold what it does), and the
share of groups with mixed outcomes.

    .venv/bin/python scripts/bench_rollout_groups.py --checkpoint runs/demo/checkpoint \
        --train-data runs/demo/data/train --tasks 48 --group 4 --temperatures 1.0 1.5
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Sequence

from clocktune.cli.demo import CALL_BIAS  # the demo's, which the GRPO recipe's rollouts and live evaluation use
from clocktune.rendered_dataset import load_timeline_files
from clocktune.runtime.policy_factories import load_policy_model
from clocktune.train.grpo_config import ClockGRPOConfig
from clocktune.train.task_screen import screen_settings, screen_tasks
from data_gen.backends import make_backend


def group_outcomes(greedy: Sequence[bool], groups: Sequence[Sequence[bool]]) -> dict[str, float | int]:
    """What the groups hold against the greedy play of the same tasks.

    Args:
        greedy: Whether the greedy policy completed each task.
        groups: Each task's sampled rollouts, completed or not.

    Returns:
        ``failed`` and ``completed`` (tasks the greedy policy failed and completed), ``sampled_success`` (share of
        the samples that completed their task), ``success_where_greedy_failed`` (share of the failed tasks whose
        group holds a success; ``nan`` without such tasks), ``failure_where_greedy_completed`` (the converse) and
        ``mixed`` (share of groups holding both).
    """
    if len(greedy) != len(groups) or not groups:
        raise ValueError(f"one group per task: {len(greedy)} greedy outcomes, {len(groups)} groups")
    failed = [any(group) for done, group in zip(greedy, groups, strict=True) if not done]
    completed = [not all(group) for done, group in zip(greedy, groups, strict=True) if done]
    return {
        "failed": len(failed),
        "completed": len(completed),
        "sampled_success": statistics.fmean(float(ok) for group in groups for ok in group),
        "success_where_greedy_failed": statistics.fmean(failed) if failed else float("nan"),
        "failure_where_greedy_completed": statistics.fmean(completed) if completed else float("nan"),
        "mixed": statistics.fmean(float(any(group) and not all(group)) for group in groups),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--train-data", required=True, help="The training timelines (the GRPO recipe's tasks).")
    parser.add_argument("--tasks", type=int, default=48, help="Training tasks drawn (seed 0).")
    parser.add_argument("--group", type=int, default=4, help="Sampled rollouts a task (GRPO's num_generations).")
    parser.add_argument("--temperatures", type=float, nargs="+", default=[1.0])
    args = parser.parse_args()

    model, tokenizer = load_policy_model(args.checkpoint)
    timelines = load_timeline_files([args.train_data])
    print(
        "| temperature | greedy completed | samples' success | greedy failed: group holds a success | greedy "
        "completed: group holds a failure | mixed groups | seconds |"
    )
    print("|---|---|---|---|---|---|---|")
    for temperature in args.temperatures:
        # GRPO's own screen (clocktune.train.task_screen), with the rollouts' config; nothing is trained or written.
        with tempfile.TemporaryDirectory() as scratch:
            grpo = ClockGRPOConfig(
                output_dir=scratch,
                use_cpu=True,
                report_to="none",
                seed=0,
                temperature=temperature,
                num_generations=args.group,
                per_device_train_batch_size=args.group,
                rollout_call_bias=CALL_BIAS,
                screen_tasks=args.tasks,
            )
            started = time.perf_counter()
            settings = screen_settings(grpo, args.checkpoint, [args.train_data])
            screened = screen_tasks(model, tokenizer, timelines, grpo, make_backend, settings, write=False)
            seconds = time.perf_counter() - started
        greedy = [task.greedy for task in screened]
        figures = group_outcomes(greedy, [task.samples for task in screened])
        print(
            f"| {temperature:g} | {sum(greedy)} of {len(greedy)} | {figures['sampled_success']:.3f} "
            f"| {figures['success_where_greedy_failed']:.2f} (of {figures['failed']}) "
            f"| {figures['failure_where_greedy_completed']:.2f} (of {figures['completed']}) | {figures['mixed']:.2f} "
            f"| {seconds:.0f} |"
        )


if __name__ == "__main__":
    main()
