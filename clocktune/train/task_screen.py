"""Which training tasks a GRPO run learns from: those whose outcome the starting policy can be taught to change.

Live accuracy is greedy play, and GRPO learns from groups of sampled rollouts of one task. With the success reward a
group moves the policy toward a task only when its rollouts differ: where all succeed or all fail, only latency
separates them. Measured on the demo's checkpoint (``scripts/bench_rollout_groups.py``, BENCHMARKS.md), of the tasks
its greedy play fails about a third have a success among 4 samples, and of those it completes more than half have a
failure: a step of 4 tasks drawn at random holds about 0.6 groups that pull toward a task greedy play fails, and
more that teach the sampler what greedy play already does.

Screening plays ``screen_tasks`` training tasks (drawn by the run's seed) with the starting policy, once greedily as
live evaluation plays and ``num_generations`` times sampled as the rollouts play (same runtime, engine, call bias,
device profile and temperature), and keeps the tasks whose outcome can move (``screen_keep``):

- ``greedy_failed``: greedy play fails and a sample succeeds. Every group then holds a success to learn from, on a
  task the greedy policy does not do yet.
- ``mixed``: the samples both succeed and fail (DAPO's dynamic sampling, Yu et al. 2025, done once before training
  instead of at every step: a group of equal outcomes has no advantage to learn from).

The outcomes are written to ``output_dir/task_screen.json`` after every chunk of tasks, with the settings that
determine them: a run started again reads them instead of playing them again, and resumes a screen cut short; a run
with other settings in the same folder is refused.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from clocktune.atomic import atomic_write_text
from clocktune.settings_stamp import differing_settings
from clocktune.timeline.events import Timeline
from clocktune.tools import BackendFactory
from clocktune.train.grpo_config import SCREEN_RULES

__all__ = ["SCREEN_FILE", "SCREEN_RULES", "ScreenedTask", "kept_tasks", "screen_tasks"]

SCREEN_FILE = "task_screen.json"
# Tasks played in one go: their samples are num_generations times as many sessions in one engine, about a training
# step's (16) to four times it; 200 sessions at once peaked at 13.7 GiB on the demo's model.
CHUNK_TASKS = 16
# The screen's samples are keyed as rollouts of steps from here on (a run of a billion steps would meet them).
SCREEN_STEPS = 1_000_000_000


@dataclass(frozen=True)
class ScreenedTask:
    """One training task played by the starting policy: greedily once, and sampled as a GRPO group."""

    id: str
    greedy: bool
    samples: tuple[bool, ...]

    def kept(self, rule: str) -> bool:
        """Whether a run screening by ``rule`` (one of :data:`SCREEN_RULES`) trains on this task."""
        if rule == "greedy_failed":
            return not self.greedy and any(self.samples)
        if rule == "mixed":
            return any(self.samples) and not all(self.samples)
        raise ValueError(f"screen_keep is {rule!r}: give one of {', '.join(SCREEN_RULES)}")


def screen_settings(args: Any, start: str, train_data: Sequence[str]) -> dict[str, Any]:
    """What determines a screen's outcomes: the start, the data, the draw and the rollouts' settings."""
    fields = (
        "screen_tasks",
        "seed",
        "num_generations",
        "temperature",
        "rollout_continuation_temperature",
        "rollout_call_bias",
        "rollout_profile",
        "rollout_turn_limit_s",
        "rollout_max_notices",
        "constrained_decoding",
    )
    return {"start": str(start), "train_data": [str(path) for path in train_data]} | {
        name: getattr(args, name) for name in fields
    }


def _read(path: Path, settings: dict[str, Any]) -> dict[str, ScreenedTask]:
    if not path.exists():
        return {}
    remedy = "delete it to screen again, or use another output_dir"
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))
        screened = {
            row["id"]: ScreenedTask(row["id"], bool(row["greedy"]), tuple(bool(ok) for ok in row["samples"]))
            for row in recorded["tasks"]
        }
        written = recorded["settings"]
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as bad:
        raise ValueError(f"{path}: not a task screen ({type(bad).__name__}: {bad}); {remedy}") from None
    if differ := differing_settings(written, settings):
        raise ValueError(f"{path}: screened with other settings ({', '.join(differ)}); {remedy}")
    return screened


def _write(path: Path, settings: dict[str, Any], screened: dict[str, ScreenedTask]) -> None:
    rows = [asdict(task) for task in screened.values()]
    path.parent.mkdir(parents=True, exist_ok=True)  # before training: the Trainer has not made output_dir yet
    atomic_write_text(path, json.dumps({"settings": settings, "tasks": rows}, indent=1) + "\n")


def screen_tasks(
    model: Any,
    tokenizer: Any,
    tasks: Sequence[Timeline],
    args: Any,
    backends: BackendFactory,
    settings: dict[str, Any],
    path: str | Path | None = None,
    write: bool = True,
    progress: Any = print,
) -> list[ScreenedTask]:
    """Plays ``args.screen_tasks`` of ``tasks`` (drawn by ``args.seed``) greedily once and sampled
    ``args.num_generations`` times with ``model``, and returns their outcomes in the order drawn.

    Args:
        model: The starting policy (in eval mode while it plays; its mode is restored).
        tokenizer: Its tokenizer.
        tasks: The training timelines.
        args: The run's ``ClockGRPOConfig``; its rollout settings are the samples', its ``rollout_call_bias`` and
            ``constrained_decoding`` the greedy play's.
        backends: Builds each session's tool backend.
        settings: :func:`screen_settings`, written beside the outcomes and checked on a resume.
        path: The screen's file; ``output_dir/task_screen.json`` when ``None``.
        write: Whether this process writes the file (the main one, under several processes: each plays the same
            sessions, as live evaluation does).
        progress: Called with a line after each chunk.

    Returns:
        One :class:`ScreenedTask` per screened task.

    Raises:
        ValueError: When the file holds another screen's settings or is not a screen.
    """
    import torch

    from clocktune.runtime.device_profiles import load_device_profile
    from clocktune.runtime.play import run_policy
    from clocktune.runtime.policy_factories import policy_factory
    from clocktune.runtime.session import SessionConfig
    from clocktune.train.grpo_rollouts import RuntimeRollouts, StreamingRows

    path = Path(args.output_dir) / SCREEN_FILE if path is None else Path(path)
    drawn = random.Random(args.seed).sample(list(tasks), min(args.screen_tasks, len(tasks)))
    screened = _read(path, settings)
    config = SessionConfig(
        device=load_device_profile(args.rollout_profile),
        turn_limit_s=args.rollout_turn_limit_s,
        max_notices=args.rollout_max_notices,
    )
    rollouts = RuntimeRollouts(drawn, tokenizer, args, backends, StreamingRows())
    generations = args.num_generations
    was_training = model.training
    model.eval()
    try:
        # fork_rng: what screening draws must not shift the training steps that follow, screened or read back.
        devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
        with torch.random.fork_rng(devices=devices), torch.no_grad():
            for start in range(0, len(drawn), CHUNK_TASKS):
                chunk = [task for task in drawn[start : start + CHUNK_TASKS] if task.id not in screened]
                if not chunk:
                    continue
                factory = policy_factory(
                    "screen",
                    loaded=(model, tokenizer),
                    constrained=args.constrained_decoding,
                    call_bias=args.rollout_call_bias,
                    batch_size=len(chunk),
                )
                greedy = run_policy("screen", chunk, factory, backends, config, concurrency=len(chunk)).results
                ids = [task.id for task in chunk for _ in range(generations)]
                # A step number training never reaches: the samples' seeds are the screen's own.
                _, run, _ = rollouts.play(model, ids, step=SCREEN_STEPS + start, policy_only=True)
                outcomes = [result.accurate for result in run.results]
                for index, task in enumerate(chunk):
                    samples = tuple(outcomes[index * generations : (index + 1) * generations])
                    screened[task.id] = ScreenedTask(task.id, greedy[index].accurate, samples)
                if write:
                    _write(path, settings, {task.id: screened[task.id] for task in drawn if task.id in screened})
                progress(f"screened {min(start + CHUNK_TASKS, len(drawn))} of {len(drawn)} tasks")
    finally:
        model.train(was_training)
    return [screened[task.id] for task in drawn]


def kept_tasks(tasks: Sequence[Timeline], screened: Sequence[ScreenedTask], rule: str) -> list[Timeline]:
    """The tasks a run screening by ``rule`` trains on, in the order screened.

    Raises:
        ValueError: When no screened task is kept (the message gives the screen's counts).
    """
    by_id = {task.id: task for task in tasks}
    kept = [by_id[task.id] for task in screened if task.kept(rule)]
    if not kept:
        failed = sum(not task.greedy for task in screened)
        reachable = sum(task.kept("greedy_failed") for task in screened)
        mixed = sum(task.kept("mixed") for task in screened)
        raise ValueError(
            f"screen_keep {rule!r} keeps none of the {len(screened)} screened tasks (greedy play failed {failed}, "
            f"a sample completed {reachable} of those, {mixed} groups mixed): screen more tasks (screen_tasks), "
            "another rule, or train on every task (screen_tasks 0)"
        )
    return kept
