"""Live evaluation while training: every K optimizer steps the model being trained plays held-out sessions.

Teacher-forced next-action accuracy is a diagnostic; live accuracy, the share of tasks the model completes when it
runs as a policy in the runtime, is the measure (docs/design.md §8), and the two diverge. :class:`LiveEvalCallback`
therefore plays the same held-out timelines live every ``live_eval_steps`` steps and once more when training ends,
on the virtual clock (so the figures do not depend on how busy the machine is), and logs through the trainer's own
logging, so the console, ``state.log_history`` (saved with each checkpoint) and every ``report_to`` integration
(wandb, trackio, ...) get the same entries:

- ``live/accuracy``, ``live/answered``: shares of the sessions;
- ``live/latency_p50_s``, ``live/latency_p90_s``: response latency over answered sessions (absent when none was);
- ``live/notices_per_dialogue``, ``live/wasted_calls_per_dialogue``, ``live/side_effect_violations``;
- ``live/failures/<reason>``: sessions that failed for each reason (``no_call``, ``wrong_tool``, ...; 0 included,
  so that every curve has a point at every evaluation);
- ``live/sessions`` and ``live/eval_seconds`` (wall time the evaluation took).

The runtime receives its tool backends: the callback takes a :data:`clocktune.tools.BackendFactory` from its
caller (the CLI and ``recipes/sft.py`` pass ``data_gen.backends.make_backend``), so the train layer never imports
the generator (docs/design.md §9).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from transformers import Trainer, TrainerCallback, TrainerControl

from clocktune.clock import PROFILES, DeviceProfile
from clocktune.runtime.play import PolicyRun, run_policy
from clocktune.runtime.policy_factories import policy_factory
from clocktune.runtime.session import SessionConfig
from clocktune.timeline.events import Timeline
from clocktune.tools import BackendFactory

if TYPE_CHECKING:
    from clocktune.train.config import ClockSFTConfig

__all__ = ["FAILURE_REASONS", "LIVE_PREFIX", "LiveEvalCallback", "live_metrics", "load_live_eval_inputs"]

LIVE_PREFIX = "live/"
# The reasons `clocktune.runtime.scoring` gives a failed session (docs/design.md §5), logged as 0 when none failed
# so: a reason that first appears at step 400 would otherwise have no curve before it. A reason not listed here is
# still logged, from the evaluation where it first appears.
FAILURE_REASONS = (
    "gave_up",
    "timeout",
    "no_call",
    "wrong_tool",
    "wrong_arguments",
    "wrong_state",
    "unanswered",
    "answer_missing_facts",
)


def live_metrics(run: PolicyRun, seconds: float | None = None) -> dict[str, float]:
    """The figures of a live run, under the names the callback logs.

    Args:
        run: The sessions of the policy.
        seconds: Wall time the evaluation took, logged as ``live/eval_seconds`` when given.

    Returns:
        ``{"live/accuracy": ..., ...}`` (the module docstring lists every key).
    """
    metrics: dict[str, float] = {
        f"{LIVE_PREFIX}accuracy": run.share("accurate"),
        f"{LIVE_PREFIX}answered": run.share("answered"),
    }
    for q in (50, 90):
        # No answered session has no latency: an absent point, not a 0 that would read as instant.
        if (latency := run.latency(q)) is not None:
            metrics[f"{LIVE_PREFIX}latency_p{q}_s"] = latency
    metrics[f"{LIVE_PREFIX}notices_per_dialogue"] = run.per_dialogue("notices")
    metrics[f"{LIVE_PREFIX}wasted_calls_per_dialogue"] = run.per_dialogue("wasted_calls")
    metrics[f"{LIVE_PREFIX}side_effect_violations"] = run.violations
    failures = run.failures()
    for reason in dict.fromkeys((*FAILURE_REASONS, *failures)):
        metrics[f"{LIVE_PREFIX}failures/{reason}"] = failures.get(reason, 0)
    metrics[f"{LIVE_PREFIX}sessions"] = len(run.results)
    if seconds is not None:
        metrics[f"{LIVE_PREFIX}eval_seconds"] = round(seconds, 2)
    return metrics


class LiveEvalCallback(TrainerCallback):
    """Plays held-out timelines live with the model being trained, every ``every_steps`` optimizer steps and when
    training ends, and logs :func:`live_metrics` at that step.

    Each evaluation builds a fresh policy factory, so no prefilled system prompt of an earlier step's weights is
    reused; the model plays in eval mode under ``torch.no_grad()`` and goes back to the mode it was in, and the
    torch random state is restored afterwards, so training takes the same steps with or without live evaluation. A
    PEFT model plays as it is (adapters applied in its forward; merging is not needed for inference).

    Under several processes every process plays the same sessions: a sharded model (FSDP, ZeRO-3) needs every rank
    in each forward, and greedy decoding of the same weights takes the same steps on each; the trainer's loggers
    report from the main process only.

    Args:
        trainer: The trainer whose model is evaluated and whose logging carries the figures.
        timelines: Held-out timelines whose user side is replayed (the same ones at every evaluation, so the figures
            of different steps compare).
        backends: Builds each session's tool backend (``data_gen.backends.make_backend`` for generated and
            imported timelines).
        every_steps: Evaluate every this many optimizer steps (``live_eval_steps``).
        device: Compute profile the virtual clock charges.
        name: Name of the policy in the results.
        constrained: Decode under the grammar of valid actions (``constrained_decoding``); ``False``: plain argmax.
        call_bias: The model's bias toward calling while the user speaks (``live_eval_call_bias``).
        batch_size: Sessions per model forward (``runtime_batch_size``; ``None``: the device's default).

    Raises:
        ValueError: When ``every_steps`` is below 1 or there is no timeline.
    """

    def __init__(
        self,
        trainer: Trainer,
        timelines: Sequence[Timeline],
        backends: BackendFactory,
        every_steps: int,
        device: DeviceProfile = PROFILES["phone-135m"],
        name: str = "live",
        constrained: bool = True,
        call_bias: float = 0.0,
        batch_size: int | None = None,
    ) -> None:
        if every_steps < 1:
            raise ValueError(f"every_steps must be at least 1, got {every_steps}")
        if not timelines:
            raise ValueError("live evaluation needs at least one held-out timeline")
        self.trainer = trainer
        self.batch_size = batch_size
        self.timelines = list(timelines)
        self.backends = backends
        self.every_steps = every_steps
        self.device = device
        self.name = name
        self.constrained = constrained
        self.call_bias = call_bias
        self.last_step = -1  # the step last evaluated: the end of training may fall on an evaluation step

    def evaluate(self, model: Any = None) -> dict[str, float]:
        """Plays every held-out timeline with ``model`` and returns :func:`live_metrics`.

        Args:
            model: The model to play (plain or PEFT); the trainer's when ``None``.

        Returns:
            The figures, not yet logged.
        """
        model = self.trainer.model if model is None else model
        was_training = model.training
        devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
        started = time.monotonic()
        model.eval()
        try:
            # fork_rng: greedy decoding draws nothing, but what the model's modules or the runtime draw must not
            # shift the dropout and sampling of the training steps that follow.
            with torch.random.fork_rng(devices=devices), torch.no_grad():
                loaded = (model, self.trainer.processing_class)
                factory = policy_factory(
                    self.name,
                    loaded=loaded,
                    constrained=self.constrained,
                    call_bias=self.call_bias,
                    batch_size=self.batch_size,
                )
                run = run_policy(self.name, self.timelines, factory, self.backends, SessionConfig(device=self.device))
        finally:
            model.train(was_training)
        return live_metrics(run, time.monotonic() - started)

    def _evaluate_and_log(self, step: int, control: TrainerControl) -> None:
        if step == self.last_step or step == 0:
            return
        self.last_step = step
        metrics = self.evaluate()
        # The step's own log (loss, learning rate) comes after this callback, when `should_log` is set; the
        # callback handler's on_log clears that flag, which would drop it.
        should_log = control.should_log
        # transformers' Trainer.log, not the trainer's own: TRL's override merges the token metrics accumulated
        # since the last logging step into whatever is logged and clears them, which would move them into this
        # entry and out of the training log they belong to. Trainer.log still appends to state.log_history and
        # calls every callback's on_log (console, wandb, trackio).
        Trainer.log(self.trainer, metrics)
        control.should_log = should_log

    def on_step_end(self, args, state, control, **kwargs) -> None:
        """Evaluates every ``every_steps`` steps, and at the step where training has been told to stop."""
        if state.global_step % self.every_steps == 0 or control.should_training_stop:
            self._evaluate_and_log(state.global_step, control)

    def on_epoch_end(self, args, state, control, **kwargs) -> None:
        """Evaluates the final weights when training ends here and :meth:`on_step_end` had not seen it coming (a
        callback after this one stopped training, or the last epoch ran out)."""
        if control.should_training_stop or state.global_step >= state.max_steps:
            self._evaluate_and_log(state.global_step, control)


def load_live_eval_inputs(args: ClockSFTConfig) -> tuple[list[Timeline], DeviceProfile]:
    """What a config's live evaluation plays: the first ``live_eval_sessions`` timelines of ``live_eval_data``, and
    the ``live_eval_profile`` device. Called before the model loads, so that a bad path fails in seconds.

    Args:
        args: The config, with ``live_eval_steps > 0``.

    Returns:
        ``(timelines, device)`` for :class:`LiveEvalCallback`.

    Raises:
        FileNotFoundError: When a ``live_eval_data`` path does not exist.
        ValueError: When the data hold no timeline, or the profile is neither a built-in one nor a profile file.
    """
    from clocktune.rendered_dataset import load_timeline_files
    from clocktune.runtime.device_profiles import load_device_profile

    timelines = load_timeline_files(args.live_eval_data or [])[: args.live_eval_sessions]
    return timelines, load_device_profile(args.live_eval_profile)
