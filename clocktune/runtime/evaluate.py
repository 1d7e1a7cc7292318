"""The latency/accuracy benchmark: every timeline under a policy and a baseline, on the same clock and seeds.

``evaluate`` plays each timeline's user side against both policies (concurrently, on the virtual clock by
default), scores every session against ground truth, and summarises: accuracy, response-latency percentiles, the
speedup over the baseline (median ratio and mean of per-dialogue ratios), wasted calls, notices and side-effect
violations. ``write_report`` adds the per-dialogue JSONL, the summary, a latency CDF and a Gantt chart of one
dialogue under each policy.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import statistics
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from clocktune.runtime.journal import EvalJournal, JournalError, RunJournal
from clocktune.runtime.scoring import DialogueResult, score_session
from clocktune.runtime.session import Policy, Session, SessionConfig, SessionLog
from clocktune.runtime.virtual_clock import run_on_clock
from clocktune.timeline.events import Timeline
from clocktune.timeline.io import atomic_write_lines, timeline_to_json, write_timelines

# policy_factory(timeline) -> a fresh policy for one session.
PolicyFactory = Callable[[Timeline], Policy]


@dataclass
class PolicyRun:
    """The sessions of one policy over a set of timelines.

    Args:
        name: Policy name.
        results: Scores, in timeline order.
        logs: Session logs, in timeline order.
    """

    name: str
    results: list[DialogueResult]
    logs: list[SessionLog] = field(repr=False)

    def share(self, flag: str) -> float:
        """Fraction of dialogues whose boolean result field ``flag`` (``accurate``, ``answered``) is true."""
        return sum(getattr(r, flag) for r in self.results) / len(self.results)

    def per_dialogue(self, count: str) -> float:
        """Mean over dialogues of the numeric result field ``count`` (``wasted_calls``, ``notices``, ...)."""
        return sum(getattr(r, count) for r in self.results) / len(self.results)

    def latency(self, q: float) -> float | None:
        """The ``q``-th percentile of response latency over answered dialogues (``None`` when none was)."""
        return _percentile([r.latency_s for r in self.results if r.latency_s is not None], q)

    def speedup_over(self, baseline: PolicyRun) -> float | None:
        """The baseline's median latency over this run's (``None`` when either has no answered dialogue)."""
        p50, base_p50 = self.latency(50), baseline.latency(50)
        return base_p50 / p50 if p50 and base_p50 else None

    def failures(self) -> dict[str, int]:
        """How many dialogues failed for each reason (``DialogueResult.failure``), most frequent first."""
        return dict(Counter(r.failure for r in self.results if r.failure is not None).most_common())

    @property
    def violations(self) -> int:
        """Side-effect violations over all dialogues."""
        return sum(r.side_effect_violations for r in self.results)


async def _play(
    timelines: dict[int, Timeline],
    factory: PolicyFactory,
    config: SessionConfig,
    concurrency: int,
    bar: tqdm,
    journal: RunJournal | None,
) -> dict[int, SessionLog]:
    limit = asyncio.Semaphore(concurrency)

    async def one(index: int, timeline: Timeline) -> SessionLog:
        async with limit:
            policy = factory(timeline)
            try:
                log = await Session(timeline, policy, config).run()
            finally:
                policy.close()
        if journal is not None:
            journal.append(index, log)
        bar.update()
        return log

    logs = await asyncio.gather(*(one(index, timeline) for index, timeline in timelines.items()))
    return dict(zip(timelines, logs, strict=True))


def run_policy(
    name: str,
    timelines: Sequence[Timeline],
    factory: PolicyFactory,
    config: SessionConfig,
    concurrency: int = 10_000,
    progress: bool = False,
    journal: RunJournal | None = None,
) -> PolicyRun:
    """Runs every timeline under one policy and scores it.

    Args:
        name: Policy name for the results.
        timelines: Recorded timelines whose user side is replayed.
        factory: Builds the policy of one session.
        config: Session config (clock, device profile, injected failures).
        concurrency: Sessions in flight at once (all of them on the virtual clock; model policies on the wall
            clock want fewer).
        progress: Show a progress bar of finished sessions (model policies take seconds per session).
        journal: Where finished sessions are recorded; those it already holds are not played again.

    Returns:
        The run.
    """
    logs = journal.load() if journal is not None else {}
    for index, log in logs.items():
        if index >= len(timelines) or log.timeline.id != timelines[index].id:
            raise JournalError(f"{journal.path}: session {index} ({log.timeline.id}) is not of these timelines")
    todo = {index: timeline for index, timeline in enumerate(timelines) if index not in logs}
    with tqdm(total=len(timelines), initial=len(logs), desc=name, unit="session", disable=not progress) as bar:
        if todo:
            logs.update(run_on_clock(_play(todo, factory, config, concurrency, bar, journal), config.clock))
    ordered = [logs[index] for index in range(len(timelines))]
    return PolicyRun(name, [score_session(log, name) for log in ordered], ordered)


def compare_policies(
    timelines: Sequence[Timeline],
    policy: tuple[str, PolicyFactory],
    baseline: tuple[str, PolicyFactory],
    config: SessionConfig,
    out_dir: str | os.PathLike,
    concurrency: int = 10_000,
    extra: dict[str, Any] | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """The benchmark: a policy and a baseline (and the scripted oracle as the bound, unless one of them is it) on
    the same timelines; writes the report (:func:`write_report`), prints the table and returns the summary.

    Finished sessions are journaled in ``out_dir/journal`` as they end: run again with the same arguments, an
    interrupted evaluation plays only the sessions it had not finished. The journal is removed with the report
    written.

    Args:
        timelines: Recorded timelines whose user side is replayed.
        policy: ``(name, factory)`` of the policy measured.
        baseline: ``(name, factory)`` of the policy the speedups divide.
        config: Session config.
        out_dir: Report folder.
        concurrency: Sessions in flight at once.
        extra: Settings to record in the summary (profile, clock, model, ...); with the policy names, the config and
            the timelines they decide whether a journal is resumed, so name every model here.
        progress: Show a progress bar per policy.

    Returns:
        The summary (:func:`summarize_runs`, ``bound_speedup_p50`` when the oracle ran: the scripted sync's median
        over the oracle's, and ``extra``).
    """
    from clocktune.runtime.scripted import ScriptedPolicy

    (name, factory), (base_name, base_factory) = policy, baseline
    contents = hashlib.sha256("".join(timeline_to_json(t) + "\n" for t in timelines).encode()).hexdigest()
    settings = {
        "policy": name,
        "baseline": base_name,
        "timelines": contents,
        "config": asdict(config),
        **(extra or {}),
    }
    journal = EvalJournal(Path(out_dir) / "journal", settings)
    journal.open()
    measured = run_policy(name, timelines, factory, config, concurrency, progress, journal.run(f"policy_{name}"))
    base = run_policy(
        base_name, timelines, base_factory, config, concurrency, progress, journal.run(f"baseline_{base_name}")
    )
    runs = [base, measured]
    oracle = None
    if "oracle" not in (policy[0], baseline[0]):
        oracle = run_policy("oracle", timelines, lambda t: ScriptedPolicy(t, "oracle"), config, concurrency, progress)
        runs.append(oracle)
    summary = summarize_runs(measured, base, oracle)
    bound = None
    if oracle is not None:
        # What the dialogues allow at all. A baseline slower than the flawless turn-based loop (a model that writes
        # more tokens, calls the wrong tool, retries) lets a policy beat the oracle's bound by that slowness alone.
        flawless = run_policy("sync", timelines, lambda t: ScriptedPolicy(t, "sync"), config, concurrency)
        summary["bound_speedup_p50"] = bound = _rounded(oracle.speedup_over(flawless))
    summary.update(extra or {})
    write_report(out_dir, runs, summary)
    journal.close()
    print(format_table(runs, base))
    print(format_intervals(summary))
    if bound is not None:
        print(f"bound: on these dialogues the oracle answers {bound:.2f}x sooner than a flawless turn-based loop")
    return summary


def format_intervals(summary: dict[str, Any]) -> str:
    """One line with the speedup and the accuracy difference and their bootstrap intervals (:func:`summarize_runs`).

    Args:
        summary: A summary from :func:`summarize_runs`.

    Returns:
        The line.
    """

    def interval(key: str, fmt: str) -> str:
        low_high = summary[key]
        return "no interval" if low_high is None else f"95% CI {low_high[0]:{fmt}} to {low_high[1]:{fmt}}"

    speedup = "-" if summary["speedup_p50"] is None else f"{summary['speedup_p50']:.2f}x"
    delta = summary["accuracy"] - summary["baseline_accuracy"]
    return (
        f"{summary['policy']} against {summary['baseline']} on {summary['dialogues']} dialogues: speedup_p50 {speedup}"
        f" ({interval('speedup_p50_ci95', '.2f')}), accuracy {delta:+.3f} ({interval('accuracy_delta_ci95', '+.3f')})"
    )


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q) - 1]


def _rounded(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


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
        ``accuracy_delta_ci95`` (policy accuracy minus baseline accuracy), each ``[low, high]`` or ``None`` when
        no resample has a median.
    """
    import numpy as np

    def latencies(run: PolicyRun) -> np.ndarray:
        return np.array([np.nan if r.latency_s is None else r.latency_s for r in run.results])

    rows = np.random.default_rng(seed).integers(0, len(policy.results), size=(resamples, len(policy.results)))
    with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a resample with no answered dialogue has no median
        ratios = np.nanmedian(latencies(baseline)[rows], axis=1) / np.nanmedian(latencies(policy)[rows], axis=1)
    ratios = ratios[np.isfinite(ratios)]
    accurate = np.array([r.accurate for r in policy.results], dtype=float)
    base_accurate = np.array([r.accurate for r in baseline.results], dtype=float)
    deltas = (accurate[rows] - base_accurate[rows]).mean(axis=1)

    def interval(values: np.ndarray) -> list[float] | None:
        return [round(float(v), 4) for v in np.percentile(values, [2.5, 97.5])] if len(values) else None

    return {"speedup_p50_ci95": interval(ratios), "accuracy_delta_ci95": interval(deltas)}


def summarize_runs(policy: PolicyRun, baseline: PolicyRun, oracle: PolicyRun | None = None) -> dict[str, Any]:
    """The benchmark's summary of a policy against a baseline on the same timelines.

    Args:
        policy: The policy's run.
        baseline: The baseline's run (same timelines, same order).
        oracle: Optionally the oracle's run, to report the share of its latency reduction the policy achieves.

    Returns:
        A JSON-ready dict (see the README's eval section for every key).
    """
    pairs = [
        (b.latency_s, p.latency_s)
        for p, b in zip(policy.results, baseline.results, strict=True)
        if p.latency_s is not None and b.latency_s is not None and p.latency_s > 0
    ]
    p50, base_p50 = policy.latency(50), baseline.latency(50)
    summary: dict[str, Any] = {
        "policy": policy.name,
        "baseline": baseline.name,
        "dialogues": len(policy.results),
        "accuracy": _rounded(policy.share("accurate")),
        "baseline_accuracy": _rounded(baseline.share("accurate")),
        "answered": _rounded(policy.share("answered")),
        "latency_p50_s": _rounded(p50),
        "latency_p90_s": _rounded(policy.latency(90)),
        "baseline_latency_p50_s": _rounded(base_p50),
        "baseline_latency_p90_s": _rounded(baseline.latency(90)),
        "speedup_p50": _rounded(policy.speedup_over(baseline)),
        "speedup_mean": _rounded(statistics.fmean(b / p for b, p in pairs)) if pairs else None,
        **paired_bootstrap(policy, baseline),
        "wasted_calls_per_dialogue": _rounded(policy.per_dialogue("wasted_calls")),
        "wasted_tool_s_per_dialogue": _rounded(policy.per_dialogue("wasted_tool_s")),
        "notices_per_dialogue": _rounded(policy.per_dialogue("notices")),
        "side_effect_violations": policy.violations + baseline.violations,
        "failures": policy.failures(),
        "baseline_failures": baseline.failures(),
    }
    if oracle is not None:
        oracle_p50 = oracle.latency(50)
        summary["oracle_latency_p50_s"] = _rounded(oracle_p50)
        summary["oracle_accuracy"] = _rounded(oracle.share("accurate"))
        gain = (base_p50 - oracle_p50) if base_p50 is not None and oracle_p50 is not None else None
        summary["share_of_oracle_reduction"] = _rounded((base_p50 - p50) / gain) if gain and p50 is not None else None
        summary["oracle_side_effect_violations"] = oracle.violations
    return summary


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
    out_dir: str | os.PathLike, runs: Sequence[PolicyRun], summary: dict[str, Any], index: int = 0
) -> None:
    """Writes ``results.jsonl`` (one line per dialogue and policy), ``summary.json``, ``sessions_<policy>.jsonl``
    (each session's log as a timeline: ``clocktune-datagen show`` and ``render`` read it), ``latency_cdf.png`` and
    ``gantt_<policy>.png`` (dialogue ``index`` under each policy); every file atomically.

    Args:
        out_dir: Output folder (created).
        runs: Policy runs.
        summary: The summary to write.
        index: Which dialogue the Gantt charts show.
    """
    from data_gen.show import draw_gantt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_lines(out / "results.jsonl", (json.dumps(r.to_dict()) + "\n" for run in runs for r in run.results))
    atomic_write_lines(out / "summary.json", [json.dumps(summary, indent=2) + "\n"])
    for run in runs:
        write_timelines(out / f"sessions_{run.name}.jsonl", (log.timeline for log in run.logs))
    _save_png(out / "latency_cdf.png", lambda path: plot_latency_cdf(runs, path))
    for run in runs:
        _save_png(out / f"gantt_{run.name}.png", lambda path, run=run: draw_gantt(run.logs[index].timeline, path))


def _save_png(path: Path, draw: Callable[[Path], None]) -> None:
    # Draw to a temporary name and rename, so a reader never sees half an image.
    staging = path.with_name(f".{path.name}.tmp.png")
    draw(staging)
    os.replace(staging, path)
