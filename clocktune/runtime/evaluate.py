"""The latency/accuracy benchmark: a policy and a baseline on the same timelines, same clock and seeds.

:func:`compare_policies` plays both (``play``), and the bound's two scripted policies unless a run already played
them, journals finished sessions so that an interrupted evaluation resumes, and writes the report (``report``):
accuracy, response-latency percentiles, the speedup over the baseline with its interval, the speedup on the
dialogues both completed, wasted calls, notices, side-effect violations per policy and the oracle's bound.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from clocktune.runtime.journal import EvalJournal
from clocktune.runtime.play import PolicyRun, run_policy
from clocktune.runtime.policy import PolicySpec
from clocktune.runtime.report import format_intervals, format_table, rounded, summarize_runs, write_report
from clocktune.runtime.session import SessionConfig
from clocktune.timeline.events import Timeline
from clocktune.timeline.io import timeline_to_json
from clocktune.tools import BackendFactory

__all__ = ["compare_policies"]


def compare_policies(
    timelines: Sequence[Timeline],
    policy: PolicySpec,
    baseline: PolicySpec,
    backends: BackendFactory,
    config: SessionConfig,
    out_dir: str | os.PathLike,
    bound: tuple[PolicySpec, PolicySpec] | None = None,
    concurrency: int = 10_000,
    extra: dict[str, Any] | None = None,
    progress: bool = True,
    session_logs: bool = False,
) -> dict[str, Any]:
    """The benchmark: a policy against a baseline on the same timelines, and what the dialogues allow at all.

    Writes the report (:func:`~clocktune.runtime.report.write_report`), prints the table and returns the summary.
    Finished sessions are journaled in ``out_dir/journal`` as they end: run again with the same arguments, an
    interrupted evaluation plays only the sessions it had not finished. The journal is removed once the report is
    written. A spec whose key another run already has is not played again (a scripted ``sync`` baseline is the
    bound's turn-based loop, an ``oracle`` policy the bound's oracle).

    Args:
        timelines: Recorded timelines whose user side is replayed.
        policy: The policy measured.
        baseline: The policy the speedups divide.
        backends: Builds each session's tool backend (``data_gen.backends.make_backend``).
        config: Session config.
        out_dir: Report folder.
        bound: ``(oracle, turn_based)``: the oracle's share of the latency reduction and ``bound_speedup_p50``, the
            turn-based loop's median over the oracle's, come from these; ``None`` leaves them out.
        concurrency: Sessions in flight at once.
        extra: Settings to record in the summary (profile, clock, model, ...); with the policy keys, the config and
            the timelines they decide whether a journal is resumed, so name every model here.
        progress: Show a progress bar per policy.
        session_logs: Also write each session's log (``sessions_<policy>.jsonl``).

    Returns:
        The summary (:func:`~clocktune.runtime.report.summarize_runs`, ``bound_speedup_p50`` with a bound, and
        ``extra``).

    Raises:
        JournalError: When ``out_dir/journal`` holds an evaluation started with other settings.
    """
    contents = hashlib.sha256("".join(timeline_to_json(t) + "\n" for t in timelines).encode()).hexdigest()
    settings = {
        "policy": policy.key,
        "baseline": baseline.key,
        "bound": None if bound is None else [spec.key for spec in bound],
        "timelines": contents,
        "config": asdict(config),
        **(extra or {}),
    }
    journal = EvalJournal(Path(out_dir) / "journal", settings)
    journal.open()
    played: dict[str, PolicyRun] = {}

    def play(spec: PolicySpec, role: str) -> PolicyRun:
        if spec.key not in played:
            run = journal.run(f"{role}_{spec.name}")
            played[spec.key] = run_policy(
                spec.name, timelines, spec.factory, backends, config, concurrency, progress, run
            )
        return played[spec.key]

    measured, base = play(policy, "policy"), play(baseline, "baseline")
    oracle = flawless = None
    if bound is not None:
        oracle, flawless = play(bound[0], "oracle"), play(bound[1], "turn_based")
    summary = summarize_runs(measured, base, oracle)
    if oracle is not None:
        # What the dialogues allow at all. A baseline slower than the flawless turn-based loop (a model that writes
        # more tokens, calls the wrong tool, retries) lets a policy beat the oracle's bound by that slowness alone.
        summary["bound_speedup_p50"] = rounded(oracle.speedup_over(flawless))
    summary.update(extra or {})
    runs = [base, measured] + (
        [oracle] if oracle is not None and all(oracle is not r for r in (base, measured)) else []
    )
    write_report(out_dir, runs, summary, session_logs=session_logs)
    journal.close()
    print(format_table(runs, base))
    print(format_intervals(summary))
    if summary.get("bound_speedup_p50") is not None:
        print(
            f"bound: on these dialogues the oracle answers {summary['bound_speedup_p50']:.2f}x sooner than a "
            "flawless turn-based loop"
        )
    return summary
