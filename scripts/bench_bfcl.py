"""BFCL v4 multi-turn as streaming, timed scenarios: every scripted policy on every multi-turn category.

    make bfcl && python scripts/bench_bfcl.py --out runs/bfcl

Imports each category with ``import_bfcl`` (speech through the speech model, BFCL's simulated APIs as backends,
the default latency model), plays every timeline under each scripted policy on the virtual clock (h200-3b
profile), and prints accuracy (executed calls and final state as BFCL's multi-turn checker compares them) and the
median response latency with the speedup over ``sync``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from clocktune.runtime.play import run_policy
from clocktune.runtime.report import summarize_runs
from clocktune.runtime.scripted import SCRIPTED_POLICIES, ScriptedPolicy
from clocktune.runtime.session import SessionConfig
from clocktune.timeline.io import read_timelines
from data_gen.backends import make_backend
from data_gen.importers.bfcl import CATEGORIES, import_bfcl


def main() -> None:
    """Imports, plays and prints one table row per category and policy."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/bfcl", help="where the imported timelines go")
    parser.add_argument("--categories", nargs="+", default=list(CATEGORIES))
    args = parser.parse_args()
    print(f"{'category':<26}{'policy':<14}{'n':>5}{'accuracy':>9}{'state ok':>9}{'p50 s':>8}{'speedup':>9}")
    for category in args.categories:
        started = time.perf_counter()
        result = import_bfcl(category, Path(args.out) / category, seed=0)
        timelines = read_timelines(result["path"])
        runs = {
            name: run_policy(name, timelines, lambda t, n=name: ScriptedPolicy(t, n), make_backend, SessionConfig())
            for name in SCRIPTED_POLICIES
        }
        for name, run in runs.items():
            summary = summarize_runs(run, runs["sync"])
            state_ok = sum(r.state_ok for r in run.results) / len(run.results)
            print(
                f"{category:<26}{name:<14}{len(timelines):>5}{summary['accuracy']:>9.3f}{state_ok:>9.3f}"
                f"{summary['latency_p50_s']:>8.3f}{summary['speedup_p50']:>8.2f}x"
            )
        skipped = len(result["skipped"])
        print(f"  ({skipped} entries skipped; import and five policies in {time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
