"""Benchmark: live accuracy and speedup of the embedded model against its training budget, with and without
on-policy rounds and constrained decoding.

    .venv/bin/python scripts/bench_closed_loop.py                          # about 2 h on the 2-core CPU (estimate)
    .venv/bin/python scripts/bench_closed_loop.py --budgets 60 150 --eval-dialogues 10 --out runs/closed-loop-short

What it runs, all in ``--out`` (a run started again resumes: finished trainings, rollouts and sessions are kept):

1. the demo's dialogues (``configs/datagen/demo.yaml``): ``--train-dialogues`` for training (seed 0) and
   ``--eval-dialogues`` held out (seed 1);
2. **teacher**: one LoRA fine-tune on the teacher's timelines (the demo's recipe with a constant learning rate, so
   that a checkpoint after B steps is the model a budget of B steps gives, and ``cache_prompt``, 1.5x faster steps
   on this CPU) for the largest budget, keeping a checkpoint at every budget and at every on-policy arm's start;
3. **on-policy**: for each budget B, the teacher checkpoint after ``(1 - --on-policy-share) * B`` steps, then
   ``--rounds`` on-policy rounds (``ClockSFTConfig.on_policy_rounds``: the model plays ``--rollout-sessions``
   training tasks live, the expert labels them, training continues on the mixture) sharing the other steps; so
   both arms train B steps;
4. every checkpoint played live on the held-out dialogues (virtual clock, ``phone-135m``), with plain and with
   constrained decoding (``--constrained``), against the scripted turn-based ``sync`` baseline.

The default run's cost, estimated (not measured) from rates of other runs: the demo's 4.3 s a step over the 1.5x
of ``cache_prompt`` (2.9 s), 4.5 s a live session:
teacher 1,500 steps 73 min, the arms' rounds 430 steps 21 min, rollouts 150 sessions 11 min, evaluation 300
sessions 23 min: about 2 h 10 min on a quiet machine.

It prints a table (arm, decoding, budget, live accuracy, latency p50, speedup p50 over sync) and writes
``results.json`` and ``closed_loop.png`` (live accuracy and speedup against budget).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from transformers import TrainerCallback

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "configs" / "smollm2-135m" / "sft_lora_cpu.yaml"
DATAGEN = ROOT / "configs" / "datagen" / "demo.yaml"
PROFILE = "phone-135m"


class SaveAt(TrainerCallback):
    """Saves a checkpoint at each of the given steps (the budgets and the on-policy arms' starting points)."""

    def __init__(self, steps: set[int]) -> None:
        self.steps = steps

    def on_step_end(self, args, state, control, **kwargs):
        """Asks for a save at a listed step."""
        if state.global_step in self.steps:
            control.should_save = True
        return control


def _recipe_args(args: argparse.Namespace, train_data: Path, output_dir: Path, max_steps: int, extra: list[str]):
    from clocktune.train.sft import make_parser

    overrides = [
        "--train_data", str(train_data), "--output_dir", str(output_dir), "--max_steps", str(max_steps),
        "--max_timelines", str(args.train_dialogues), "--lr_scheduler_type", "constant_with_warmup",
        "--save_strategy", "no", "--save_total_limit", "1000000", "--cache_prompt", "true",
    ]  # fmt: skip
    if args.model is not None:
        overrides += ["--model_name_or_path", args.model]
    return make_parser().parse_args_and_config(["--config", args.recipe, *overrides, *extra])


def on_policy_start(budget: int, share: float, rounds: int) -> tuple[int, int]:
    """Where an on-policy arm leaves the teacher arm, and the steps of each of its rounds.

    Args:
        budget: Training steps of the arm in all.
        share: Share of them spent in on-policy rounds.
        rounds: Number of rounds.

    Returns:
        ``(teacher_steps, steps_per_round)``, with ``teacher_steps + rounds * steps_per_round == budget`` and at
        least one step of each.
    """
    per_round = max(1, math.floor(budget * share / rounds))
    teacher_steps = budget - rounds * per_round
    if teacher_steps < 1:
        raise ValueError(f"budget {budget}: too small for {rounds} rounds of at least one step after the teacher's")
    return teacher_steps, per_round


def _train(data_args, training_args, model_args, callbacks: list | None = None) -> None:
    from clocktune.train.sft import main as train
    from data_gen.backends import make_backend
    from data_gen.expert import experts_of_data

    if (Path(training_args.output_dir) / "clocktune_training.json").is_file():
        return  # finished by an earlier run of the benchmark
    trainer = train(
        data_args, training_args, model_args, callbacks=callbacks, backends=make_backend, experts=experts_of_data
    )
    del trainer


def _play(checkpoint: Path, timelines: list, constrained: bool, out: Path) -> dict:
    from clocktune.clock import PROFILES
    from clocktune.runtime.evaluate import compare_policies
    from clocktune.runtime.policy_factories import load_policy_model, policy_spec
    from clocktune.runtime.session import SessionConfig
    from data_gen.backends import make_backend

    summary_path = out / "summary.json"
    if summary_path.is_file():
        return json.loads(summary_path.read_text())
    loaded = load_policy_model(checkpoint)
    model = policy_spec("speculative", str(checkpoint), loaded, constrained=constrained)
    compare_policies(
        timelines,
        model,
        policy_spec("sync"),
        make_backend,
        SessionConfig(device=PROFILES[PROFILE]),
        out,
        extra={"profile": PROFILE, "checkpoint": str(checkpoint), "constrained": constrained},
    )
    return json.loads(summary_path.read_text())


def _plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (accuracy, speedup) = plt.subplots(1, 2, figsize=(10, 4))
    for arm in sorted({(row["arm"], row["decoding"]) for row in rows}):
        points = sorted((row["budget"], row) for row in rows if (row["arm"], row["decoding"]) == arm)
        budgets = [budget for budget, _ in points]
        label = f"{arm[0]}, {arm[1]}"
        accuracy.plot(budgets, [row["live_accuracy"] for _, row in points], marker="o", label=label)
        speedup.plot(budgets, [row["speedup_p50"] or float("nan") for _, row in points], marker="o", label=label)
    accuracy.set(xlabel="training steps (one timeline each)", ylabel="live accuracy", ylim=(0, 1))
    speedup.set(xlabel="training steps (one timeline each)", ylabel="speedup p50 over sync")
    accuracy.legend()
    figure.suptitle("SmolLM2-135M live in the runtime, held-out dialogues")
    figure.tight_layout()
    temporary = path.with_suffix(".tmp.png")
    figure.savefig(temporary, dpi=120)
    temporary.replace(path)


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark; returns 0.

    Args:
        argv: Command-line arguments; ``sys.argv[1:]`` when ``None``.

    Returns:
        The exit status.
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/closed-loop")
    parser.add_argument("--budgets", type=int, nargs="+", default=[150, 500, 1500], help="training steps")
    parser.add_argument("--train-dialogues", type=int, default=1500)
    parser.add_argument("--eval-dialogues", type=int, default=25)
    parser.add_argument("--rounds", type=int, default=1, help="on-policy rounds of the on-policy arm")
    parser.add_argument("--on-policy-share", type=float, default=0.2, help="share of its steps spent in rounds")
    parser.add_argument("--rollout-sessions", type=int, default=50, help="training tasks each round plays")
    parser.add_argument("--on-policy-weight", type=float, default=0.5, help="rollout examples' share of a round")
    parser.add_argument("--recipe", default=str(RECIPE), help="training YAML (its model unless --model)")
    parser.add_argument("--datagen-config", default=str(DATAGEN))
    parser.add_argument("--model", default=None, help="base model instead of the recipe's")
    parser.add_argument("--num-proc", type=int, default=2)
    args = parser.parse_args(argv)

    from clocktune.atomic import atomic_write_text
    from clocktune.rendered_dataset import load_timeline_files
    from data_gen.config import held_out_config, load_config
    from data_gen.writer import GenerationJob, run_generation

    started = time.monotonic()
    out = Path(args.out)
    budgets = sorted(set(args.budgets))
    starts = {budget: on_policy_start(budget, args.on_policy_share, args.rounds) for budget in budgets}
    config = load_config(args.datagen_config)
    train_dir, eval_dir = out / "data" / "train", out / "data" / "eval"
    run_generation(GenerationJob(config, args.train_dialogues, 0, train_dir), num_proc=args.num_proc)
    eval_job = GenerationJob(held_out_config(config), args.eval_dialogues, 1, eval_dir)
    run_generation(eval_job, num_proc=args.num_proc)
    held_out = load_timeline_files([eval_dir / "data"])

    teacher_dir = out / "teacher"
    saves = set(budgets) | {teacher_steps for teacher_steps, _ in starts.values()}
    _train(*_recipe_args(args, train_dir, teacher_dir, budgets[-1], []), callbacks=[SaveAt(saves)])
    checkpoints = {("teacher", budget): teacher_dir / f"checkpoint-{budget}" for budget in budgets}
    for budget, (teacher_steps, per_round) in starts.items():
        arm_dir = out / f"on_policy-{budget}"
        extra = [
            "--resume_from_checkpoint", str(teacher_dir / f"checkpoint-{teacher_steps}"),
            "--on_policy_rounds", str(args.rounds), "--on_policy_steps", str(per_round),
            "--on_policy_sessions", str(args.rollout_sessions), "--on_policy_weight", str(args.on_policy_weight),
            "--on_policy_profile", PROFILE,
        ]  # fmt: skip
        _train(*_recipe_args(args, train_dir, arm_dir, teacher_steps, extra))
        checkpoints["on_policy", budget] = arm_dir

    rows = []
    for (arm, budget), checkpoint in checkpoints.items():
        for constrained in (False, True):
            decoding = "constrained" if constrained else "plain"
            summary = _play(checkpoint, held_out, constrained, out / "eval" / f"{arm}-{budget}-{decoding}")
            rows.append(
                {
                    "arm": arm,
                    "budget": budget,
                    "decoding": decoding,
                    "live_accuracy": summary["accuracy"],
                    "latency_p50_s": summary["latency_p50_s"],
                    "sync_latency_p50_s": summary["baseline_latency_p50_s"],
                    "speedup_p50": summary["speedup_p50"],
                    "failures": summary["failures"],
                }
            )
            print(
                f"{arm:<10} {decoding:<12} {budget:>6} steps: live accuracy {summary['accuracy']:.3f}, p50 "
                f"{summary['latency_p50_s']} s (sync {summary['baseline_latency_p50_s']} s), speedup "
                f"{summary['speedup_p50']}x",
                flush=True,
            )
    record = {
        "budgets": budgets,
        "train_dialogues": args.train_dialogues,
        "eval_dialogues": len(held_out),
        "rounds": args.rounds,
        "on_policy_share": args.on_policy_share,
        "rollout_sessions": args.rollout_sessions,
        "on_policy_weight": args.on_policy_weight,
        "rows": rows,
        "seconds": round(time.monotonic() - started, 1),
    }
    atomic_write_text(out / "results.json", json.dumps(record, indent=2) + "\n")
    _plot(rows, out / "closed_loop.png")
    best = max(rows, key=lambda row: (row["budget"], row["live_accuracy"]))
    print(f"wrote {out}/results.json and {out}/closed_loop.png")
    print(f"largest budget: {best['arm']} {best['decoding']} live accuracy {best['live_accuracy']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
