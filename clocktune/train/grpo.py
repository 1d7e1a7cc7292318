"""Reinforcement learning with the runtime as the environment: GRPO on TRL's ``GRPOTrainer`` through ``rollout_func``.

Usage:

    accelerate launch --config_file configs/accelerate/cpu.yaml recipes/grpo.py \
        --config configs/smollm2-135m/grpo_cpu.yaml

A prompt is a task: a training timeline, named by its id (the dataset's ``prompt`` column). TRL hands the rollout
function each prompt ``num_generations`` times; :class:`RuntimeRollouts` plays every copy in the runtime at once, on
the virtual clock, with the model being trained sampling its actions (a :class:`~clocktune.runtime.model_policy.
ModelPolicy` per session, all of one step's sessions sharing one :class:`~clocktune.runtime.engine.Engine`, so their
forwards are batched, and speculative decoding, when a drafter is named, is toggled by the engine's active batch as
EfficientRollout's is). The copies of a task hear the same speech and meet the same tool latencies (the timeline's);
they differ by their sampling noise, keyed by the step and the copy.

What the trainer learns from is exactly what each session fed the model: the prompt is the rendered system prompt,
the completion the rest of ``render(session log)``, the renderer's own ids (never the decoded text tokenized
again), and only the model's own action tokens carry loss (``env_mask``). Each session saw its context through the
streaming mask (a revised partial or a superseded result hidden from its time on); TRL's log-prob pass would see every
token (a 2D padding mask and default positions), so :class:`ClockGRPOTrainer` computes log-probs row by row under the
session's own streaming mask and positions (:class:`StreamingRows` keeps each rollout's token times and visibility).

With ``expert_generations`` set, the last of each task's rollouts are played by the generator's expert instead
(mixed-policy GRPO, as LUFFY: Yan et al. 2025, "Learning to Reason under Off-Policy Guidance"): the group then holds
a session that completes the task, and where the policy's own samples fail, its advantage pulls the policy toward
the expert's actions in the same runtime, on the same task (``ClockGRPOConfig.expert_generations`` says how it is
weighed). The expert comes from the caller (``experts``), as the on-policy rounds' does: this layer does not import
the generator.

The reward of a rollout is task success minus λ times the latency from the end of speech to the first words, minus
penalties for side-effect violations and notices, each a reward function of its own so that every component is logged
per step (:class:`~clocktune.train.grpo_config.ClockGRPOConfig`).
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from transformers import DynamicCache
from trl import GRPOTrainer

from clocktune.render import render
from clocktune.runtime.engine import Engine, Forward
from clocktune.runtime.incremental import streaming_mask
from clocktune.runtime.scoring import task_progress as task_progress_of
from clocktune.train.grpo_config import ClockGRPOConfig
from clocktune.train.trainer import cache_over

if TYPE_CHECKING:
    from clocktune.render import Rendering
    from clocktune.runtime.policy import PolicyFactory
    from clocktune.timeline.events import Timeline
    from clocktune.tools import BackendFactory
    from clocktune.train.on_policy import ExpertsBuilder

__all__ = [
    "REWARDS",
    "ClockGRPOTrainer",
    "build_trainer",
    "main",
    "RuntimeRollouts",
    "StreamingRows",
    "first_words_latency",
    "make_parser",
    "session_logprobs",
    "side_effect_violations",
    "session_notices",
    "task_progress",
    "task_success",
]


# The reward's components: each returns the raw figure of every rollout; ``reward_weights`` carry the signs and λ.
def task_success(prompts: list, completions: list, success: list[float], **kwargs: Any) -> list[float]:
    """1.0 where the rollout completed its task (ground-truth calls executed, final state, facts said), else 0.0."""
    return [float(value) for value in success]


def first_words_latency(prompts: list, completions: list, latency_s: list[float], **kwargs: Any) -> list[float]:
    """Seconds from the end of the user's speech to the agent's first words (the cap where it never answered)."""
    return [float(value) for value in latency_s]


def side_effect_violations(prompts: list, completions: list, violations: list[int], **kwargs: Any) -> list[float]:
    """Side-effect violations of the rollout (a call with side effects made on a guess that turned out wrong)."""
    return [float(value) for value in violations]


def session_notices(prompts: list, completions: list, notices: list[int], **kwargs: Any) -> list[float]:
    """Notices of the rollout (actions the runtime refused)."""
    return [float(value) for value in notices]


def task_progress(prompts: list, completions: list, progress: list[float], **kwargs: Any) -> list[float]:
    """How much of its task the rollout got right, 0 to 1 (``clocktune.runtime.scoring.task_progress``)."""
    return [float(value) for value in progress]


REWARDS = [task_success, first_words_latency, side_effect_violations, session_notices, task_progress]


class StreamingRows:
    """Each rollout's token times, visibility and loss positions, by its ids: what the trainer's log-prob pass needs
    to see each token as its session saw it. Filled by every rollout call (the rows of one generation batch; the
    trainer reuses them for its ``num_iterations``) and emptied at the next."""

    def __init__(self) -> None:
        self._rows: dict[tuple[int, ...], tuple[list[float], list[float], list[bool]]] = {}

    def clear(self) -> None:
        """Forgets the rows of the last generation batch."""
        self._rows.clear()

    def add(self, rendering: Rendering) -> None:
        """Keeps a rendered session's times, visibility and action tokens (those that carry loss) under its ids."""
        # Two rollouts rendered to the same ids played the same events: their visibility is the same token for token.
        self._rows[tuple(rendering.input_ids)] = (
            list(rendering.time),
            list(rendering.visible_until),
            [label != -100 for label in rendering.labels],
        )

    def get(self, ids: list[int]) -> tuple[list[float], list[float], list[bool]]:
        """The times, visibility and action tokens of a rollout's ids.

        Raises:
            KeyError: For ids no rollout of this generation batch rendered to.
        """
        found = self._rows.get(tuple(ids))
        if found is None:
            raise KeyError(
                f"no rollout of this generation batch has these {len(ids)} ids: its streaming mask is unknown"
            )
        return found


@torch.no_grad()
def session_logprobs(model: Any, rendering: Rendering, prompt_tokens: int, temperature: float = 1.0) -> list[float]:
    """The log-probability the model gives each completion token of a rendered session, computed as the runtime
    computes (the engine, over the session's cache, under its streaming mask): what a rollout's log-probs are.

    Args:
        model: The policy, in eval mode.
        rendering: The session log, rendered.
        prompt_tokens: Tokens of the system prompt at its start (the completion is the rest).
        temperature: Logits are divided by it, as sampling and the trainer do.

    Returns:
        One log-probability per completion token.
    """
    ids, times, until = rendering.input_ids, rendering.time, rendering.visible_until
    engine = Engine(model)
    # The last prompt token is fed with the completion, so that its logits (the first completion token's) come back.
    session = engine.open(tuple(ids[: prompt_tokens - 1]))
    fed = ids[prompt_tokens - 1 :]
    logits = session.forward(Forward(fed, list(times[prompt_tokens - 1 :]), list(until), rows=len(fed)))[:-1]
    logps = torch.log_softmax(logits.float() / temperature, dim=-1)
    targets = torch.tensor(ids[prompt_tokens:], device=logps.device)
    session.close()
    return logps.gather(1, targets[:, None])[:, 0].tolist()


class RuntimeRollouts:
    """TRL's ``rollout_func``: plays each prompt's task in the runtime with the model being trained.

    Args:
        tasks: The training timelines, found by id.
        tokenizer: The policy's tokenizer (extended with the clock tokens).
        args: The run's config.
        backends: Builds each session's tool backend (``data_gen.backends.make_backend``).
        rows: Where each rollout's streaming metadata goes, for the trainer's log-prob pass.
        experts: Builds the expert of one task, who plays the last ``args.expert_generations`` rollouts of each
            task's group; needed only when that is above 0.

    Raises:
        ValueError: For tasks with the same id, or ``expert_generations`` above 0 without ``experts``.
    """

    def __init__(
        self,
        tasks: Sequence[Timeline],
        tokenizer: Any,
        args: ClockGRPOConfig,
        backends: BackendFactory,
        rows: StreamingRows,
        experts: PolicyFactory | None = None,
    ) -> None:
        from clocktune.runtime.device_profiles import load_device_profile, load_speculation_costs

        self.tasks = {task.id: task for task in tasks}
        if len(self.tasks) != len(tasks):
            raise ValueError("the training timelines' ids must be unique: a task is named by its id")
        if args.expert_generations and experts is None:
            raise ValueError(
                f"expert_generations is {args.expert_generations} but no experts were given: pass the factory of "
                "the data's experts (recipes/grpo.py passes data_gen's experts_of_data), or set it to 0"
            )
        self.experts = experts
        self.tokenizer = tokenizer
        self.args = args
        self.backends = backends
        self.rows = rows
        self.device = load_device_profile(args.rollout_profile)
        self.costs = load_speculation_costs(args.rollout_profile_costs) if args.rollout_profile_costs else None
        self.drafter: Any = None  # resolved with the model at the first call, then kept: a quantized one rebuilds
        self.last: dict[str, float] = {}  # the metrics of the last call

    def seeds(self, step: int, count: int) -> list[int]:
        """The sampling seed of each rollout of a step: the same after a resume, different for every copy."""
        return [(self.args.seed * 1_000_003 + step) * 10_007 + index for index in range(count)]

    def played_by_expert(self, index: int) -> bool:
        """Whether the rollout at ``index`` of a call is the expert's: the last ``expert_generations`` of each group
        of ``num_generations`` (TRL hands a group's copies of a task one after another and computes advantages over
        each such run)."""
        generations = self.args.num_generations
        return index % generations >= generations - self.args.expert_generations

    def _drafter(self, model: Any) -> Any:
        if self.drafter is None and self.args.rollout_draft != "none":
            from clocktune.runtime.speculation_costs import resolve_drafter

            self.drafter, self.costs = resolve_drafter(self.args.rollout_draft, model, self.costs)
        return self.drafter

    def play(
        self, model: Any, task_ids: Sequence[str], step: int, policy_only: bool = False
    ) -> tuple[list[Timeline], Any, Any]:
        """Plays ``task_ids`` (repeats included), one session each, all at once; with ``policy_only``, the expert
        plays none of them (``expert_generations`` ignored).

        Returns:
            ``(logs, run, decoding)``: each session's log in order, the scored run, and the decoding metrics.
        """
        from clocktune.runtime.model_policy import ModelPolicy
        from clocktune.runtime.play import run_policy
        from clocktune.runtime.session import SessionConfig
        from clocktune.runtime.speculative import SpeculationStats

        copies = []
        for index, task_id in enumerate(task_ids):
            task = self.tasks.get(task_id)
            if task is None:
                raise ValueError(f"prompt {task_id!r} names no training timeline (a prompt is a task's id)")
            copies.append(dataclasses.replace(task, id=f"{task_id}#{index}"))
        by_expert = [not policy_only and self.played_by_expert(index) for index in range(len(copies))]
        expert_copies = {copy.id for copy, expert in zip(copies, by_expert, strict=True) if expert}
        if expert_copies:
            generations = self.args.num_generations
            groups = [task_ids[start : start + generations] for start in range(0, len(task_ids), generations)]
            if len(task_ids) % generations or any(len(set(group)) != 1 for group in groups):
                raise ValueError(
                    f"expert_generations needs each task's {generations} copies one after another, as TRL hands "
                    f"them: got {list(task_ids)}"
                )
        seeds = dict(zip((copy.id for copy in copies), self.seeds(step, len(copies)), strict=True))
        engine = Engine(model, self.args.runtime_batch_size or len(copies))
        drafter = self._drafter(model)
        decoding = SpeculationStats(drafter.name if drafter is not None else "none")

        def policy(timeline: Timeline) -> Any:
            if timeline.id in expert_copies:
                return self.experts(timeline)
            return ModelPolicy(
                model,
                self.tokenizer,
                timeline,
                name="grpo",
                engine=engine,
                constrained=self.args.constrained_decoding,
                drafter=drafter,
                costs=self.costs,
                decoding=decoding,
                temperature=self.args.temperature,
                continuation_temperature=self.args.rollout_continuation_temperature,
                seed=seeds[timeline.id],
                call_bias=self.args.rollout_call_bias,
            )

        config = SessionConfig(
            device=self.device, turn_limit_s=self.args.rollout_turn_limit_s, max_notices=self.args.rollout_max_notices
        )
        run = run_policy("grpo", copies, policy, self.backends, config, concurrency=len(copies))
        return [log.timeline for log in run.logs], run, decoding

    def __call__(self, prompts: list[str], trainer: GRPOTrainer) -> dict[str, Any]:
        """Plays the prompts' tasks and returns what TRL trains on, with the reward's components."""
        model = trainer.accelerator.unwrap_model(trainer.model)
        training = model.training
        model.eval()
        started = time.perf_counter()
        try:
            logs, run, decoding = self.play(model, prompts, trainer.state.global_step)
        finally:
            model.train(training)
        seconds = time.perf_counter() - started
        self.rows.clear()
        prompt_ids, completion_ids, env_mask = [], [], []
        for log in logs:
            rendering = render(log, self.tokenizer)
            system = sum(rendering.sink)
            self.rows.add(rendering)
            prompt_ids.append(rendering.input_ids[:system])
            completion_ids.append(rendering.input_ids[system:])
            env_mask.append([int(label != -100) for label in rendering.labels[system:]])
        cap = self.args.latency_cap_s
        results = run.results
        latencies = [min(r.latency_s, cap) if r.latency_s is not None else cap for r in results]
        # The policy's own rollouts: the expert's would make the curves of success and latency read its figures.
        own = [index for index in range(len(results)) if not self.played_by_expert(index)]
        theirs = [index for index in range(len(results)) if self.played_by_expert(index)]
        summary = decoding.summary()
        self.last = {
            "rollout/seconds": seconds,
            "rollout/success": statistics.fmean(float(results[index].accurate) for index in own),
            "rollout/latency_p50_s": statistics.median(latencies[index] for index in own),
            "rollout/acceptance": summary["alpha"] or 0.0,
            "rollout/draft_length": summary["mean_draft_length"] or 0.0,
            "rollout/speculative_share": summary["speculative_share"] or 0.0,
            "rollout/switched_on_batch": float(summary["switched_on_batch"]),
        }
        if theirs:
            self.last["rollout/expert_success"] = statistics.fmean(float(results[index].accurate) for index in theirs)
        rebuilds = getattr(self.drafter, "rebuild_s", None)  # a quantized drafter, rebuilt from this step's weights
        if rebuilds:
            self.last["rollout/drafter_rebuild_s"] = rebuilds[-1]
        for name, value in self.last.items():
            trainer._metrics["train"][name].append(value)  # TRL averages and logs its metrics at each logging step
        return {
            "prompt_ids": prompt_ids,
            "completion_ids": completion_ids,
            "logprobs": None,  # TRL needs the sampler's log-probs only to correct vLLM's; these rollouts are the policy's
            "env_mask": env_mask,
            "success": [float(r.accurate) for r in results],
            "latency_s": latencies,
            "violations": [r.side_effect_violations for r in results],
            "notices": [r.notices for r in results],
            "progress": [task_progress_of(log) for log in run.logs],
        }


class ClockGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` whose log-probs see each rollout as its session did: under the row's streaming mask and with
    positions from 0, at the model's own action tokens (the only ones that carry loss).

    Two things make it cheaper than TRL's pass over every completion token. The rows of a micro-batch that start with
    the same system prompt run it once, with gradients, as a KV cache each row continues from (the rollouts of a task,
    and every task of a domain, share it; not under activation checkpointing, whose layers drop the cache): on the
    demo's training timelines the prompt is 65% of a row (median of 200). And the LM head runs only where an action
    token is predicted (``logits_to_keep``): user speech and tool results, 77% of a completion there, carry no loss
    (``env_mask``), so their log-probs are left at 0.

    Args:
        *args: As ``GRPOTrainer``'s.
        streaming_rows: The rollouts' streaming metadata (the rollout function's :class:`StreamingRows`).
        **kwargs: As ``GRPOTrainer``'s.
    """

    def __init__(self, *args: Any, streaming_rows: StreamingRows, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.streaming_rows = streaming_rows

    def _get_per_token_logps_and_entropies(
        self,
        model: Any,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        logits_to_keep: int,
        batch_size: int | None = None,
        compute_entropy: bool = False,
        compute_aux_loss: bool = False,
        **unused: Any,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """Per-token log-probs (and entropies) of the completion columns' action tokens, 0 elsewhere.

        ``input_ids`` is TRL's left-padded prompts then right-padded completions; each row is taken without its
        padding, so its positions and mask are the session's.
        """
        rows = input_ids.size(0)
        start = input_ids.size(1) - logits_to_keep  # the first completion column
        device = input_ids.device
        logps = torch.zeros(rows, logits_to_keep, device=device)
        entropies = torch.zeros(rows, logits_to_keep, device=device) if compute_entropy else None
        dtype = next(model.parameters()).dtype
        # The last prompt token is fed with the completion, so that its logits (the first completion token's) come
        # back; the tokens before it are shared by rows whose are the same, seen the same way.
        checkpointing = bool(self.args.gradient_checkpointing) and model.training
        groups: dict[tuple, list[tuple[int, torch.Tensor, int, list[float], list[float], list[bool]]]] = {}
        for row in range(rows):
            ids = input_ids[row][attention_mask[row].bool()]
            prompt = int(attention_mask[row, :start].sum())
            times, until, actions = self.streaming_rows.get(ids.tolist())
            shared = 0 if checkpointing else prompt - 1
            key = (tuple(ids[:shared].tolist()), tuple(times[:shared]), tuple(until[:shared]))
            groups.setdefault(key, []).append((row, ids, prompt, times, until, actions))
        for key, members in groups.items():
            shared = len(key[0])
            with self.accelerator.autocast():
                prompt_layers = []
                if shared:
                    _, ids, _, times, until, _ = members[0]
                    cache = DynamicCache(config=self.model.config)
                    model(
                        input_ids=ids[None, :shared],
                        attention_mask=streaming_mask(0, times[:shared], until, dtype, device),
                        position_ids=torch.arange(shared, device=device)[None],
                        cache=cache,
                        use_cache=True,
                    )
                    prompt_layers = [(layer.keys, layer.values) for layer in cache.layers]
                for row, ids, prompt, times, until, actions in members:
                    count = ids.numel()
                    # Fed token j predicts the token at shared + 1 + j; the completion's start at prompt.
                    keep = [j for j in range(prompt - shared - 1, count - shared - 1) if actions[shared + 1 + j]]
                    if not keep:
                        continue
                    kept = torch.tensor(keep, device=device)
                    outputs = model(
                        input_ids=ids[None, shared:],
                        attention_mask=streaming_mask(shared, times[shared:], until, dtype, device),
                        position_ids=torch.arange(shared, count, device=device)[None],
                        cache=cache_over(prompt_layers, self.model.config),
                        use_cache=True,
                        logits_to_keep=kept,
                    )
                    log_probs = torch.log_softmax(outputs.logits[0].float() / self.temperature, dim=-1)
                    columns = kept + shared + 1 - prompt
                    logps[row, columns] = log_probs.gather(1, ids[shared + 1 + kept][:, None])[:, 0]
                    if entropies is not None:
                        entropies[row, columns] = -(log_probs.exp() * log_probs).sum(-1)
        return logps, entropies, None


def task_dataset(tasks: Sequence[Timeline]) -> Any:
    """The trainer's dataset: one row per task, its ``prompt`` the timeline's id."""
    from datasets import Dataset

    return Dataset.from_dict({"prompt": [task.id for task in tasks]})


def build_trainer(
    data_args: Any,
    training_args: ClockGRPOConfig,
    model_args: Any,
    backends: BackendFactory,
    callbacks: list | None = None,
    experts: ExpertsBuilder | None = None,
) -> ClockGRPOTrainer:
    """The trainer of a GRPO run in the runtime: the starting checkpoint, a fresh LoRA when asked, the tasks, the
    rollout function and, when ``live_eval_steps`` is set, the live-evaluation callback.

    Args:
        data_args: ``TimelineDataArguments``: ``train_data`` are the tasks.
        training_args: The GRPO and runtime settings.
        model_args: ``model_name_or_path`` is the starting checkpoint (a clocktune SFT checkpoint: its tokenizer has
            the clock tokens); LoRA settings as in SFT.
        backends: Builds each rollout's tool backend (``data_gen.backends.make_backend``).
        callbacks: Extra ``TrainerCallback`` objects.
        experts: ``experts(strategy, data_folder)``, the factory of the experts that play the expert's rollouts
            (``expert_generations``) of the first ``train_data`` folder's tasks (``data_gen.expert.experts_of_data``).

    Raises:
        ValueError: When ``train_data`` is empty, or ``expert_generations`` is set without ``experts`` or over tasks
            the expert cannot rebuild.
    """
    from trl import get_peft_config

    from clocktune.rendered_dataset import load_timeline_files
    from clocktune.runtime.policy_factories import load_policy_model, model_load_kwargs

    if not data_args.train_data:
        raise ValueError("train_data is empty: pass the timelines whose tasks the rollouts play")
    tasks = load_timeline_files(data_args.train_data)
    task_experts = None
    if training_args.expert_generations:
        if experts is None:
            raise ValueError(
                f"expert_generations is {training_args.expert_generations} but no experts were given: call "
                "main(..., experts=...) (recipes/grpo.py passes data_gen's experts_of_data), or set it to 0"
            )
        task_experts = experts(training_args.rollout_expert, str(data_args.train_data[0]))
        # The expert rebuilds a task from its timeline's seed under the data's generator config: other data fails
        # here, in seconds, not at the first rollout.
        task_experts(tasks[0])
    live_eval = None
    if training_args.live_eval_steps > 0:
        from clocktune.train.live_eval import load_live_eval_inputs

        live_eval = load_live_eval_inputs(training_args)  # before the model loads: a bad path fails in seconds
    model, tokenizer = load_policy_model(model_args.model_name_or_path, **model_load_kwargs(model_args))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token  # TRL pads the prompts and completions of a batch
    if training_args.screen_tasks:
        from clocktune.train.task_screen import kept_tasks, screen_settings, screen_tasks

        settings = screen_settings(training_args, model_args.model_name_or_path, data_args.train_data)
        is_main = training_args.process_index == 0
        screened = screen_tasks(model, tokenizer, tasks, training_args, backends, settings, write=is_main)
        tasks = kept_tasks(tasks, screened, training_args.screen_keep)
        if is_main:
            print(f"screen: {len(tasks)} of {len(screened)} screened tasks kept ({training_args.screen_keep})")
    model.train()
    rows = StreamingRows()
    trainer = ClockGRPOTrainer(
        model=model,
        reward_funcs=REWARDS,
        args=training_args,
        train_dataset=task_dataset(tasks),
        processing_class=tokenizer,
        peft_config=get_peft_config(model_args),
        callbacks=callbacks,
        rollout_func=RuntimeRollouts(tasks, tokenizer, training_args, backends, rows, task_experts),
        streaming_rows=rows,
    )
    if live_eval is not None:
        from clocktune.train.live_eval import LiveEvalCallback

        timelines, device = live_eval
        trainer.add_callback(
            LiveEvalCallback(
                trainer,
                timelines,
                backends,
                training_args.live_eval_steps,
                device,
                constrained=training_args.constrained_decoding,
                call_bias=training_args.live_eval_call_bias,
                batch_size=training_args.runtime_batch_size,
            )
        )
    return trainer


def main(
    data_args: Any,
    training_args: ClockGRPOConfig,
    model_args: Any,
    backends: BackendFactory,
    callbacks: list | None = None,
    experts: ExpertsBuilder | None = None,
) -> ClockGRPOTrainer:
    """Trains the policy by GRPO in the runtime, resuming from the last checkpoint in ``output_dir``, and saves it
    merged onto its start, with its training record (arguments as :func:`build_trainer`'s). It pushes nothing
    (``push_to_hub`` is the entry point's: see :func:`run`).

    Returns:
        The trainer after training.
    """
    from transformers.trainer_utils import get_last_checkpoint

    from clocktune.runtime.policy_factories import model_load_kwargs
    from clocktune.train.policy_save import save_policy

    trainer = build_trainer(data_args, training_args, model_args, backends, callbacks, experts)
    checkpoint = training_args.resume_from_checkpoint
    if checkpoint is None and os.path.isdir(training_args.output_dir):
        checkpoint = get_last_checkpoint(training_args.output_dir)
    if checkpoint is not None:
        trainer.accelerator.print(f"Resuming from {checkpoint}")
    trainer.train(resume_from_checkpoint=checkpoint)
    # Merged onto the start: the fresh LoRA saved alone would name the raw base (clocktune.train.policy_save).
    save_policy(trainer, training_args.output_dir, model_args.model_name_or_path, **model_load_kwargs(model_args))
    if trainer.accelerator.is_main_process:
        from clocktune.train.record import write_training_record

        # The start as the recipe names it, for the card of a push: the merged model's own config names no base.
        record = {"base_model": model_args.model_name_or_path, "train_data": list(data_args.train_data)}
        write_training_record(training_args.output_dir, **record, max_steps=trainer.state.global_step)
    return trainer


def make_parser() -> Any:
    """The recipe's parser: YAML via ``--config``, then command-line overrides."""
    from trl import ModelConfig, TrlParser

    from clocktune.train.sft import TimelineDataArguments

    return TrlParser((TimelineDataArguments, ClockGRPOConfig, ModelConfig))


def run(
    argv: list[str] | None = None,
    backends: Callable[[bool], BackendFactory] | None = None,
    experts: ExpertsBuilder | None = None,
) -> tuple[ClockGRPOTrainer, ClockGRPOConfig]:
    """Parses ``argv`` (``--config FILE`` and overrides) and trains; the entry point of ``recipes/grpo.py``.

    Args:
        argv: Command-line arguments; ``sys.argv[1:]`` when ``None``.
        backends: ``backends(trust_domain_code)``, the rollouts' tool backends (``data_gen.backends.session_backends``).
        experts: ``experts(strategy, data_folder)``, for ``expert_generations`` (``data_gen.expert.experts_of_data``).

    Returns:
        ``(trainer, training_args)``: the trainer after training and the parsed training arguments, whose
        ``push_output_to_hub``, ``output_dir`` and ``hub_*`` fields tell the caller what to push where
        (``clocktune.cli.train_push.push_trained``; the train layer does not import the Hub's code).
    """
    data_args, training_args, model_args = make_parser().parse_args_and_config(args=argv)
    if backends is None:
        raise ValueError("GRPO plays its rollouts in the runtime: pass the tool backends (recipes/grpo.py does)")
    factory = backends(data_args.trust_domain_code)
    return main(data_args, training_args, model_args, factory, experts=experts), training_args
