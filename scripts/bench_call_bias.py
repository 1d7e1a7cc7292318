"""Benchmark: live accuracy against speedup as the policy's call bias moves its operating point.

    .venv/bin/python scripts/bench_call_bias.py --model runs/demo/checkpoint --data runs/demo/data/eval/data
    .venv/bin/python scripts/bench_call_bias.py --model A B --biases 0 1.5 3 --out runs/call-bias   # ~4 min an arm

A model fine-tuned on the speculative teacher calls later than its teacher does: at each speculative decision point
its data holds one call among many waits, so the call's logit falls just short where the teacher acts. ``call_bias``
(:class:`clocktune.runtime.model_policy.ModelPolicy`) adds a constant to the call marker's logit at an action's first
token while the user is still speaking. For each checkpoint and bias, the script plays the held-out dialogues live
(virtual clock, ``phone-135m``, under the action grammar) against the scripted turn-based ``sync`` and the oracle,
and reports live accuracy, the response latency's median and its ratio to sync's (over all dialogues, and over those
both completed), the sessions with a speculative call, failures by type, and the sessions gained and lost against
the same checkpoint at bias 0.

Results go to ``OUT/results.json`` and ``OUT/call_bias.png`` after every arm; each arm's report is in
``OUT/<checkpoint>-bias<B>``, and a run started again plays only the arms (and sessions) it had not finished.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

PROFILE = "phone-135m"


def speculative_sessions(sessions_path: Path) -> int:
    """Sessions of a session log holding at least one call issued while the user was still speaking.

    Args:
        sessions_path: A ``sessions_<policy>.jsonl`` written by ``compare_policies``.

    Returns:
        The count.
    """
    from clocktune.timeline.analysis import call_records
    from clocktune.timeline.io import read_timelines

    return sum(
        any(record.speculative for record in call_records(timeline).values())
        for timeline in read_timelines(sessions_path)
    )


def paired_changes(arm: Path, reference: Path, policy: str) -> tuple[int, int]:
    """Sessions an arm completes that the reference arm does not, and the other way round.

    Args:
        arm: The arm's report folder.
        reference: The reference arm's report folder (the same checkpoint at bias 0).
        policy: The policy name in both reports' ``results.jsonl``.

    Returns:
        ``(gained, lost)``.
    """

    from clocktune.runtime.report import read_outcomes

    mine, theirs = read_outcomes(arm, policy), read_outcomes(reference, policy)
    gained = sum(mine[key] and not theirs[key] for key in mine)
    lost = sum(theirs[key] and not mine[key] for key in mine)
    return gained, lost


def _plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from clocktune.atomic import atomic_write

    figure, axis = plt.subplots(figsize=(6, 4))
    for model in dict.fromkeys(row["model"] for row in rows):
        points = sorted((row for row in rows if row["model"] == model), key=lambda row: row["call_bias"])
        axis.plot([p["speedup_p50"] for p in points], [p["live_accuracy"] for p in points], marker="o", label=model)
        for point in points:
            axis.annotate(f"{point['call_bias']:g}", (point["speedup_p50"], point["live_accuracy"]), fontsize=8)
    if rows:
        axis.axvline(rows[0]["bound_speedup_p50"], color="grey", linestyle=":", label="oracle bound")
    axis.set_xlabel("speedup p50 over sync")
    axis.set_ylabel("live accuracy")
    axis.set_title("call bias: live accuracy against speedup (labels: bias)")
    axis.legend(fontsize=8)
    figure.tight_layout()
    atomic_write(path, lambda temporary: figure.savefig(temporary, dpi=120))
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    """Plays every checkpoint at every bias and writes the table, the JSON and the plot.

    Args:
        argv: Command line (``sys.argv[1:]`` when ``None``).

    Returns:
        The exit status.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", nargs="+", required=True, help="checkpoint folders written by training")
    parser.add_argument("--data", nargs="+", required=True, help="held-out timelines (files or folders)")
    parser.add_argument("--biases", nargs="+", type=float, default=[0.0, 1.5, 3.0])
    parser.add_argument("--limit", type=int, default=None, help="the first N dialogues only")
    parser.add_argument("--out", type=Path, default=Path("runs/call-bias"))
    args = parser.parse_args(argv)
    if 0.0 not in args.biases:
        args.biases = [0.0, *args.biases]  # the reference every other arm is paired with

    from clocktune.atomic import atomic_write_text
    from clocktune.clock import PROFILES
    from clocktune.rendered_dataset import load_timeline_files
    from clocktune.runtime.evaluate import compare_policies
    from clocktune.runtime.policy_factories import bound_specs, load_policy_model, policy_spec
    from clocktune.runtime.session import SessionConfig
    from data_gen.backends import make_backend

    timelines = load_timeline_files(args.data)[: args.limit]
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    for model_path in args.model:
        name = Path(model_path).name
        loaded = None
        for bias in sorted(args.biases):
            folder = args.out / f"{name}-bias{bias:g}"
            if not (folder / "summary.json").exists():
                loaded = loaded or load_policy_model(model_path)
                spec = policy_spec("model", model_path, loaded, call_bias=bias)
                started = time.monotonic()
                compare_policies(
                    timelines,
                    spec,
                    policy_spec("sync"),
                    make_backend,
                    SessionConfig(device=PROFILES[PROFILE]),
                    folder,
                    bound=bound_specs(),
                    extra={"profile": PROFILE, "call_bias": bias, "model": model_path, "constrained": True},
                    session_logs=True,
                    progress=False,
                )
                print(f"{name} bias {bias:g}: {time.monotonic() - started:.0f} s")
            summary = json.loads((folder / "summary.json").read_text())
            gained, lost = paired_changes(folder, args.out / f"{name}-bias0", "model")
            rows.append(
                {
                    "model": name,
                    "call_bias": bias,
                    "live_accuracy": summary["accuracy"],
                    "latency_p50_s": summary["latency_p50_s"],
                    "sync_latency_p50_s": summary["baseline_latency_p50_s"],
                    "speedup_p50": summary["speedup_p50"],
                    # Over the dialogues both completed: a policy answering fast and wrong is not read as fast.
                    "speedup_p50_completed": summary["speedup_p50_completed"],
                    "bound_speedup_p50": summary["bound_speedup_p50"],
                    "speculative_sessions": speculative_sessions(folder / "sessions_model.jsonl"),
                    "gained_vs_bias0": gained,
                    "lost_vs_bias0": lost,
                    "failures": summary["failures"],
                }
            )
            result = {"dialogues": len(timelines), "profile": PROFILE, "rows": rows}
            atomic_write_text(args.out / "results.json", json.dumps(result, indent=2) + "\n")
            _plot(rows, args.out / "call_bias.png")

    print(f"{len(timelines)} held-out dialogues, {PROFILE}, grammar on; speedup p50 over scripted sync")
    header = (
        "| checkpoint | call bias | live accuracy | p50 s | speedup p50 | on both completed | speculative sessions"
    )
    print(header + " | +/- vs 0 | failures |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        failures = ", ".join(f"{key} {value}" for key, value in row["failures"].items()) or "none"
        print(
            f"| {row['model']} | {row['call_bias']:g} | {row['live_accuracy']:.2f} | {row['latency_p50_s']:.3f} |"
            f" {row['speedup_p50']:.2f}x | {row['speedup_p50_completed']:.2f}x | {row['speculative_sessions']} |"
            f" +{row['gained_vs_bias0']} -{row['lost_vs_bias0']} | {failures} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
