"""Benchmark: does a generated timeline come back unchanged when its expert plays it in the runtime?

    python scripts/bench_expert_replay.py                  # 1,000 default dialogues, seed 0
    python scripts/bench_expert_replay.py --num 200 --seed 3 --teacher sync

Generates dialogues with the default config (the generator runs the expert of the teacher's strategy in the runtime,
``data_gen.generate``), plays each one's user speech in the runtime on the virtual clock again with a fresh expert
of the same strategy (``data_gen.expert``, which never reads the recorded agent events), and counts the dialogues
whose session log equals the recorded timeline: the same events (kind, call id, tool, arguments, words, results),
and the same events at the same times. It also prints the generation rate, to set beside the replay's.
"""

from __future__ import annotations

import argparse
import statistics
import time

from clocktune.runtime.play import run_policy
from clocktune.runtime.session import SessionConfig
from data_gen.backends import make_backend
from data_gen.config import GeneratorConfig
from data_gen.dialogues import select_domains
from data_gen.expert import expert_factory
from data_gen.generate import generate_dialogue


def _fields(events: list) -> list[tuple]:
    return [(e.kind, e.call_id, e.name, e.arguments, e.text, e.final, e.revises, e.content, e.error) for e in events]


def main() -> None:
    """Prints how many replayed dialogues match their recorded timeline, and by how much the others' times differ."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num", type=int, default=1000, help="dialogues")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--teacher", choices=("speculative", "sync"), default="speculative")
    args = parser.parse_args()

    config = GeneratorConfig(teacher=args.teacher)
    domains = select_domains(config)
    start = time.perf_counter()
    timelines = [generate_dialogue(i, args.seed, config, domains) for i in range(args.num)]
    generation_s = time.perf_counter() - start
    start = time.perf_counter()
    run = run_policy(
        args.teacher, timelines, expert_factory(args.teacher, config, domains), make_backend, SessionConfig()
    )
    seconds = time.perf_counter() - start
    same_events, same_times, worst = 0, 0, []
    for timeline, log in zip(timelines, run.logs, strict=True):
        if _fields(timeline.events) != _fields(log.timeline.events):
            continue
        same_events += 1
        dt = max(abs(a.t - b.t) for a, b in zip(timeline.events, log.timeline.events, strict=True))
        worst.append(dt)
        same_times += dt < 1e-9
    print(
        f"{args.num} {args.teacher} dialogues (seed {args.seed}) generated in {generation_s:.1f} s "
        f"({args.num / generation_s:,.0f}/s), replayed by the expert in {seconds:.1f} s"
    )
    print(f"  completed: {sum(r.accurate for r in run.results)}")
    print(f"  the same events as recorded: {same_events}")
    print(f"  the same events at the same times: {same_times}")
    if worst:
        p90 = statistics.quantiles(worst, n=10)[-1] if len(worst) > 1 else worst[0]
        print(
            f"  largest |dt| per dialogue: p50 {statistics.median(worst):.3f} s, p90 {p90:.3f} s, max {max(worst):.3f} s"
        )


if __name__ == "__main__":
    main()
