"""Benchmark: live accuracy and speedup of the embedded model against its training budget, with and without
on-policy rounds and constrained decoding.

    .venv/bin/python scripts/bench_closed_loop.py                          # 2 h 9 min on the 2-core CPU
    .venv/bin/python scripts/bench_closed_loop.py --budgets 40 120 --eval-dialogues 10 --out runs/closed-loop-short

Budgets count training dialogues (timelines): a budget of B is B / ``--rows`` optimizer steps of ``--rows``
timelines each. What it runs, all in ``--out`` (a run started again resumes: finished trainings, rollouts and
sessions are kept, and a teacher run killed mid-way resumes from its last budget's checkpoint):

1. the demo's dialogues (``configs/datagen/demo.yaml``): ``--train-dialogues`` for training (seed 0) and
   ``--eval-dialogues`` held out (seed 1);
2. **teacher**: one LoRA fine-tune on the teacher's timelines (the demo's recipe with a constant learning rate, so
   that a checkpoint after B dialogues is the model a budget of B gives; ``--rows`` timelines a step, one domain,
   accumulated one a micro-batch, so ``share_prompt`` runs their common system prompt once a step, and
   ``cache_prompt`` runs it without gradients: 2.3x the timelines a second of the same rows each running its own
   prompt, BENCHMARKS.md) for the largest budget,
   keeping a checkpoint at every budget and at every on-policy arm's start;
3. the teacher's checkpoints played live on the held-out dialogues under the action grammar (virtual clock,
   ``phone-135m``), against the scripted turn-based ``sync`` baseline;
4. **on-policy**: for each budget B, the teacher checkpoint after ``(1 - --on-policy-share) * B`` dialogues, then
   ``--rounds`` on-policy rounds (``ClockSFTConfig.on_policy_rounds``: the model plays ``--rollout-sessions``
   training tasks live, the expert labels them, training continues on the mixture) sharing the other dialogues, so
   both arms train on B; each played live like the teacher's. ``--on-policy-arms`` picks the arms: ``on_policy``
   (the model plays each session to its end; a label at each of its divergences), ``takeover`` (the expert plays
   each session on from the model's first divergence: recovery demonstrations, ``on_policy_takeover``) and
   ``restart`` (a round of the teacher's data alone, ``on_policy_weight`` 0 after one rollout session: what the
   round's new schedule, and its optimizer, do without on-policy data). ``--on-policy-optimizer`` says whether the
   rounds carry the teacher checkpoint's optimizer state on (``continue``, the default) or start a fresh one;
5. the teacher's checkpoints played again with plain argmax decoding (no grammar), the largest budget first: the
   grammar's effect. The on-policy arm plays under the grammar only, the default, to keep the run near two hours.

``--schedule cosine`` trains the teacher once per budget instead, each run the recipe's cosine to 0 over its own
steps (``teacher_cosine-B``, arm ``teacher_cosine``): an annealed model at every budget, at the cost of the sum of the
budgets' steps. A constant-rate checkpoint is a draw (neighbouring ones 25 steps apart disagree on about a third of
the held-out sessions, BENCHMARKS.md); an annealed one is what a user trains. On-policy arms start from a
constant-rate teacher checkpoint, so they need ``--schedule constant``.

Each result is printed and written to ``results.json`` and ``closed_loop.png`` (live accuracy and speedup against
budget) as soon as it is measured, so a run stopped early keeps what it measured, in this order of importance.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from transformers import TrainerCallback

from clocktune.train.config import ON_POLICY_OPTIMIZERS

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "configs" / "smollm2-135m" / "sft_lora_cpu.yaml"
DATAGEN = ROOT / "configs" / "datagen" / "demo.yaml"
PROFILE = "phone-135m"
# The on-policy arms: what each adds to its rounds' options (after the shared ones: a repeated flag's last value wins).
ON_POLICY_ARMS = {
    "on_policy": [],
    "takeover": ["--on_policy_takeover", "true"],
    "restart": ["--on_policy_weight", "0", "--on_policy_sessions", "1"],
}


class SaveAt(TrainerCallback):
    """Saves a checkpoint at each of the given steps (the budgets and the on-policy arms' starting points)."""

    def __init__(self, steps: set[int]) -> None:
        self.steps = steps

    def on_step_end(self, args, state, control, **kwargs):
        """Asks for a save at a listed step."""
        if state.global_step in self.steps:
            control.should_save = True
        return control


def _recipe_args(
    args: argparse.Namespace,
    train_data: Path,
    output_dir: Path,
    max_steps: int,
    extra: list[str],
    scheduler: str = "constant_with_warmup",
):
    from clocktune.train.sft import make_parser

    overrides = [
        "--train_data", str(train_data), "--output_dir", str(output_dir), "--max_steps", str(max_steps),
        "--max_timelines", str(args.train_dialogues), "--lr_scheduler_type", scheduler,
        "--save_strategy", "no", "--save_total_limit", "1000000", "--cache_prompt", "true",
        "--share_prompt", "true", "--per_device_train_batch_size", "1",
        "--gradient_accumulation_steps", str(args.rows),
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
        session_logs=True,  # the played sessions, to read where a model failed (clocktune-datagen show)
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
    accuracy.set(xlabel="training dialogues", ylabel="live accuracy", ylim=(0, 1))
    speedup.set(xlabel="training dialogues", ylabel="speedup p50 over sync")
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
    parser.add_argument("--budgets", type=int, nargs="+", default=[160, 500, 1500], help="training dialogues")
    parser.add_argument("--rows", type=int, default=4, help="timelines per optimizer step (each budget a multiple)")
    parser.add_argument("--train-dialogues", type=int, default=1500)
    parser.add_argument("--eval-dialogues", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=1, help="on-policy rounds of the on-policy arm")
    parser.add_argument("--on-policy-share", type=float, default=0.2, help="share of its steps spent in rounds")
    parser.add_argument("--rollout-sessions", type=int, default=25, help="training tasks each round plays")
    parser.add_argument("--on-policy-weight", type=float, default=0.5, help="rollout examples' share of a round")
    parser.add_argument(
        "--on-policy-optimizer",
        choices=ON_POLICY_OPTIMIZERS,
        default="continue",
        help="rounds keep the teacher checkpoint's optimizer state, or start a fresh one (on_policy_optimizer)",
    )
    parser.add_argument(
        "--on-policy-arms",
        nargs="*",
        choices=list(ON_POLICY_ARMS),
        default=["on_policy", "takeover"],
        help="on-policy arms to run (see above); none: the teacher alone",
    )
    parser.add_argument(
        "--plain", action=argparse.BooleanOptionalAction, default=True, help="also play plain argmax decoding (5.)"
    )
    parser.add_argument(
        "--schedule",
        choices=["constant", "cosine"],
        default="constant",
        help="constant: one teacher run, a checkpoint per budget; cosine: one annealed run per budget (see above)",
    )
    parser.add_argument("--recipe", default=str(RECIPE), help="training YAML (its model unless --model)")
    parser.add_argument("--datagen-config", default=str(DATAGEN))
    parser.add_argument("--model", default=None, help="base model instead of the recipe's")
    parser.add_argument("--num-proc", type=int, default=2)
    args = parser.parse_args(argv)
    budgets = sorted(set(args.budgets))
    if any(budget % args.rows for budget in budgets):
        parser.error(f"--budgets {budgets}: each must be a multiple of --rows {args.rows}")
    if args.schedule == "cosine" and args.on_policy_arms:
        parser.error("--schedule cosine: the on-policy arms start from a constant-rate teacher; pass --on-policy-arms")

    from clocktune.atomic import atomic_write_text
    from clocktune.rendered_dataset import load_timeline_files
    from data_gen.config import held_out_config, load_config
    from data_gen.writer import GenerationJob, run_generation

    started = time.monotonic()
    out = Path(args.out)
    steps = {budget: budget // args.rows for budget in budgets}
    starts = {budget: on_policy_start(steps[budget], args.on_policy_share, args.rounds) for budget in budgets}
    config = load_config(args.datagen_config)
    train_dir, eval_dir = out / "data" / "train", out / "data" / "eval"
    run_generation(GenerationJob(config, args.train_dialogues, 0, train_dir), num_proc=args.num_proc)
    eval_job = GenerationJob(held_out_config(config), args.eval_dialogues, 1, eval_dir)
    run_generation(eval_job, num_proc=args.num_proc)
    held_out = load_timeline_files([eval_dir / "data"])
    rows: list[dict] = []
    bf16 = _recipe_args(args, train_dir, out / "teacher", 1, [])[1].bf16  # the recipe's, resolved on this machine

    def record() -> None:
        result = {
            "budgets": budgets,
            "rows_per_step": args.rows,
            "train_dialogues": args.train_dialogues,
            "eval_dialogues": len(held_out),
            "rounds": args.rounds,
            "on_policy_share": args.on_policy_share,
            "rollout_sessions": args.rollout_sessions,
            "on_policy_weight": args.on_policy_weight,
            "on_policy_arms": args.on_policy_arms,
            "on_policy_optimizer": args.on_policy_optimizer,
            "bf16": bf16,
            "schedule": args.schedule,
            "rows": rows,
            "seconds": round(time.monotonic() - started, 1),
        }
        atomic_write_text(out / "results.json", json.dumps(result, indent=2) + "\n")
        _plot(rows, out / "closed_loop.png")

    def evaluate(arm: str, budget: int, checkpoint: Path, constrained: bool) -> None:
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
                "minutes_so_far": round((time.monotonic() - started) / 60, 1),
            }
        )
        record()
        print(
            f"{arm:<10} {decoding:<12} {budget:>6} dialogues: live accuracy {summary['accuracy']:.3f}, p50 "
            f"{summary['latency_p50_s']} s (sync {summary['baseline_latency_p50_s']} s), speedup "
            f"{summary['speedup_p50']}x",
            flush=True,
        )

    teacher_dir = out / "teacher"
    teacher_arm = "teacher" if args.schedule == "constant" else "teacher_cosine"
    if args.schedule == "constant":
        saves = set(steps.values()) | {teacher_steps for teacher_steps, _ in starts.values()}
        _train(*_recipe_args(args, train_dir, teacher_dir, steps[budgets[-1]], []), callbacks=[SaveAt(saves)])
        teacher = {budget: teacher_dir / f"checkpoint-{steps[budget]}" for budget in budgets}
    else:
        teacher = {budget: out / f"teacher_cosine-{budget}" for budget in budgets}
    for budget in budgets:
        if args.schedule == "cosine":  # each budget its own annealed run, evaluated as soon as it is trained
            _train(*_recipe_args(args, train_dir, teacher[budget], steps[budget], [], scheduler="cosine"))
        evaluate(teacher_arm, budget, teacher[budget], constrained=True)
    for arm in args.on_policy_arms:
        for budget, (teacher_steps, per_round) in starts.items():
            # A fresh optimizer is another arm, in a folder of its own beside the one that carries the state on.
            name = arm if args.on_policy_optimizer == "continue" else f"{arm}_fresh_optimizer"
            arm_dir = out / f"{name}-{budget}"
            extra = [
                "--resume_from_checkpoint", str(teacher_dir / f"checkpoint-{teacher_steps}"),
                "--on_policy_rounds", str(args.rounds), "--on_policy_steps", str(per_round),
                "--on_policy_sessions", str(args.rollout_sessions), "--on_policy_weight", str(args.on_policy_weight),
                "--on_policy_profile", PROFILE, "--on_policy_optimizer", args.on_policy_optimizer, *ON_POLICY_ARMS[arm],
            ]  # fmt: skip
            _train(*_recipe_args(args, train_dir, arm_dir, teacher_steps, extra))
            evaluate(name, budget, arm_dir, constrained=True)
    for budget in reversed(budgets) if args.plain else []:  # the largest first: where the models are best
        evaluate(teacher_arm, budget, teacher[budget], constrained=False)

    largest = [row for row in rows if row["budget"] == budgets[-1]]
    best = max(largest, key=lambda row: row["live_accuracy"])
    print(f"wrote {out}/results.json and {out}/closed_loop.png")
    print(f"largest budget: best {best['arm']} {best['decoding']} live accuracy {best['live_accuracy']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
