"""Generator throughput and memory.

Measures dialogues/s with 1 and 2 worker processes on the same dialogues (the 1-process run is the baseline of
the ratio), then streams 100k dialogues to disk through the CLI and samples the resident memory of the whole
process tree.

    python scripts/bench_datagen.py [--num 4000] [--stream 100000]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from data_gen.config import GeneratorConfig
from data_gen.writer import GenerationJob, run_generation


def _tree_rss_mb(root: int) -> float:
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        try:
            with open(f"/proc/{pid}/status") as handle:
                total += next(int(line.split()[1]) for line in handle if line.startswith("VmRSS"))
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as handle:
                    stack += [int(child) for child in handle.read().split()]
        except (FileNotFoundError, ProcessLookupError, StopIteration):
            continue
    return total / 1024


def throughput(num: int, num_proc: int, out: Path) -> float:
    job = GenerationJob(GeneratorConfig(), num, 0, out)
    start = time.perf_counter()
    run_generation(job, num_proc=num_proc, progress=False)
    return num / (time.perf_counter() - start)


def stream(num: int, out: Path) -> tuple[float, float]:
    command = [sys.executable, "-m", "data_gen.cli", "generate", "--num", str(num), "--out", str(out)]
    command += ["--num-proc", "2", "--quiet"]
    start = time.perf_counter()
    process = subprocess.Popen(command)
    peak = 0.0

    def sample() -> None:
        nonlocal peak
        while process.poll() is None:
            peak = max(peak, _tree_rss_mb(process.pid))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()
    process.wait()
    sampler.join()
    if process.returncode != 0:
        raise SystemExit(f"generate failed with exit code {process.returncode}")
    return num / (time.perf_counter() - start), peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num", type=int, default=4000)
    parser.add_argument("--stream", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        one = throughput(args.num, 1, Path(tmp) / "one")
        two = throughput(args.num, 2, Path(tmp) / "two")
        print(f"cores available: {os.cpu_count()}")
        print(f"1 process : {one:8.0f} dialogues/s")
        print(f"2 processes: {two:8.0f} dialogues/s  ({two / one:.2f}x the 1-process baseline)")
        rate, peak = stream(args.stream, Path(tmp) / "stream")
        size = sum(p.stat().st_size for p in (Path(tmp) / "stream").rglob("*") if p.is_file()) / 2**20
        print(f"{args.stream} dialogues streamed with 2 processes: {rate:.0f} dialogues/s, {size:.0f} MiB on disk,")
        print(f"  peak resident memory of the process tree: {peak:.0f} MB")


if __name__ == "__main__":
    main()
