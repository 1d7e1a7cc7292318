"""On-policy rounds inside training (DAgger): the model as trained so far plays training tasks, an expert labels what
it did, and training continues on a mixture of those examples and the teacher's data.

With ``on_policy_rounds`` = R above 0, :func:`clocktune.train.sft.main` trains as usual, then runs R rounds
(:func:`train_rounds`). Round r:

1. plays ``on_policy_sessions`` training tasks with the model in memory on the virtual clock (with
   ``on_policy_takeover``, the expert plays each on from the model's first divergence) and labels them
   (:func:`clocktune.train.rollout.rollout`: a progress bar, sessions journaled in ``output_dir/round-{r}/rollout``,
   so a killed rollout resumes where it stopped and writes the same data). Round r plays the slice of the tasks
   after round r-1's, wrapping around, so that the rounds label different dialogues;
2. trains the same model with a fresh ``ClockSFTTrainer`` (a fresh learning-rate schedule; the optimizer state the
   phase before ended with, unless ``on_policy_optimizer`` is ``restart``; the sampler seeded with ``data_seed``
   (else ``seed``) + r, so that its teacher timelines are not the first training's first ones again) for
   ``on_policy_steps`` steps on a mixture: each example comes from the rollout examples of rounds 1..r with
   probability ``on_policy_weight``, else from the teacher's timelines (``datasets.interleave_datasets``, seeded by
   ``seed``, until both are used up, so every example of both appears at least once). Its checkpoints go to
   ``output_dir/round-{r}``, then its final model and a training record: the folder is a checkpoint that
   ``clocktune eval --model`` plays.

The rollout figures (``on_policy/live_accuracy``, ``on_policy/examples``, ...) are logged through the round's
trainer when its training begins, so the console, ``state.log_history`` and every ``report_to`` integration get
them. Each round's trainer counts its own steps from 0; ``on_policy/round`` tells the rounds apart.

A run started again with the same command resumes: the last round whose final model is saved (its folder holds the
training record) is loaded, and it and the rounds and training before it are skipped; the round after it resumes
its rollout from the journal and its training from its last checkpoint. The rollout's settings stamp holds the
round, the global step and a digest of the weights that play, so a rollout is never continued by other weights
(a phase before it trained again without a checkpoint to resume from): that is refused, naming the folder to delete.

The train layer does not know the generator (docs/design.md §9): the experts and the tool backends come from the
caller, as live evaluation's backends do (``clocktune train`` and ``recipes/sft.py`` pass ``data_gen``'s).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from transformers import Trainer, TrainerCallback, TrainerState

from clocktune.clock import DeviceProfile
from clocktune.runtime.policy import PolicyFactory
from clocktune.settings_stamp import SettingsMismatchError
from clocktune.timeline.events import Timeline
from clocktune.tools import BackendFactory
from clocktune.train.policy_save import save_whole
from clocktune.train.record import TRAINING_RECORD, read_training_record, write_training_record

if TYPE_CHECKING:
    from datasets import Dataset

    from clocktune.train.config import ClockSFTConfig
    from clocktune.train.rollout import RolloutSummary
    from clocktune.train.trainer import ClockSFTTrainer

__all__ = [
    "ON_POLICY_PREFIX",
    "ExpertsBuilder",
    "OnPolicyInputs",
    "RoundsResult",
    "last_finished_round",
    "mixture",
    "prepare_on_policy",
    "round_dir",
    "round_tasks",
    "train_from",
    "train_rounds",
    "weights_digest",
]

ON_POLICY_PREFIX = "on_policy/"
STUDENT = "student"  # the name the rollout sessions carry (and their journal file's)

# ``experts(strategy, data_folder)``: the factory of experts for the generated timelines of ``data_folder``, from the
# generator config it was generated with (``data_gen.expert.expert_factory`` with ``generator_config_of``).
ExpertsBuilder = Callable[[str, str], PolicyFactory]


def round_dir(output_dir: str | Path, round_number: int) -> Path:
    """The folder of one round: its rollout, its checkpoints and its final model.

    Args:
        output_dir: The run's ``output_dir``.
        round_number: The round, from 1.

    Returns:
        ``output_dir/round-{round_number}``.
    """
    return Path(output_dir) / f"round-{round_number}"


@dataclass
class OnPolicyInputs:
    """What the rounds play, gathered and checked before the model loads.

    Args:
        data: The folder whose tasks are played (the first ``train_data`` entry).
        tasks: Its training timelines (the first ``max_timelines``), the pool the rounds take their slices from.
        experts: Builds the expert of one of those timelines.
        backends: Builds the tool backend of one session.
        device: Compute profile the rollouts' virtual clock charges.
    """

    data: str
    tasks: list[Timeline]
    experts: PolicyFactory
    backends: BackendFactory
    device: DeviceProfile


def prepare_on_policy(
    train_data: Sequence[str],
    args: ClockSFTConfig,
    experts: ExpertsBuilder | None,
    backends: BackendFactory | None,
) -> OnPolicyInputs:
    """Loads and checks what the on-policy rounds need, so that a bad setting fails before the first training.

    Args:
        train_data: The recipe's ``train_data``; the tasks come from the first entry, which must be generated data.
        args: The config, with ``on_policy_rounds`` above 0.
        experts: ``experts(strategy, data_folder)`` (see :data:`ExpertsBuilder`).
        backends: Builds each rollout session's tool backend.

    Returns:
        The inputs of :func:`train_rounds`.

    Raises:
        ValueError: Without ``experts`` or ``backends``, under several processes, or when the expert cannot rebuild
            the data's tasks.
        FileNotFoundError: From ``experts`` when the folder is not generated data (no ``generation.json``).
    """
    from clocktune.rendered_dataset import load_timeline_files
    from clocktune.runtime.device_profiles import load_device_profile

    if experts is None or backends is None:
        raise ValueError(
            f"on_policy_rounds is {args.on_policy_rounds} but no experts or no tool backends were given: call "
            "main(..., experts=..., backends=...) (clocktune train and recipes/sft.py pass data_gen's "
            "expert_factory and make_backend), or set on_policy_rounds to 0"
        )
    if args.world_size > 1:
        # Every rank would have to play the same sessions in step (a sharded forward needs them all) and only one
        # may journal them; a resume where one rank had journaled a session more than another would hang.
        raise ValueError(
            f"on-policy rounds run in one process, not {args.world_size}: launch with one process "
            "(clocktune train, or accelerate launch --num_processes 1), or set on_policy_rounds to 0"
        )
    data = str(train_data[0])
    factory = experts(args.on_policy_expert, data)
    tasks = load_timeline_files([data])[: args.max_timelines]
    # The expert rebuilds a task from its timeline's seed under the data's generator config: a folder of other
    # data fails here, in seconds, not after the first training.
    factory(tasks[0])
    return OnPolicyInputs(data, tasks, factory, backends, load_device_profile(args.on_policy_profile))


def last_finished_round(args: ClockSFTConfig) -> int:
    """The last round whose final model is saved (its folder holds the training record, written last).

    Args:
        args: The config.

    Returns:
        The round, or 0 when none is finished.
    """
    for round_number in range(args.on_policy_rounds, 0, -1):
        if (round_dir(args.output_dir, round_number) / TRAINING_RECORD).is_file():
            return round_number
    return 0


def round_tasks(tasks: Sequence[Timeline], round_number: int, sessions: int) -> list[Timeline]:
    """The tasks one round plays: ``sessions`` of them (at most all), after the slices of the rounds before.

    Args:
        tasks: The pool (the training timelines).
        round_number: The round, from 1.
        sessions: ``on_policy_sessions``.

    Returns:
        The round's timelines, in pool order from where the previous round stopped, wrapping around the end.
    """
    count = min(sessions, len(tasks))
    start = (round_number - 1) * count % len(tasks)
    return [tasks[(start + offset) % len(tasks)] for offset in range(count)]


def weights_digest(model: torch.nn.Module) -> str:
    """A short hash of the weights that training changes (every weight when none is trainable).

    Args:
        model: The model (plain or PEFT).

    Returns:
        16 hex digits; equal for equal weights, whatever the device.
    """
    named = [(name, p) for name, p in model.named_parameters() if p.requires_grad] or list(model.named_parameters())
    digest = hashlib.sha256()
    for name, parameter in named:
        digest.update(name.encode())
        digest.update(parameter.detach().contiguous().view(-1).view(torch.uint8).cpu().numpy().tobytes())
    return digest.hexdigest()[:16]


def mixture(teacher: Dataset, rollouts: Dataset | None, weight: float, seed: int) -> Dataset:
    """The round's training examples: each from ``rollouts`` with probability ``weight``, else from ``teacher``.

    Args:
        teacher: The rendered teacher timelines.
        rollouts: The rendered rollout examples of the rounds so far (``None`` or empty: the teacher's alone).
        weight: ``on_policy_weight``.
        seed: The draw's seed.

    Returns:
        The mixture, drawn until every example of both has appeared (those of the smaller share repeat).
    """
    from datasets import interleave_datasets

    if rollouts is None or len(rollouts) == 0 or weight == 0:
        return teacher
    if weight == 1:
        return rollouts
    # all_exhausted: the datasets are read in order, so stopping at the first exhausted one would never reach the
    # later rounds' examples (or the teacher's last timelines).
    return interleave_datasets(
        [teacher, rollouts], probabilities=[1 - weight, weight], seed=seed, stopping_strategy="all_exhausted"
    )


def rollout_metrics(round_number: int, summary: RolloutSummary, mixed: int) -> dict[str, float]:
    """The figures of a round's rollout, under the names the round's trainer logs.

    Args:
        round_number: The round.
        summary: Its rollout's summary.
        mixed: Examples in the round's training mixture.

    Returns:
        ``{"on_policy/round": ..., "on_policy/live_accuracy": ..., ...}``.
    """
    agreement = summary.agreed / summary.decisions if summary.decisions else 0.0
    return {
        f"{ON_POLICY_PREFIX}round": round_number,
        f"{ON_POLICY_PREFIX}sessions": summary.sessions,
        f"{ON_POLICY_PREFIX}live_accuracy": summary.live_accuracy,
        f"{ON_POLICY_PREFIX}decisions": summary.decisions,
        f"{ON_POLICY_PREFIX}agreed": summary.agreed,
        f"{ON_POLICY_PREFIX}agreement": agreement,
        f"{ON_POLICY_PREFIX}examples": summary.examples,
        f"{ON_POLICY_PREFIX}taken_over": summary.taken_over,
        f"{ON_POLICY_PREFIX}mixture_examples": mixed,
    }


class _LogRollout(TrainerCallback):
    """Logs a round's rollout figures through its trainer when the round's training begins."""

    def __init__(self, trainer: Trainer, metrics: dict[str, float]) -> None:
        self.trainer = trainer
        self.metrics = metrics

    def on_train_begin(self, args, state, control, **kwargs) -> None:
        """Logs the figures, unless the log history restored from a checkpoint already holds them."""
        if any(f"{ON_POLICY_PREFIX}round" in entry for entry in state.log_history):
            return
        # transformers' Trainer.log, not TRL's override, which would fold the token metrics into this entry.
        Trainer.log(self.trainer, dict(self.metrics))


@dataclass
class RoundsResult:
    """What the rounds left.

    Args:
        trainer: The trainer of the last round trained in this process (the first training's when every round
            was finished already); its model is the final one.
        rounds: One record per round (its rollout's summary, its steps and data), for the training record.
        global_step: Optimizer steps over the first training and every round.
    """

    trainer: ClockSFTTrainer
    rounds: list[dict[str, Any]] = field(default_factory=list)
    global_step: int = 0


def _bare_optimizer(trainer: Trainer) -> torch.optim.Optimizer | None:
    # A trainer that trained holds accelerate's wrapper; the next trainer prepares the bare optimizer again.
    return getattr(trainer.optimizer, "optimizer", trainer.optimizer)


def _release(trainer: Trainer, keep_optimizer: bool) -> torch.optim.Optimizer | None:
    """Frees what the phase that ends holds before the rollout needs the memory for its KV caches; returns its bare
    optimizer when it is kept."""
    optimizer = _bare_optimizer(trainer) if keep_optimizer else None
    # With a fresh optimizer next, this one's moments (for a full fine-tune, twice the weights) go now.
    trainer.accelerator.free_memory()
    trainer.optimizer = None
    trainer.lr_scheduler = None
    return optimizer


def _load_optimizer_state(trainer: Trainer, folder: str | Path) -> None:
    # Creates the trainer's optimizer with the state saved in `folder` (the Trainer's optimizer.pt). A checkpoint
    # saved with `save_only_model` holds none: the trainer then keeps none, and the round says it starts fresh.
    from transformers.trainer import OPTIMIZER_NAME

    path = Path(folder) / OPTIMIZER_NAME
    if path.is_file():
        trainer.create_optimizer()
        trainer.optimizer.load_state_dict(torch.load(path, map_location=trainer.args.device, weights_only=True))


def _save_optimizer_state(optimizer: torch.optim.Optimizer, folder: Path) -> None:
    from transformers.trainer import OPTIMIZER_NAME

    from clocktune.atomic import atomic_write

    atomic_write(folder / OPTIMIZER_NAME, lambda path: torch.save(optimizer.state_dict(), path))


def train_from(trainer: Trainer, checkpoint: str | None, with_optimizer: bool = False) -> None:
    """Trains, resuming from ``checkpoint``; a checkpoint that already holds every step is loaded, not trained.

    The Trainer checks ``max_steps`` only after a step, so resuming from a checkpoint at ``max_steps`` (the one it
    saves when training ends) would train one step more: a run started again after it finished, or an on-policy
    round resumed after its last step, would not be the model that ran through.

    Args:
        trainer: The trainer (its ``args.max_steps`` is the run's length).
        checkpoint: A ``checkpoint-N`` folder, or ``None`` to train from the start.
        with_optimizer: Also load the optimizer state of a checkpoint that is loaded, not trained, so that on-policy
            rounds can carry it on (``on_policy_optimizer: continue``).
    """
    from transformers.trainer import TRAINER_STATE_NAME

    if checkpoint is not None and trainer.args.max_steps > 0:
        state = TrainerState.load_from_json(os.path.join(checkpoint, TRAINER_STATE_NAME))
        if state.global_step >= trainer.args.max_steps:
            trainer._load_from_checkpoint(checkpoint)
            trainer.state = state
            if with_optimizer:
                _load_optimizer_state(trainer, checkpoint)
            return
    trainer.train(resume_from_checkpoint=checkpoint)


def _play_round(
    model: Any, tokenizer: Any, inputs: OnPolicyInputs, args: ClockSFTConfig, round_number: int, step: int, source: str
) -> RolloutSummary:
    from clocktune.runtime.policy_factories import policy_spec
    from clocktune.runtime.session import SessionConfig
    from clocktune.train.rollout import rollout

    folder = round_dir(args.output_dir, round_number) / "rollout"
    tasks = round_tasks(inputs.tasks, round_number, args.on_policy_sessions)
    settings = {
        "round": round_number,
        "global_step": step,
        "weights": weights_digest(model),
        "data": inputs.data,
        "sessions": len(tasks),
        "first_task": tasks[0].id,
        "expert": args.on_policy_expert,
        "profile": args.on_policy_profile,
        "constrained": args.constrained_decoding,
    }
    was_training = model.training
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    model.eval()
    try:
        # As in live evaluation: what the runtime draws must not shift the random state of the training after it.
        with torch.random.fork_rng(devices=devices), torch.no_grad():
            student = policy_spec(
                STUDENT,
                source,
                loaded=(model, tokenizer),
                constrained=args.constrained_decoding,
                batch_size=args.runtime_batch_size,
            )
            session_config = SessionConfig(device=inputs.device)
            return rollout(
                tasks,
                student,
                inputs.experts,
                inputs.backends,
                session_config,
                folder,
                settings,
                takeover=args.on_policy_takeover,
            )
    except SettingsMismatchError as error:
        raise SettingsMismatchError(
            f"{error}. Round {round_number}'s rollout was started by other weights or settings than the model now "
            f"playing it (a phase before it trained again, without a checkpoint to resume from?): delete {folder} "
            "to play the round again; with save_strategy 'steps', a resumed run reloads the same weights"
        ) from None
    finally:
        model.train(was_training)


def _rollout_dataset(args: ClockSFTConfig, round_number: int, tokenizer: Any, model_format: str) -> Dataset | None:
    from clocktune.rendered_dataset import load_timeline_files, render_timelines

    files = [round_dir(args.output_dir, r) / "rollout" / "data" / "rollouts.jsonl" for r in range(1, round_number + 1)]
    files = [path for path in files if path.is_file() and path.stat().st_size > 0]
    if not files:
        return None
    return render_timelines(load_timeline_files(files), tokenizer, model_format, args.agent_clock_loss)


def train_rounds(
    first: ClockSFTTrainer,
    inputs: OnPolicyInputs,
    teacher: Dataset,
    model_format: str,
    record: dict[str, Any],
    eval_dataset: Dataset | None = None,
    callbacks: list | None = None,
    live_eval: tuple[list[Timeline], DeviceProfile] | None = None,
) -> RoundsResult:
    """Runs the on-policy rounds after the first training (see the module docstring).

    Args:
        first: The trainer of the first training, trained (or, when a round is finished already, not: its model
            then takes that round's weights).
        inputs: What the rounds play (:func:`prepare_on_policy`).
        teacher: The rendered teacher timelines the first training used.
        model_format: The model's tool-calling convention, for rendering the rollout examples.
        record: The facts of the training record (``base_model``, ``train_data``, ``model_format``, ...) written
            with each round's final model, besides ``max_steps`` and ``on_policy_rounds``.
        eval_dataset: Evaluated as in the first training.
        callbacks: Extra ``TrainerCallback`` objects of every round's trainer.
        live_eval: ``(timelines, device)`` of live evaluation, which every round's trainer then runs too.

    Returns:
        The last trainer, the rounds' records and the global step count.
    """
    from transformers.trainer_utils import get_last_checkpoint

    from clocktune.train.live_eval import LiveEvalCallback
    from clocktune.train.trainer import ClockSFTTrainer

    args: ClockSFTConfig = first.args
    model, tokenizer = first.model, first.processing_class
    trainer, source = first, args.output_dir
    carry = args.on_policy_optimizer == "continue"
    result = RoundsResult(first, [], first.state.global_step)
    finished = last_finished_round(args)
    if finished:
        folder = round_dir(args.output_dir, finished)
        first.accelerator.print(f"On-policy rounds 1..{finished} are finished: loading the model of {folder}")
        # The Trainer's own loader, as a resume reads a checkpoint: full weights, or a PEFT adapter with its rows.
        first._load_from_checkpoint(str(folder))
        if carry:
            _load_optimizer_state(first, folder)
        saved = read_training_record(folder)
        result.rounds = list(saved.get("on_policy_rounds", []))
        result.global_step = int(saved.get("max_steps", 0))
        source = str(folder)
    steps = args.max_steps if args.on_policy_steps is None else args.on_policy_steps
    for round_number in range(finished + 1, args.on_policy_rounds + 1):
        folder = round_dir(args.output_dir, round_number)
        optimizer = _release(trainer, keep_optimizer=carry)
        if carry and optimizer is None:
            trainer.accelerator.print(
                f"round {round_number}: the phase before it left no optimizer state (a checkpoint saved without "
                "one?): the round starts a fresh optimizer"
            )
        summary = _play_round(model, tokenizer, inputs, args, round_number, result.global_step, source)
        trainer.accelerator.print(
            f"round {round_number}: {summary.sessions} sessions, the model completed {summary.completed} live "
            f"({summary.live_accuracy:.2f}), took the expert's action at {summary.agreed} of {summary.decisions} "
            f"decision points; {summary.examples} examples"
            + (f"; the expert took over {summary.taken_over} sessions" if args.on_policy_takeover else "")
        )
        rollouts = _rollout_dataset(args, round_number, tokenizer, model_format)
        dataset = mixture(teacher, rollouts, args.on_policy_weight, args.seed)
        # Another sampler seed each round: with the first training's, a round would draw its teacher timelines in
        # the same order, so re-train on those the first steps saw instead of reaching new ones (measured: a
        # round of the teacher's data alone re-read the 100 timelines of steps 1-25, BENCHMARKS.md).
        data_seed = (args.seed if args.data_seed is None else args.data_seed) + round_number
        round_args = dataclasses.replace(
            args,
            output_dir=str(folder),
            max_steps=steps,
            resume_from_checkpoint=None,
            push_to_hub=False,
            data_seed=data_seed,
        )
        trainer = ClockSFTTrainer(
            model=model,
            args=round_args,
            train_dataset=dataset,
            eval_dataset=eval_dataset,
            processing_class=tokenizer,
            callbacks=list(callbacks or []),
            # A new schedule (its warmup too) over the moments the phase before built up; a checkpoint of this
            # round that training resumes from loads its own state into the same optimizer.
            optimizers=(optimizer, None),
        )
        if live_eval is not None:
            timelines, device = live_eval
            callback = LiveEvalCallback(
                trainer,
                timelines,
                inputs.backends,
                args.live_eval_steps,
                device,
                constrained=args.constrained_decoding,
            )
            trainer.add_callback(callback)
        trainer.add_callback(_LogRollout(trainer, rollout_metrics(round_number, summary, len(dataset))))
        checkpoint = get_last_checkpoint(str(folder))  # the folder exists: the rollout wrote into it
        if checkpoint is not None:
            trainer.accelerator.print(f"Resuming round {round_number} from {checkpoint}")
        train_from(trainer, checkpoint)
        result.global_step += trainer.state.global_step
        result.rounds.append(
            {
                "round": round_number,
                "steps": trainer.state.global_step,
                "global_step": result.global_step,
                "data": str(folder / "rollout" / "data"),
                **dataclasses.asdict(summary),
                "live_accuracy": summary.live_accuracy,
            }
        )
        save_whole(trainer, str(folder))  # the next round loads it
        if carry and trainer.accelerator.is_main_process:
            _save_optimizer_state(_bare_optimizer(trainer), folder)
        if trainer.accelerator.is_main_process:
            # Written last: its presence marks the round finished for a run started again.
            write_training_record(folder, **record, max_steps=result.global_step, on_policy_rounds=list(result.rounds))
        result.trainer, source = trainer, str(folder)
    return result
