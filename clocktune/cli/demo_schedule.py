"""How long `make demo` takes: what it says at the start, when each phase ends, and when the whole will end.

A newcomer who runs the demo should know before it starts that it takes some forty minutes on a 2-core CPU, and, a
few training steps in, when it will be done on *their* machine. The demo's phases and their times on a quiet 2-core
machine are below (``make demo`` of 2026-12-03, BENCHMARKS.md); once the first training steps are timed, every
phase still to come is scaled by how much slower (or faster) those steps ran than the quiet machine's, and the
trainings' remaining steps are counted at the measured pace.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from transformers import TrainerCallback

__all__ = ["QUIET_PHASES", "SYNC_PHASES", "DemoSchedule", "EtaCallback", "StepTimer", "TimeBudget", "format_duration"]

# The demo's phases, in order, and their seconds on a quiet 2-core machine (BENCHMARKS.md, `make demo` of
# 2026-12-03: trainings 857-882 s and 974-1,008 s, live evaluations 213-228 s). The data and the teacher-forced scores
# are 2026-12-04's run beside a CPU-bound process divided by its pace (3.37x the quiet step): 3 s, 292 s, 291 s. The
# trainings are counted in steps (their quiet pace below) plus loading and saving.
QUIET_PHASES: dict[str, float] = {
    "generate the dialogues": 5.0,
    "score the untrained model": 90.0,
    "train the model": 880.0,
    "score the trained model": 90.0,
    "play it live": 220.0,
    "generate the turn-based teacher's dialogues": 5.0,
    "train the sync-teacher model": 1000.0,
    "play the sync-teacher model live": 230.0,
}
TRAININGS = ("train the model", "train the sync-teacher model")
# The phases of the sync-teacher model (``--no-sync-model`` skips them).
SYNC_PHASES = (
    "generate the turn-based teacher's dialogues",
    "train the sync-teacher model",
    "play the sync-teacher model live",
)


def format_duration(seconds: float) -> str:
    """``1 h 02 min``, ``14 min 05 s`` or ``42 s``."""
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"


@dataclass
class DemoSchedule:
    """The demo's phases, timed as they run, and the estimate of the rest.

    Args:
        phases: The phases this run will go through, with their quiet-machine seconds (a subset of
            :data:`QUIET_PHASES`, in order).
        quiet_seconds_per_step: The first training's seconds per step on a quiet machine.
        steps: Steps of each training.
        say: Where the lines go (``print``).
    """

    phases: dict[str, float]
    quiet_seconds_per_step: float
    steps: int
    say: Callable[[str], None] = print
    started: float = field(default_factory=lambda: time.monotonic())  # looked up at each call: tests fake it
    done: dict[str, float] = field(default_factory=dict)
    pace: float = 1.0  # measured seconds per step over the quiet machine's: how much slower this machine runs
    _current: str | None = None
    _phase_started: float = 0.0

    def announce(self) -> None:
        """Says what the demo will do and how long that takes on a quiet 2-core machine."""
        total = sum(self.phases.values())
        self.say(f"make demo: {len(self.phases)} phases, about {format_duration(total)} on a quiet 2-core CPU:")
        for index, (name, seconds) in enumerate(self.phases.items(), start=1):
            self.say(f"  {index}. {name} (~{format_duration(seconds)})")
        self.say("an estimate for this machine follows the first training steps; each phase ends with its time")

    def begin(self, name: str) -> None:
        """Starts phase ``name``."""
        self._current, self._phase_started = name, time.monotonic()

    def end(self) -> float:
        """Ends the current phase, saying its time and the time so far.

        Returns:
            The phase's seconds.
        """
        seconds = time.monotonic() - self._phase_started
        self.done[self._current] = seconds
        elapsed = time.monotonic() - self.started
        self.say(f"[{self._current}] done in {format_duration(seconds)} ({format_duration(elapsed)} so far)")
        self._current = None
        return seconds

    def remaining_seconds(self, steps_done: int = 0, seconds_per_step: float | None = None) -> float:
        """Seconds the demo still needs: the current training's steps left at the measured pace, every phase not yet
        begun at its quiet time times :attr:`pace`.

        Args:
            steps_done: Steps the current training has done.
            seconds_per_step: The current training's measured pace (``None``: not measured yet).

        Returns:
            The estimate.
        """
        left = 0.0
        for name, quiet in self.phases.items():
            if name in self.done:
                continue
            if name == self._current:
                if name in TRAININGS and seconds_per_step is not None:
                    left += max(0, self.steps - steps_done) * seconds_per_step
                else:
                    left += max(0.0, quiet * self.pace - (time.monotonic() - self._phase_started))
            else:
                left += quiet * self.pace
        return left

    def estimate(self, steps_done: int, seconds_per_step: float) -> float:
        """Sets the pace from the first training's measured steps and says when each phase and the demo will end.

        Args:
            steps_done: Steps done so far.
            seconds_per_step: Their mean seconds.

        Returns:
            The seconds from now to the demo's end.
        """
        self.pace = seconds_per_step / self.quiet_seconds_per_step
        now = time.monotonic()
        left = self.remaining_seconds(steps_done, seconds_per_step)
        busy = "slower" if self.pace > 1 else "faster"
        self.say(
            f"after {steps_done} steps at {seconds_per_step:.1f} s each ({self.pace:.2f}x the quiet machine's pace,"
            f" {busy}): the demo should end in about {format_duration(left)},"
            f" {format_duration(now + left - self.started)} in all"
        )
        at = now
        for name, quiet in self.phases.items():
            if name in self.done:
                continue
            if name == self._current:
                at += max(0, self.steps - steps_done) * seconds_per_step
            else:
                at += quiet * self.pace
            self.say(f"  {name}: ends in ~{format_duration(at - now)}")
        return left


class EtaCallback(TrainerCallback):
    """Prints the demo's estimate once ``after_steps`` optimizer steps of the first training are timed.

    Args:
        schedule: The demo's schedule.
        timer: The step timer of the same training (its mean seconds per step).
        after_steps: Steps to time first: enough to average a slow first step, few enough to answer within the first
            two minutes of training (beside a CPU-bound process on 2026-12-04 a step took 23 s).
    """

    def __init__(self, schedule: DemoSchedule, timer, after_steps: int = 3) -> None:
        self.schedule, self.timer, self.after_steps = schedule, timer, after_steps
        self.estimated: float | None = None

    def on_step_end(self, args, state, control, **kwargs) -> None:
        if self.estimated is None and self.timer.steps >= self.after_steps:
            self.estimated = self.schedule.estimate(state.global_step, self.timer.seconds_per_step)


class TimeBudget(TrainerCallback):
    """Stops training once ``seconds`` have passed (after the step in progress): the opt-in cap of
    ``--max-train-minutes``. A cut-short run never anneals its learning rate, so its scores are below the recipe's.

    Args:
        seconds: The budget.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.start = time.monotonic()

    def on_train_begin(self, args, state, control, **kwargs) -> None:
        self.start = time.monotonic()

    def on_step_end(self, args, state, control, **kwargs) -> None:
        if time.monotonic() - self.start > self.seconds:
            control.should_training_stop = True
            control.should_save = True


class StepTimer(TrainerCallback):
    """Adds up the time spent inside optimizer steps (``on_step_begin`` to ``on_step_end``): the training pace
    without model loading, checkpoints or live evaluation, which run between steps."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.steps = 0
        self._began: float | None = None

    def on_step_begin(self, args, state, control, **kwargs) -> None:
        self._began = time.monotonic()

    def on_step_end(self, args, state, control, **kwargs) -> None:
        if self._began is not None:
            self.seconds += time.monotonic() - self._began
            self.steps += 1
            self._began = None

    @property
    def seconds_per_step(self) -> float | None:
        """Mean seconds per timed step; ``None`` before the first."""
        return self.seconds / self.steps if self.steps else None
