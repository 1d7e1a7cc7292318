"""Benchmark of where speculation pays: scripted speedups over the turn-based loop across operating points.

    python scripts/bench_operating_point.py                       # 3 speech rates x 3 tool speeds x 2 devices
    python scripts/bench_operating_point.py --dialogues 100 --plot runs/operating_point.png   # quick, with a plot

The default operating point (~3 words/s, ~600 ms median tools, a 3B model on an H200) is one cell of a grid. For
each cell the script generates the same dialogue seeds with the speech rate, the tools' latency scale and the
device profile of the cell, plays them under ``sync``, ``speculative`` and ``oracle`` on the virtual clock, and
prints each policy's median response latency (end of speech to the answer's first words), the speculative
policy's median speedup over ``sync`` with its 95% paired-bootstrap interval, and the bound (``oracle`` over
``sync``). Every cell is measured in the same process, against the ``sync`` run of the same dialogues.
"""

from __future__ import annotations

import argparse
import itertools
import time
from dataclasses import replace
from pathlib import Path

from clocktune.atomic import atomic_write
from clocktune.clock import PROFILES, SpeechConfig, ToolLatencyConfig
from clocktune.runtime.play import PolicyRun, run_policy
from clocktune.runtime.report import summarize_runs
from clocktune.runtime.scripted import ScriptedPolicy
from clocktune.runtime.session import SessionConfig
from data_gen.backends import make_backend
from data_gen.config import GeneratorConfig
from data_gen.dialogues import select_domains
from data_gen.generate import generate_dialogue

POLICIES = ("sync", "speculative", "oracle")


def cell_config(words_per_s: float, median_scale: float, profile: str) -> GeneratorConfig:
    """The generator config of one cell: the defaults with the cell's speech rate, tool scale and device.

    Args:
        words_per_s: Mean speaking rate of the generated users.
        median_scale: Multiplier of every tool's median latency (1.0: medians around 600 ms).
        profile: Device profile, a key of ``clocktune.clock.PROFILES``.

    Returns:
        The config.
    """
    return GeneratorConfig(
        speech=replace(SpeechConfig(), words_per_s=words_per_s),
        tools=replace(ToolLatencyConfig(), median_scale=median_scale),
        device=PROFILES[profile],
    )


def measure_cell(words_per_s: float, median_scale: float, profile: str, dialogues: int, seed: int) -> dict:
    """Plays one operating point's dialogues under every policy of :data:`POLICIES`.

    Args:
        words_per_s: Mean speaking rate of the generated users.
        median_scale: Multiplier of every tool's median latency (1.0: medians around 600 ms).
        profile: Device profile (a key of ``clocktune.clock.PROFILES``) for the teacher and the runtime alike.
        dialogues: Dialogues to generate and play.
        seed: Generator seed.

    Returns:
        The cell's settings, the speculative policy's summary against ``sync`` with the oracle, and the seconds
        it took.
    """
    config = cell_config(words_per_s, median_scale, profile)
    started = time.perf_counter()
    domains = select_domains(config)
    timelines = [generate_dialogue(index, seed, config, domains) for index in range(dialogues)]
    session = SessionConfig(device=PROFILES[profile])
    runs: dict[str, PolicyRun] = {
        name: run_policy(name, timelines, lambda t, n=name: ScriptedPolicy(t, n), make_backend, session)
        for name in POLICIES
    }
    summary = summarize_runs(runs["speculative"], runs["sync"], runs["oracle"])
    return {
        "profile": profile,
        "words_per_s": words_per_s,
        "median_scale": median_scale,
        "summary": summary,
        "bound": runs["oracle"].speedup_over(runs["sync"]),
        "seconds": time.perf_counter() - started,
    }


def format_row(cell: dict) -> str:
    """One printed line of the table."""
    summary = cell["summary"]
    low, high = summary["speedup_p50_ci95"]
    return (
        f"{cell['profile']:<12}{cell['words_per_s']:>8.1f}{0.6 * cell['median_scale']:>10.2f}"
        f"{summary['baseline_latency_p50_s']:>9.3f}{summary['latency_p50_s']:>9.3f}{summary['oracle_latency_p50_s']:>9.3f}"
        f"{summary['speedup_p50']:>8.2f}x ({low:.2f}-{high:.2f}){cell['bound']:>8.2f}x"
        f"{summary['accuracy']:>7.3f}{summary['baseline_accuracy']:>7.3f}{summary['side_effect_violations']:>5d}"
    )


def plot_cells(cells: list[dict], path: Path) -> None:
    """Draws the speculative speedup of every cell as one heatmap per device profile.

    Args:
        cells: Results of :func:`measure_cell`.
        path: Where the PNG goes (written to a temporary name first, then renamed).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    profiles = list(dict.fromkeys(cell["profile"] for cell in cells))
    rates = sorted({cell["words_per_s"] for cell in cells})
    scales = sorted({cell["median_scale"] for cell in cells})
    figure, axes = plt.subplots(1, len(profiles), figsize=(4.5 * len(profiles), 3.8), squeeze=False)
    for axis, profile in zip(axes[0], profiles, strict=True):
        grid = [[None] * len(scales) for _ in rates]
        for cell in cells:
            if cell["profile"] == profile:
                row, column = rates.index(cell["words_per_s"]), scales.index(cell["median_scale"])
                grid[row][column] = cell
        values = [[cell["summary"]["speedup_p50"] for cell in row] for row in grid]
        image = axis.imshow(values, cmap="viridis", vmin=1.0, origin="lower", aspect="auto")
        for row, column in itertools.product(range(len(rates)), range(len(scales))):
            cell = grid[row][column]
            label = f"{cell['summary']['speedup_p50']:.2f}x\n(bound {cell['bound']:.2f}x)"
            bright = image.norm(cell["summary"]["speedup_p50"]) > 0.6  # viridis turns yellow: dark text there
            axis.text(column, row, label, ha="center", va="center", color="black" if bright else "white", fontsize=8)
        axis.set_xticks(range(len(scales)), [f"{0.6 * s:.2f}" for s in scales])
        axis.set_yticks(range(len(rates)), [f"{r:g}" for r in rates])
        axis.set_xlabel("tool median latency (s)")
        axis.set_ylabel("speech rate (words/s)")
        axis.set_title(f"speculative over sync, {profile}")
        figure.colorbar(image, ax=axis, shrink=0.8)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    # Through a temporary sibling (which keeps the .png suffix savefig picks the format by), so that a plot from an
    # earlier run is replaced whole or not at all.
    atomic_write(path, lambda tmp: figure.savefig(tmp, dpi=120))
    plt.close(figure)


def main() -> None:
    """Measures every cell of the grid and prints the table (and the plot with ``--plot``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dialogues", type=int, default=500, help="dialogues per cell")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--words-per-s", type=float, nargs="+", default=[2.0, 3.0, 4.0])
    parser.add_argument("--median-scales", type=float, nargs="+", default=[0.5, 1.0, 2.0])
    parser.add_argument("--profiles", nargs="+", default=["h200-3b", "phone-135m"], choices=sorted(PROFILES))
    parser.add_argument("--plot", type=Path, help="write a heatmap of the speedups here (PNG)")
    args = parser.parse_args()

    print(
        f"== {args.dialogues} dialogues per cell, seed {args.seed}; latency p50 in s, to the answer's first words =="
    )
    print(
        f"{'profile':<12}{'words/s':>8}{'tools s':>10}{'sync':>9}{'spec':>9}{'oracle':>9}"
        f"{'spec/sync (95% CI)':>22}{'bound':>9}{'acc':>7}{'sync':>7}{'viol':>5}"
    )
    cells = []
    started = time.perf_counter()
    for profile, words_per_s, median_scale in itertools.product(args.profiles, args.words_per_s, args.median_scales):
        cell = measure_cell(words_per_s, median_scale, profile, args.dialogues, args.seed)
        cells.append(cell)
        print(format_row(cell), flush=True)
    print(f"{len(cells)} cells in {time.perf_counter() - started:.0f} s")
    if args.plot is not None:
        plot_cells(cells, args.plot)
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
