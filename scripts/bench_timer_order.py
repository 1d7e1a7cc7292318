"""The virtual loop's timer comparisons: a prebuilt (time, sequence) key against two tuples built per comparison.

Plays the same generated dialogues under the scripted speculative policy, all sessions on one virtual loop,
alternating the two comparisons in one process (so that the machine's pace falls on both alike), and checks that
the session logs are the same. Usage: ``python scripts/bench_timer_order.py --dialogues 2000 --repeats 3``.
"""

from __future__ import annotations

import argparse
import statistics
import time

from clocktune.runtime import timer_order
from clocktune.runtime.play import run_policy
from clocktune.runtime.scripted import ScriptedPolicy
from clocktune.runtime.session import SessionConfig
from data_gen.backends import make_backend
from data_gen.config import GeneratorConfig
from data_gen.dialogues import select_domains
from data_gen.generate import generate_dialogue

Handle = timer_order.OrderedTimerHandle
PREBUILT = (Handle.__lt__, Handle.__gt__)
# The comparison before 2026-12-04: a tuple of (time, sequence) built for each side of every comparison.
PER_COMPARISON = (
    lambda self, other: (self._when, self._key[1]) < (other._when, other._key[1]),
    lambda self, other: (self._when, self._key[1]) > (other._when, other._key[1]),
)


def main() -> None:
    """Prints each comparison's seconds per run, their medians and whether the logs agree."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dialogues", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    config = GeneratorConfig()
    domains = select_domains(config)
    timelines = [generate_dialogue(i, 0, config, domains) for i in range(args.dialogues)]
    seconds: dict[str, list[float]] = {"per comparison": [], "prebuilt": []}
    logs = {}
    for _ in range(args.repeats):
        for name, (less, greater) in (("per comparison", PER_COMPARISON), ("prebuilt", PREBUILT)):
            Handle.__lt__, Handle.__gt__ = less, greater
            started = time.perf_counter()
            run = run_policy(
                "speculative", timelines, lambda t: ScriptedPolicy(t, "speculative"), make_backend, SessionConfig()
            )
            seconds[name].append(time.perf_counter() - started)
            logs[name] = [log.timeline for log in run.logs]
    Handle.__lt__, Handle.__gt__ = PREBUILT
    for name, values in seconds.items():
        print(f"{name}: {', '.join(f'{s:.2f}' for s in values)} s; median {statistics.median(values):.2f} s")
    print("same session logs:", logs["per comparison"] == logs["prebuilt"])


if __name__ == "__main__":
    main()
