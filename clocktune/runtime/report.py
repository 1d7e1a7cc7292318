"""Reporting runs: the summary of a policy against a baseline, its confidence intervals, a table and plots.

Every figure is computed from :class:`~clocktune.runtime.play.PolicyRun` objects of the same timelines, so each
dialogue contributes a pair of outcomes. The summary is built so that it cannot flatter a policy: side-effect
violations are counted per policy, the speedup is a median ratio with a bootstrap interval (and a geometric mean
of per-dialogue ratios, which one instant wrong answer cannot inflate), and beside the speedup over all answered
dialogues stands the speedup on the dialogues both policies completed, so that a policy that answers fast and
wrong is not headlined as fast (docs/design.md §5).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from clocktune.atomic import atomic_write, atomic_write_lines
from clocktune.runtime.play import PolicyRun
from clocktune.timeline.io import write_timelines
from clocktune.timeline.show import draw_gantt

__all__ = [
    "accuracy_delta_ci95",
    "format_intervals",
    "format_table",
    "paired_bootstrap",
    "plot_latency_cdf",
    "read_outcomes",
    "rounded",
    "summarize_runs",
    "write_report",
]


def rounded(value: float | None, digits: int = 4) -> float | None:
    """``value`` rounded for a report, ``None`` kept.

    Args:
        value: A figure or ``None``.
        digits: Decimal places.

    Returns:
        The rounded figure.
    """
    return None if value is None else round(value, digits)


def _resampled_rows(dialogues: int, resamples: int, seed: int):
    """``resamples`` draws of ``dialogues`` dialogue indices with replacement, reproducible from ``seed``."""
    import numpy as np

    return np.random.default_rng(seed).integers(0, dialogues, size=(resamples, dialogues))


def _interval(values) -> list[float] | None:
    import numpy as np

    return [round(float(v), 4) for v in np.percentile(values, [2.5, 97.5])] if len(values) else None


def accuracy_delta_ci95(
    accurate: Sequence[bool], baseline_accurate: Sequence[bool], resamples: int = 2000, seed: int = 0
) -> list[float] | None:
    """95% confidence interval of one policy's accuracy minus another's on the same dialogues, by resampling them.

    Each resample draws dialogues with replacement and keeps each one's pair of outcomes, so a dialogue both policies
    complete (or both fail) moves neither side: the interval is that of a paired difference, narrower than two
    separate intervals would suggest.

    Args:
        accurate: Whether the policy completed each dialogue.
        baseline_accurate: Whether the other policy completed each, in the same order.
        resamples: Bootstrap resamples.
        seed: Seed of the resampling (the interval is reproducible).

    Returns:
        ``[low, high]`` of ``accuracy - baseline accuracy``, or ``None`` for no dialogues.

    Raises:
        ValueError: If the two sequences differ in length.
    """

    if len(accurate) != len(baseline_accurate):
        raise ValueError(f"paired outcomes differ in length: {len(accurate)} against {len(baseline_accurate)}")
    if not accurate:
        return None
    return _accuracy_interval(accurate, baseline_accurate, _resampled_rows(len(accurate), resamples, seed))


def _accuracy_interval(accurate: Sequence[bool], baseline_accurate: Sequence[bool], rows) -> list[float] | None:
    import numpy as np

    deltas = np.array(accurate, dtype=float)[rows] - np.array(baseline_accurate, dtype=float)[rows]
    return _interval(deltas.mean(axis=1))


def paired_bootstrap(
    policy: PolicyRun, baseline: PolicyRun, resamples: int = 2000, seed: int = 0
) -> dict[str, list[float] | None]:
    """95% confidence intervals of the speedup and the accuracy difference, by resampling dialogues.

    Both runs played the same timelines, so each resample draws dialogues with replacement and keeps each one's
    pair of outcomes: the intervals say how far another draw of as many dialogues could move the figures. A
    median of a few hundred latencies moves by several percent between draws, and 50 dialogues cannot separate
    accuracies a few points apart.

    Args:
        policy: The policy's run.
        baseline: The baseline's run (same timelines, same order).
        resamples: Bootstrap resamples.
        seed: Seed of the resampling (the intervals are reproducible).

    Returns:
        ``speedup_p50_ci95`` (baseline median over policy median, over answered dialogues as ``speedup_p50``) and
        ``accuracy_delta_ci95`` (policy accuracy minus baseline accuracy, :func:`accuracy_delta_ci95`), each
        ``[low, high]`` or ``None`` when no resample has a median.
    """
    import numpy as np

    def latencies(run: PolicyRun) -> np.ndarray:
        return np.array([np.nan if r.latency_s is None else r.latency_s for r in run.results])

    rows = _resampled_rows(len(policy.results), resamples, seed)
    with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a resample with no answered dialogue has no median
        ratios = np.nanmedian(latencies(baseline)[rows], axis=1) / np.nanmedian(latencies(policy)[rows], axis=1)
    ratios = ratios[np.isfinite(ratios)]
    # The same draws as the speedup's: one resampling of the dialogues for both intervals.
    accuracy = _accuracy_interval([r.accurate for r in policy.results], [r.accurate for r in baseline.results], rows)
    return {"speedup_p50_ci95": _interval(ratios), "accuracy_delta_ci95": accuracy}


def read_outcomes(report: str | os.PathLike, policy: str) -> dict[str, bool]:
    """Whether a policy completed each dialogue, from a report's ``results.jsonl`` (:func:`write_report`).

    Args:
        report: The report folder.
        policy: The policy's name in the report.

    Returns:
        Dialogue id to ``accurate``, in the report's order.

    Raises:
        ValueError: If the report holds no results of ``policy``.
    """
    path = Path(report) / "results.jsonl"
    rows = (json.loads(line) for line in path.read_text().splitlines() if line.strip())
    outcomes = {row["id"]: row["accurate"] for row in rows if row["policy"] == policy}
    if not outcomes:
        raise ValueError(f"{path}: no results of policy {policy!r}")
    return outcomes


def _speedup_where_both_completed(policy: PolicyRun, baseline: PolicyRun) -> tuple[int, float | None]:
    # The dialogues both policies got right: a policy that answers fast and wrong gains nothing here.
    pairs = [
        (b.latency_s, p.latency_s)
        for p, b in zip(policy.results, baseline.results, strict=True)
        if p.accurate and b.accurate and p.latency_s is not None and b.latency_s is not None
    ]
    if not pairs:
        return 0, None
    p50 = statistics.median(p for _, p in pairs)
    return len(pairs), statistics.median(b for b, _ in pairs) / p50 if p50 > 0 else None


def summarize_runs(policy: PolicyRun, baseline: PolicyRun, oracle: PolicyRun | None = None) -> dict[str, Any]:
    """The benchmark's summary of a policy against a baseline on the same timelines.

    Args:
        policy: The policy's run.
        baseline: The baseline's run (same timelines, same order).
        oracle: Optionally the oracle's run, to report the share of its latency reduction the policy achieves.

    Returns:
        A JSON-ready dict (see docs/runtime.md for every key).
    """
    ratios = [
        b.latency_s / p.latency_s
        for p, b in zip(policy.results, baseline.results, strict=True)
        if p.latency_s is not None and b.latency_s is not None and p.latency_s > 0 and b.latency_s > 0
    ]
    p50, base_p50 = policy.latency(50), baseline.latency(50)
    completed_both, speedup_completed = _speedup_where_both_completed(policy, baseline)
    summary: dict[str, Any] = {
        "policy": policy.name,
        "baseline": baseline.name,
        "dialogues": len(policy.results),
        "accuracy": rounded(policy.share("accurate")),
        "baseline_accuracy": rounded(baseline.share("accurate")),
        "answered": rounded(policy.share("answered")),
        "latency_p50_s": rounded(p50),
        "latency_p90_s": rounded(policy.latency(90)),
        "baseline_latency_p50_s": rounded(base_p50),
        "baseline_latency_p90_s": rounded(baseline.latency(90)),
        "speedup_p50": rounded(policy.speedup_over(baseline)),
        # A geometric mean: an arithmetic mean of ratios is dominated by the few dialogues a policy answers at once.
        "speedup_geomean": rounded(math.exp(statistics.fmean(math.log(r) for r in ratios))) if ratios else None,
        **paired_bootstrap(policy, baseline),
        "completed_both": completed_both,
        "speedup_p50_completed": rounded(speedup_completed),
        "wasted_calls_per_dialogue": rounded(policy.per_dialogue("wasted_calls")),
        "wasted_tool_s_per_dialogue": rounded(policy.per_dialogue("wasted_tool_s")),
        "notices_per_dialogue": rounded(policy.per_dialogue("notices")),
        "side_effect_violations": policy.violations,
        "baseline_side_effect_violations": baseline.violations,
        "failures": policy.failures(),
        "baseline_failures": baseline.failures(),
    }
    if oracle is not None:
        oracle_p50 = oracle.latency(50)
        summary["oracle_latency_p50_s"] = rounded(oracle_p50)
        summary["oracle_accuracy"] = rounded(oracle.share("accurate"))
        gain = (base_p50 - oracle_p50) if base_p50 is not None and oracle_p50 is not None else None
        summary["share_of_oracle_reduction"] = rounded((base_p50 - p50) / gain) if gain and p50 is not None else None
        summary["oracle_side_effect_violations"] = oracle.violations
    return summary


def format_intervals(summary: dict[str, Any]) -> str:
    """The speedup and the accuracy difference with their bootstrap intervals, and the speedup on the dialogues
    both policies completed (:func:`summarize_runs`), on two lines.

    Args:
        summary: A summary from :func:`summarize_runs`.

    Returns:
        The lines.
    """

    def interval(key: str, fmt: str) -> str:
        low_high = summary[key]
        return "no interval" if low_high is None else f"95% CI {low_high[0]:{fmt}} to {low_high[1]:{fmt}}"

    def ratio(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}x"

    delta = summary["accuracy"] - summary["baseline_accuracy"]
    return (
        f"{summary['policy']} against {summary['baseline']} on {summary['dialogues']} dialogues: speedup_p50 "
        f"{ratio(summary['speedup_p50'])} ({interval('speedup_p50_ci95', '.2f')}), accuracy {delta:+.3f} "
        f"({interval('accuracy_delta_ci95', '+.3f')})\n"
        f"on the {summary['completed_both']} dialogues both completed: speedup_p50 "
        f"{ratio(summary['speedup_p50_completed'])}"
    )


def format_table(runs: Sequence[PolicyRun], baseline: PolicyRun) -> str:
    """A short text table: one row per policy with accuracy, latency percentiles and speedup over the baseline,
    then why each policy's failed dialogues failed.

    Args:
        runs: Policy runs, baseline included or not.
        baseline: The run the speedups divide.

    Returns:
        The table.
    """
    nan = float("nan")
    lines = [f"{'policy':<14}{'accuracy':>9}{'p50 s':>8}{'p90 s':>8}{'speedup':>9}{'wasted':>8}{'violations':>11}"]
    for run in runs:
        p50, p90 = run.latency(50), run.latency(90)
        speedup = "-" if (ratio := run.speedup_over(baseline)) is None else f"{ratio:.2f}x"
        lines.append(
            f"{run.name:<14}{run.share('accurate'):>9.3f}{p50 if p50 is not None else nan:>8.3f}"
            f"{p90 if p90 is not None else nan:>8.3f}{speedup:>9}{run.per_dialogue('wasted_calls'):>8.2f}"
            f"{run.violations:>11d}"
        )
    for run in runs:
        if failures := run.failures():
            lines.append(f"{run.name} failed: " + ", ".join(f"{reason} {count}" for reason, count in failures.items()))
    return "\n".join(lines)


def plot_latency_cdf(runs: Sequence[PolicyRun], path: str | os.PathLike) -> None:
    """Draws the response-latency CDF of each run on one axis and saves it (PNG).

    Args:
        runs: Policy runs.
        path: Output image.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for run in runs:
        lat = sorted(r.latency_s for r in run.results if r.latency_s is not None)
        if lat:
            ax.step(lat, [(i + 1) / len(run.results) for i in range(len(lat))], where="post", label=run.name)
    ax.set_xlabel("response latency: end of speech to the first words of the answer (s)")
    ax.set_ylabel("fraction of dialogues")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(
    out_dir: str | os.PathLike,
    runs: Sequence[PolicyRun],
    summary: dict[str, Any],
    index: int = 0,
    session_logs: bool = False,
) -> None:
    """Writes ``results.jsonl`` (one line per dialogue and policy), ``summary.json``, ``latency_cdf.png``,
    ``gantt_<policy>.png`` (dialogue ``index`` under each policy) and, when asked, ``sessions_<policy>.jsonl``;
    every file atomically.

    Args:
        out_dir: Output folder (created).
        runs: Policy runs.
        summary: The summary to write.
        index: Which dialogue the Gantt charts show.
        session_logs: Also write each session's log as a timeline (``clocktune-datagen show``, ``validate`` and
            ``clocktune render`` read them). Each line repeats its timeline's header, tools and initial state, so
            the logs are several times the size of the data they replay: off unless asked for.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_lines(out / "results.jsonl", (json.dumps(r.to_dict()) + "\n" for run in runs for r in run.results))
    atomic_write_lines(out / "summary.json", [json.dumps(summary, indent=2) + "\n"])
    if session_logs:
        for run in runs:
            write_timelines(out / f"sessions_{run.name}.jsonl", (log.timeline for log in run.logs))
    atomic_write(out / "latency_cdf.png", lambda path: plot_latency_cdf(runs, path))
    for run in runs:
        atomic_write(out / f"gantt_{run.name}.png", lambda path, run=run: draw_gantt(run.logs[index].timeline, path))
