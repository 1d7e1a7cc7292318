"""A fair share of the CPU cores for training and decoding: as many torch threads as the cores other processes leave.

torch runs each operator on a team of OpenMP threads that meet at a barrier after every parallel region. On a
2-core machine with two threads and one other CPU-bound process, one of the two threads is always waiting for the
scheduler to give it a core back, and the other spins at the barrier meanwhile: the demo's training steps took 13 to
63 s instead of about 7 (docs/benchmarks-history.md, "A fair share of the cores"). One thread on the core left free takes about
1.7x a quiet two-thread step, and never waits for another.

:class:`FairShare` measures, between two samples, how many cores the *other* processes kept busy (the machine's busy
time from ``/proc/stat`` less this process's own CPU time), and sets ``torch.set_num_threads`` to the cores they left,
at least one and at most the threads torch started with. :class:`FairShareCallback` does so every few optimizer
steps of a ``Trainer``; a caller decoding on the CPU calls :meth:`FairShare.adjust` between phases. Where
``/proc/stat`` does not exist (macOS, Windows), nothing changes.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from transformers import TrainerCallback

__all__ = ["CpuSample", "FairShare", "FairShareCallback", "other_busy_cores"]

# /proc/stat counts in USER_HZ ticks: 100 a second on every Linux ABI in use.
_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
# Columns of /proc/stat's "cpu" line that are work some process did: user, nice, system, irq, softirq. Not idle or
# iowait (nobody's work), nor steal (the hypervisor's: no thread count here gets it back), nor guest (in user).
_BUSY_COLUMNS = (0, 1, 2, 5, 6)
# A core counts as taken when the other processes used more than this share of it over the window: a shell or an
# editor waking now and then must not halve training.
_TAKEN_SHARE = 0.5


@dataclass(frozen=True)
class CpuSample:
    """The machine's busy CPU seconds and this process's own, at one wall-clock moment."""

    wall_s: float
    machine_busy_s: float
    own_s: float


def _read_sample() -> CpuSample | None:
    try:
        with open("/proc/stat", encoding="ascii") as handle:
            fields = handle.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    busy_ticks = sum(int(fields[1 + column]) for column in _BUSY_COLUMNS if 1 + column < len(fields))
    own = os.times()
    return CpuSample(time.monotonic(), busy_ticks / _TICKS_PER_S, own.user + own.system)


def other_busy_cores(before: CpuSample, after: CpuSample) -> float:
    """Cores the other processes kept busy, on average, between two samples.

    Args:
        before: The earlier sample.
        after: The later sample.

    Returns:
        The machine's busy CPU seconds less this process's, over the wall-clock seconds between them (0 when no time
        passed).
    """
    wall = after.wall_s - before.wall_s
    if wall <= 0:
        return 0.0
    others = (after.machine_busy_s - before.machine_busy_s) - (after.own_s - before.own_s)
    return max(0.0, others / wall)


class FairShare:
    """Sets torch's thread count to the cores other processes leave (see the module docstring).

    Args:
        max_threads: The most threads to use; ``torch.get_num_threads()`` at construction when ``None``.
        cores: The cores of the machine this process may run on; ``os.sched_getaffinity`` when ``None``.
    """

    def __init__(self, max_threads: int | None = None, cores: int | None = None) -> None:
        import torch

        self._torch = torch
        self.max_threads = max_threads if max_threads is not None else torch.get_num_threads()
        self.cores = cores if cores is not None else len(os.sched_getaffinity(0))
        self.threads = torch.get_num_threads()
        self.busiest_others = 0.0  # the most cores other processes took in any window: the demo reports it
        self._last = _read_sample()

    def threads_for(self, others: float) -> int:
        """The thread count that leaves the cores ``others`` use to them: at least 1, at most ``max_threads``."""
        taken = int(others + 1 - _TAKEN_SHARE)  # rounds a share above _TAKEN_SHARE of a core up to a whole core
        return max(1, min(self.max_threads, self.cores - taken))

    def adjust(self) -> int:
        """Measures the other processes' load since the last call and sets the thread count for it.

        Returns:
            The thread count now in force.
        """
        sample = _read_sample()
        if sample is None or self._last is None:
            return self.threads
        others = other_busy_cores(self._last, sample)
        self._last = sample
        self.busiest_others = max(self.busiest_others, others)
        threads = self.threads_for(others)
        if threads != self.threads:
            self._torch.set_num_threads(threads)
            self.threads = threads
        return threads

    def settle(self, seconds: float = 1.0) -> int:
        """Measures the load over the next ``seconds`` (this process idle) and sets the thread count for it: before a
        phase that starts cold, such as a live evaluation.

        Returns:
            The thread count now in force.
        """
        self._last = _read_sample()
        time.sleep(seconds)
        return self.adjust()


class FairShareCallback(TrainerCallback):
    """Re-measures the other processes' load every ``every`` optimizer steps and sets torch's threads for it.

    A step is long (seconds on a CPU), so the window is a few steps: long enough to average out a burst, short enough
    that a process starting beside training costs a few slow steps, not the run.

    Args:
        share: The :class:`FairShare` to adjust (the caller may read its ``threads`` and ``busiest_others``).
        every: Steps between measurements.
    """

    def __init__(self, share: FairShare, every: int = 2) -> None:
        self.share = share
        self.every = every

    def on_step_end(self, args, state, control, **kwargs) -> None:
        if state.global_step % self.every == 0:
            self.share.adjust()
