"""Benchmark: GRPO in the runtime from the demo's checkpoint, in live accuracy and latency, and with speculation.

For each λ (``--lambdas``) the recipe (``configs/smollm2-135m/grpo_cpu.yaml``) trains ``--steps`` GRPO steps from the
checkpoint; the start and every result play the held-out dialogues live (greedy, the demo's call bias and device
profile, virtual clock) against the scripted turn-based ``sync`` loop: live accuracy, p50 latency, speedup over
``sync``, and the gain over the start with its paired 95% interval (the same dialogues, resampled). Then the recipe's λ
again with speculation in the rollouts (``--draft``), on the same seeds, in EfficientRollout's columns: rollout seconds
per step, end-to-end seconds per step, the reduction, acceptance, and the final live accuracy inside the plain run's
paired interval or not. With ``--one-token-steps`` the recipe's λ is also trained with rollouts decoded one token a
forward (the grammar's forced tokens not fed early, as before jump-forward), the base of the reduction column: the
same rollouts, so the same training, in more forwards. The learning curves (success and latency p50 of the rollouts per step) go to ``--figure``.

    .venv/bin/python scripts/bench_rl.py --checkpoint runs/demo/checkpoint --train-data runs/demo/data/train \
        --eval-data runs/demo/data/eval/data --steps 20 [--lambdas 0.1 0] [--draft prompt_lookup] --out runs/bench-rl \
        [--one-token-steps] [--learning_rate 3e-4 --live_eval_steps 10 ...]

Arguments the benchmark does not know go to every GRPO run, after the recipe's and over them.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

from clocktune.cli.demo import CALL_BIAS  # the demo's: the held-out dialogues are played as the demo plays them
from clocktune.clock import PROFILES
from clocktune.rendered_dataset import load_timeline_files
from clocktune.runtime.model_policy import one_token_a_forward
from clocktune.runtime.play import PolicyRun, run_policy
from clocktune.runtime.policy_factories import load_policy_model, policy_factory
from clocktune.runtime.report import accuracy_delta_ci95, paired_bootstrap
from clocktune.runtime.session import SessionConfig
from clocktune.train import grpo
from data_gen.backends import make_backend
from data_gen.expert import experts_of_data

RECIPE = "configs/smollm2-135m/grpo_cpu.yaml"


def play(checkpoint: str | None, timelines, strategy: str = "model") -> PolicyRun:
    """The held-out dialogues played live by a checkpoint (greedy) or, without one, by the scripted ``sync`` loop."""
    config = SessionConfig(device=PROFILES["phone-135m"])
    if checkpoint is None:
        return run_policy("sync", timelines, policy_factory("sync"), make_backend, config)
    factory = policy_factory(strategy, loaded=load_policy_model(checkpoint), call_bias=CALL_BIAS)
    return run_policy(strategy, timelines, factory, make_backend, config, concurrency=len(timelines))


def train(args: argparse.Namespace, out: Path, latency_weight: float, draft: str) -> list[dict]:
    """``--steps`` GRPO steps of the recipe from the checkpoint; returns the trainer's log history."""
    argv = ["--config", args.recipe, "--model_name_or_path", args.checkpoint, "--train_data", args.train_data]
    argv += ["--output_dir", str(out), "--latency_weight", str(latency_weight), "--max_steps", str(args.steps)]
    argv += ["--rollout_draft", draft, "--save_strategy", "no", *args.recipe_args]
    trainer = grpo.main(*grpo.make_parser().parse_args_and_config(args=argv), make_backend, experts=experts_of_data)
    history = trainer.state.log_history
    (out / "log_history.json").write_text(json.dumps(history, indent=1))
    return history


def _per_step(history: list[dict], key: str) -> list[float]:
    return [entry[key] for entry in history if key in entry]


def live_row(label: str, run: PolicyRun, sync: PolicyRun, start: PolicyRun | None) -> str:
    """A table row: live accuracy, p50, speedup over sync with its interval, the gain over the start with its."""
    intervals = paired_bootstrap(run, sync)
    gain = ""
    if start is not None:
        low, high = accuracy_delta_ci95([r.accurate for r in run.results], [r.accurate for r in start.results])
        gain = f"{run.share('accurate') - start.share('accurate'):+.2f} [{low:+.2f}, {high:+.2f}]"
    return (
        f"| {label} | {run.share('accurate'):.2f} | {run.latency(50) or math.nan:.3f} "
        f"| {run.speedup_over(sync) or math.nan:.2f}x {intervals['speedup_p50_ci95']} | {gain} |"
    )


def save_live(runs: dict[str, PolicyRun], path: Path) -> None:
    """Every live run so far, per dialogue (accurate or not), so that intervals between any two can be recomputed."""
    rows = {
        label: {
            "accuracy": run.share("accurate"),
            "latency_p50_s": run.latency(50),
            "accurate": [bool(result.accurate) for result in run.results],
        }
        for label, run in runs.items()
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rows, indent=1))


def plot(curves: dict[str, list[dict]], path: Path) -> None:
    """Success and latency p50 of the rollouts, per step, one line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (success, latency) = plt.subplots(1, 2, figsize=(10, 4))
    for label, history in curves.items():
        success.plot(_per_step(history, "rollout/success"), label=label)
        latency.plot(_per_step(history, "rollout/latency_p50_s"), label=label)
    success.set(xlabel="GRPO step", ylabel="rollouts' task success", title="success")
    latency.set(xlabel="GRPO step", ylabel="seconds", title="end of speech to first words, p50")
    success.legend()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)


def speculation_table(
    curves: dict[str, list[dict]], live: dict[str, PolicyRun], rows: list[tuple[str, str]], plain: str
) -> None:
    """EfficientRollout's columns for the runs of the recipe's λ (``rows``: (name, run label), the first the base of
    the reduction), and the paired interval of the speculative run's final live accuracy against the plain run's."""
    print("\n| rollouts | rollout s/step | end-to-end s/step | reduction | acceptance | switched on at batch |")
    print("|---|---|---|---|---|---|")
    base_rollout = statistics.fmean(_per_step(curves[rows[0][1]], "rollout/seconds"))
    for name, label in rows:
        history = curves[label]
        rollout = statistics.fmean(_per_step(history, "rollout/seconds"))
        step_times = _per_step(history, "step_time")
        step = statistics.fmean(step_times) if step_times else float("nan")
        acceptance = statistics.fmean(_per_step(history, "rollout/acceptance"))
        switched = max(_per_step(history, "rollout/switched_on_batch"), default=0)
        print(
            f"| {name} | {rollout:.1f} | {step:.1f} | {1 - rollout / base_rollout:+.1%} | {acceptance:.3f} "
            f"| {switched:g} |"
        )
    name, drafted = rows[-1]
    if drafted != plain:  # a speculative run to compare (not only the one-token run before plain)
        low, high = accuracy_delta_ci95(
            [r.accurate for r in live[drafted].results], [r.accurate for r in live[plain].results]
        )
        print(f"final live accuracy with {name} minus plain: paired 95% [{low:+.2f}, {high:+.2f}]")


def main() -> None:
    """Parses the command line, trains, plays and prints the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default="runs/demo/checkpoint", help="the SFT checkpoint GRPO starts from")
    parser.add_argument("--train-data", default="runs/demo/data/train", help="the tasks (a generated folder)")
    parser.add_argument("--eval-data", default="runs/demo/data/eval/data", help="held-out timelines, played live")
    parser.add_argument("--recipe", default=RECIPE)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--lambdas", type=float, nargs="+", default=[0.1, 0.0], help="the first is the recipe's")
    parser.add_argument(
        "--draft", default="prompt_lookup", help="the rollouts' drafter in the speculation run (none: no such run)"
    )
    parser.add_argument(
        "--one-token-steps", action="store_true", help="also the recipe's λ with rollouts decoded one token a forward"
    )
    parser.add_argument("--out", default="runs/bench-rl")
    parser.add_argument("--figure", default="docs/figures/rl-curves.png")
    args, recipe_args = parser.parse_known_args()
    args.recipe_args = recipe_args  # the rest overrides the recipe, e.g. --learning_rate 3e-4

    out = Path(args.out)
    timelines = load_timeline_files([args.eval_data])
    sync = play(None, timelines)
    live = {"sync": sync, "start": play(args.checkpoint, timelines)}
    print("| model | live accuracy | p50 s | speedup over sync [95%] | gain over the start [paired 95%] |")
    print("|---|---|---|---|---|")
    print(live_row("start", live["start"], sync, None))
    save_live(live, out / "live.json")
    curves = {}
    first = f"λ={args.lambdas[0]:g}"
    runs = [(f"λ={weight:g}", weight, "none", False) for weight in args.lambdas]
    if args.one_token_steps:  # the recipe's λ again, its rollouts decoded one token a forward, on the same seeds
        runs.insert(0, (f"{first} one token a forward", args.lambdas[0], "none", True))
    if args.draft != "none":  # the recipe's λ again, with speculation in the rollouts, on the same seeds
        runs.append((f"{first} {args.draft}", args.lambdas[0], args.draft, False))
    for label, latency_weight, draft, one_token in runs:
        folder = out / (f"lambda-{latency_weight:g}" + ("" if draft == "none" else f"-{draft}"))
        folder = folder.with_name(folder.name + "-one-token") if one_token else folder
        with one_token_a_forward(one_token):
            curves[label] = train(args, folder, latency_weight, draft)
        live[label] = play(str(folder), timelines)
        print(live_row(label, live[label], sync, live["start"]))
        save_live(live, out / "live.json")
    if args.draft != "none" or args.one_token_steps:
        rows = [("one token a forward", runs[0][0])] if args.one_token_steps else []
        rows.append(("plain", first))
        if args.draft != "none":
            rows.append((args.draft, runs[-1][0]))
        speculation_table(curves, live, rows, first)
    plot(curves, Path(args.figure))


if __name__ == "__main__":
    main()
