"""How long `make demo` takes: what it says at the start, when each phase ends, and when the whole will end.

A newcomer who runs the demo should know before it starts that it takes some forty minutes on a 2-core CPU, and, a
few training steps in, when it will be done on *their* machine. The demo's phases and their times on a quiet 2-core
machine are below; once the first training steps are timed, the trainings are counted at the measured pace, the
phases that only run the model forward (scoring, live play) at the pace the untrained model's scoring ran, and the
rest scaled by how much slower (or faster) the training steps ran than the quiet machine's. A busy machine slows
training steps and forwards apart: beside a CPU-bound process on 2026-12-05 the steps ran 3.37x the quiet pace, the
scoring 2.98x and the live play (then one session at a time) 1.6-1.9x.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from transformers import TrainerCallback

__all__ = [
    "FORWARD_PHASES",
    "QUIET_PHASES",
    "SYNC_PHASES",
    "DemoSchedule",
    "EtaCallback",
    "StepTimer",
    "TimeBudget",
    "format_duration",
]

# The demo's phases, in order, and their seconds on a quiet 2-core machine (BENCHMARKS.md, `make demo` of
# 2026-12-03: trainings 857-882 s and 974-1,008 s). The data are 2026-12-04's run beside a CPU-bound process divided
# by its pace (3.37x the quiet step): 3 s. The live phases play through the model engine (50 sessions a forward since
# 2026-12-05): measured quiet on 2026-12-05 beside the scoring, side by side, they took 0.68x its time (94.6 s against
# 139.3 s on the demo's checkpoint and 50 held-out dialogues), so 0.68 x 90 s here, and the sync-teacher model's 230/220
# of that as on 2026-12-03; since 2026-12-07 both divided by 1.21, what feeding the grammar's forced tokens early
# saved at batch 50 on the same checkpoint and dialogues (69.6 s against 57.6 s, BENCHMARKS.md "Jump-forward").
# The trainings are counted in steps (their quiet pace below) plus loading and saving.
QUIET_PHASES: dict[str, float] = {
    "generate the dialogues": 5.0,
    "score the untrained model": 90.0,
    "train the model": 880.0,
    "score the trained model": 90.0,
    "play it live": 50.0,
    "generate the turn-based teacher's dialogues": 5.0,
    "train the sync-teacher model": 1000.0,
    "play the sync-teacher model live": 53.0,
}
TRAININGS = ("train the model", "train the sync-teacher model")
# The phases of the sync-teacher model (``--no-sync-model`` skips them).
SYNC_PHASES = (
    "generate the turn-based teacher's dialogues",
    "train the sync-teacher model",
    "play the sync-teacher model live",
)
# The phase whose measured time sets the pace of the phases that only run the model forward.
SCORING = "score the untrained model"
FORWARD_PHASES = (SCORING, "score the trained model", "play it live", "play the sync-teacher model live")


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

    @property
    def forward_pace(self) -> float:
        """The untrained model's scoring time over its quiet time, once measured (else :attr:`pace`): the pace of the
        phases that only run the model forward."""
        if SCORING in self.done and self.phases.get(SCORING):
            return self.done[SCORING] / self.phases[SCORING]
        return self.pace

    def expected_seconds(self, name: str) -> float:
        """Phase ``name``'s seconds on this machine: a training counted as the first training at :attr:`pace` (the
        sync-teacher model's steps took 1.15x the first's on 2026-12-03 and 0.94x on 2026-12-05: no steady
        difference), a forward-only phase at :attr:`forward_pace`, any other at :attr:`pace`."""
        quiet = self.phases[name]
        if name in TRAININGS:
            return self.phases.get(TRAININGS[0], quiet) * self.pace
        if name in FORWARD_PHASES:
            return quiet * self.forward_pace
        return quiet * self.pace

    def remaining_seconds(self, steps_done: int = 0, seconds_per_step: float | None = None) -> float:
        """Seconds the demo still needs: the current training's steps left at the measured pace, every phase not yet
        begun at :meth:`expected_seconds`.

        Args:
            steps_done: Steps the current training has done.
            seconds_per_step: The current training's measured pace (``None``: not measured yet).

        Returns:
            The estimate.
        """
        return sum(self._left(steps_done, seconds_per_step).values())

    def _left(self, steps_done: int, seconds_per_step: float | None) -> dict[str, float]:
        # Seconds left of each phase not done, in order.
        left = {}
        for name in self.phases:
            if name in self.done:
                continue
            if name == self._current:
                if name in TRAININGS and seconds_per_step is not None:
                    left[name] = max(0, self.steps - steps_done) * seconds_per_step
                else:
                    left[name] = max(0.0, self.expected_seconds(name) - (time.monotonic() - self._phase_started))
            else:
                left[name] = self.expected_seconds(name)
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
        phases_left = self._left(steps_done, seconds_per_step)
        left = sum(phases_left.values())
        busy = "slower" if self.pace > 1 else "faster"
        self.say(
            f"after {steps_done} steps at {seconds_per_step:.1f} s each ({self.pace:.2f}x the quiet machine's pace,"
            f" {busy}; forwards {self.forward_pace:.2f}x): the demo should end in about {format_duration(left)},"
            f" {format_duration(now + left - self.started)} in all"
        )
        at = now
        for name, seconds in phases_left.items():
            at += seconds
            self.say(f"  {name}: ends in ~{format_duration(at - now)}")
        return left


class EtaCallback(TrainerCallback):
    """Prints the demo's estimate once ``after_steps`` optimizer steps of the first training are timed.

    Args:
        schedule: The demo's schedule.
        timer: The step timer of the same training (its mean seconds per step, warm-up step left out).
        after_steps: Timed steps to wait for: enough to average out one slow step, few enough to answer within the
            first two minutes of training (beside a CPU-bound process a step takes 21-25 s, the warm-up step 39 s).
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
    without model loading, checkpoints or live evaluation, which run between steps.

    The first ``warmup`` steps are not counted: the first step of a run allocates and warms up (39 s against 21-22 s
    for the next ones beside a CPU-bound process on 2026-12-05), and counted into the pace of the first three steps it
    made the demo's estimate of its end some 15 minutes late.

    Args:
        warmup: Steps not counted.
    """

    def __init__(self, warmup: int = 1) -> None:
        self.seconds = 0.0
        self.steps = 0
        self.warmup = warmup
        self._seen = 0
        self._warmup_seconds = 0.0
        self._began: float | None = None

    def on_step_begin(self, args, state, control, **kwargs) -> None:
        self._began = time.monotonic()

    def on_step_end(self, args, state, control, **kwargs) -> None:
        if self._began is not None:
            self._seen += 1
            if self._seen > self.warmup:
                self.seconds += time.monotonic() - self._began
                self.steps += 1
            else:
                self._warmup_seconds += time.monotonic() - self._began
            self._began = None

    @property
    def seconds_per_step(self) -> float | None:
        """Mean seconds per timed step (the warm-up's when no other step ran); ``None`` before the first."""
        if self.steps:
            return self.seconds / self.steps
        return self._warmup_seconds / self._seen if self._seen else None
