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

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from transformers import DynamicCache
from trl import GRPOTrainer

from clocktune.runtime.incremental import streaming_mask
from clocktune.train.grpo_config import ClockGRPOConfig
from clocktune.train.grpo_rollouts import RuntimeRollouts, StreamingRows
from clocktune.train.trainer import cache_over

if TYPE_CHECKING:
    from clocktune.timeline.events import Timeline
    from clocktune.tools import BackendFactory
    from clocktune.train.on_policy import ExpertsBuilder

__all__ = [
    "REWARDS",
    "ClockGRPOTrainer",
    "build_trainer",
    "main",
    "first_words_latency",
    "make_parser",
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
