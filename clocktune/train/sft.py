"""Clock-aware supervised fine-tuning of a causal LM on timelines.

Usage:

    accelerate launch --config_file configs/accelerate/single_gpu.yaml recipes/sft.py \
        --config configs/qwen2.5-3b/sft_lora.yaml
    # the same code in one process, with CLI overrides after the YAML:
    clocktune train --config configs/smollm2-135m/sft_lora_cpu.yaml --max_steps 20

Steps: extend the base tokenizer with action markers and clock tokens, render the timelines with the shared
renderer, then train with ``ClockSFTTrainer`` (streaming masks, packing without splitting timelines). LoRA runs
train the new token rows through PEFT ``trainable_token_indices``. A run started again with the same command resumes
from the last checkpoint in ``output_dir``. With ``live_eval_steps`` set, the model also plays held-out dialogues
live in the runtime every so many steps (:mod:`clocktune.train.live_eval`); the tool backends of those sessions come
from the caller (``backends``), as the train layer does not know the generator's domains. With ``on_policy_rounds``
set, on-policy rounds follow the first training (:mod:`clocktune.train.on_policy`): the model plays training tasks
live, the caller's expert (``experts``) labels them, and training continues on a mixture with the teacher's data.
Training never pushes to the Hub: with ``push_to_hub`` set, the entry points upload the saved output once
:func:`run` returns (``clocktune.cli.train_push``; ``ClockSFTConfig`` hands the Trainer ``push_to_hub`` off).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from trl import ModelConfig, TrlParser, get_peft_config

from clocktune.models import resolve_model_path
from clocktune.train.config import ClockSFTConfig

if TYPE_CHECKING:
    from collections.abc import Callable

    from clocktune.timeline.events import Timeline
    from clocktune.tools import BackendFactory
    from clocktune.train.on_policy import ExpertsBuilder


@dataclass
class TimelineDataArguments:
    """Where the timelines come from.

    Args:
        train_data: Timeline files or folders (``.jsonl``/``.parquet``) to train on.
        eval_data: Timeline files or folders for evaluation.
        trust_domain_code: Whether a declarative domain file named by the timelines (live evaluation, on-policy
            rounds) may import its backend's Python module; off, such data is refused before the model loads.
            ``--trust-domain-code`` on the command line, as ``trust_remote_code`` is for models.
    """

    train_data: list[str] = field(default_factory=list, metadata={"help": "Timeline files or folders to train on."})
    eval_data: list[str] | None = field(default=None, metadata={"help": "Timeline files or folders to evaluate on."})
    trust_domain_code: bool = field(
        default=False,
        metadata={
            "help": "Run the Python backend of a domain file the timelines name (their sessions need it).",
            "aliases": ["--trust-domain-code"],
        },
    )

    def __post_init__(self) -> None:
        # A YAML scalar (`train_data: data/demo`) reaches a list field unsplit, and a string would be read as its
        # characters' paths.
        if isinstance(self.train_data, str):
            self.train_data = [self.train_data]
        if isinstance(self.eval_data, str):
            self.eval_data = [self.eval_data]


def infer_model_format(model_type: str, tokenizer) -> str:
    """The tool-calling convention of a base model: ChatML when its tokenizer has ``<|im_start|>`` and it is not a
    Qwen model, else Qwen2.5's or Llama 3.2's by architecture."""
    if model_type == "qwen2":
        return "qwen2.5"
    if "<|im_start|>" in tokenizer.get_vocab():
        return "chatml"
    if model_type == "llama":
        return "llama3.2"
    raise ValueError(f"cannot infer model_format for model type {model_type!r}; set model_format in the config")


def load_model_and_tokenizer(training_args: ClockSFTConfig, model_args: ModelConfig):
    """Loads the base model and its tokenizer, extended with action markers and clock tokens.

    A LoRA adapter folder (a clocktune checkpoint such as the demo's) is loaded merged into its base. Markers the
    tokenizer already had keep the model's rows for them; new ones are initialised from their names.

    Args:
        training_args: Supplies the time codec and model format.
        model_args: Supplies the model id or path, revision, dtype and attention implementation.

    Returns:
        ``(model, tokenizer, model_format, new_token_ids)``; the model has rows for the new tokens: the markers'
        from their names (:func:`clocktune.encoding.init_marker_embeddings`), the clock tokens' drawn by transformers
        from the old embeddings' mean and covariance (seeded with ``training_args.seed``).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from clocktune.encoding import extend_tokenizer, get_codec, init_marker_embeddings
    from clocktune.runtime.policy_factories import is_adapter, load_policy_model, model_load_kwargs

    model_path = resolve_model_path(model_args.model_name_or_path)
    if is_adapter(model_path):
        # Merged into its base: the LoRA trained on top then starts from the adapter's weights, and the final save
        # merges onto this checkpoint again, loaded the same way (clocktune.train.policy_save).
        model, tokenizer = load_policy_model(model_path, **model_load_kwargs(model_args))
    else:
        tokenizer = AutoTokenizer.from_pretrained(model_path, revision=model_args.model_revision)
        model = AutoModelForCausalLM.from_pretrained(
            model_path,
            revision=model_args.model_revision,
            dtype=model_args.dtype or "auto",
            attn_implementation=model_args.attn_implementation,
        )
    model_format = training_args.model_format or infer_model_format(model.config.model_type, tokenizer)
    codec = get_codec(training_args.time_codec, **(training_args.time_codec_kwargs or {}))
    trained = set(tokenizer.get_added_vocab())  # a clocktune checkpoint's markers: their rows are trained
    new_token_ids = extend_tokenizer(tokenizer, codec, model_format)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    torch.manual_seed(training_args.seed)
    model.resize_token_embeddings(len(tokenizer))
    init_marker_embeddings(model, tokenizer, keep=trained)
    return model, tokenizer, model_format, new_token_ids


def main(
    data_args: TimelineDataArguments,
    training_args: ClockSFTConfig,
    model_args: ModelConfig,
    callbacks: list | None = None,
    backends: BackendFactory | None = None,
    experts: ExpertsBuilder | None = None,
    check_backends: Callable[[list[Timeline]], None] | None = None,
):
    """Trains and saves the model; it pushes nothing (``push_to_hub`` is the entry point's: see ``run``).

    Args:
        data_args: Where the timelines are.
        training_args: Trainer and clock settings.
        model_args: Base model and LoRA settings.
        callbacks: Extra ``TrainerCallback`` objects (of the first training's trainer and of every round's).
        backends: Builds the tool backend of each live-evaluation and rollout session
            (``data_gen.backends.make_backend``); needed when ``training_args.live_eval_steps`` or
            ``on_policy_rounds`` is above 0.
        experts: ``experts(strategy, data_folder)``, the factory of experts that label the on-policy rollouts of
            the generated timelines in ``data_folder`` (``data_gen.expert.expert_factory`` with the folder's
            ``generation.json``); needed when ``training_args.on_policy_rounds`` is above 0.
        check_backends: Called on the live-evaluation timelines and the on-policy tasks before the model loads;
            raises for a timeline whose backend cannot be built (``data_gen.backends.check_domain_code``: a domain
            file whose code the user did not trust), so that the refusal comes in seconds, not at the first live
            evaluation an hour in. It builds no session.

    Returns:
        The ``ClockSFTTrainer`` after training (its model is the trained one); with on-policy rounds, the last
        round's.

    Raises:
        ValueError: When ``train_data`` is empty, or live evaluation or on-policy rounds are asked for without
            ``backends`` (and, for the rounds, ``experts``).
        FileNotFoundError: With on-policy rounds, when the first ``train_data`` folder holds no
            ``generation.json`` (from ``experts``).
    """
    from transformers.trainer_utils import get_last_checkpoint

    from clocktune.rendered_dataset import load_timeline_files, render_timelines
    from clocktune.runtime.policy_factories import is_adapter, model_load_kwargs
    from clocktune.train.on_policy import last_finished_round, prepare_on_policy, train_from, train_rounds
    from clocktune.train.policy_save import save_policy
    from clocktune.train.trainer import ClockSFTTrainer

    if not data_args.train_data:
        raise ValueError("train_data is empty: pass timeline files or folders")
    start = resolve_model_path(model_args.model_name_or_path)
    merge_onto = start if is_adapter(start) else None
    if merge_onto is not None and training_args.on_policy_rounds > 0:
        # The rounds' folders would hold adapters that name the raw base (and a restarted run resumes from them).
        raise ValueError(
            f"model_name_or_path {start} is a LoRA adapter: SFT from it saves the policy merged, which on-policy "
            "rounds do not support. Train without them, or start from a merged copy of the adapter "
            "(clocktune.runtime.policy_factories.load_policy_model, then save_pretrained)"
        )
    live_eval = None
    if training_args.live_eval_steps > 0:
        from clocktune.train.live_eval import load_live_eval_inputs

        if backends is None:
            raise ValueError(
                "live_eval_steps is set but no tool backends were given: call main(..., backends=...) with a "
                "BackendFactory (clocktune train and recipes/sft.py pass data_gen.backends.make_backend)"
            )
        # Before the model loads: a wrong path or profile fails in seconds, not after the first evaluation steps.
        live_eval = load_live_eval_inputs(training_args)
        if check_backends is not None:
            check_backends(live_eval[0])
    on_policy = None
    if training_args.on_policy_rounds > 0:
        # Also before the model loads: data that are not generated fail now, not after the first training.
        on_policy = prepare_on_policy(data_args.train_data, training_args, experts, backends)
        if check_backends is not None:
            check_backends(on_policy.tasks)
    if training_args.device.type == "cpu":
        from clocktune.heap import hold_freed_memory

        hold_freed_memory()  # each step's activations reuse the last step's memory instead of faulting in new pages
        if training_args.cpu_fair_share:
            from clocktune.train.cpu_share import FairShare, FairShareCallback

            if not any(isinstance(callback, FairShareCallback) for callback in callbacks or []):
                callbacks = [*(callbacks or []), FairShareCallback(FairShare())]  # the caller's own one wins
    model, tokenizer, model_format, new_token_ids = load_model_and_tokenizer(training_args, model_args)
    peft_config = get_peft_config(model_args)
    if peft_config is not None:
        peft_config.trainable_token_indices = {"embed_tokens": new_token_ids}

    # Data: render every timeline with the shared renderer (what the runtime feeds the model, token for token).
    train_timelines = load_timeline_files(data_args.train_data)[: training_args.max_timelines]
    train_dataset = render_timelines(train_timelines, tokenizer, model_format, training_args.agent_clock_loss)
    eval_dataset = None
    if data_args.eval_data:
        eval_timelines = load_timeline_files(data_args.eval_data)
        eval_dataset = render_timelines(eval_timelines, tokenizer, model_format, training_args.agent_clock_loss)

    trainer = ClockSFTTrainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=callbacks,
    )
    if live_eval is not None:
        from clocktune.train.live_eval import LiveEvalCallback

        # Added after the trainer exists: the callback logs through it.
        timelines, device = live_eval
        callback = LiveEvalCallback(
            trainer,
            timelines,
            backends,
            training_args.live_eval_steps,
            device,
            constrained=training_args.constrained_decoding,
            call_bias=training_args.live_eval_call_bias,
            batch_size=training_args.runtime_batch_size,
        )
        trainer.add_callback(callback)
    # The base and the data as the recipe names them: a checkpoint records only the path its base came from.
    record = {
        "base_model": model_args.model_name_or_path,
        "train_data": list(data_args.train_data),
        "model_format": model_format,
        "time_codec": training_args.time_codec,
    }
    # A finished round's weights supersede the first training's: a run started again does not train it again.
    if on_policy is None or last_finished_round(training_args) == 0:
        checkpoint = training_args.resume_from_checkpoint
        if checkpoint is None and os.path.isdir(training_args.output_dir):
            checkpoint = get_last_checkpoint(training_args.output_dir)
        if checkpoint is not None:
            trainer.accelerator.print(f"Resuming from {checkpoint}")
        carry = on_policy is not None and training_args.on_policy_optimizer == "continue"
        train_from(trainer, checkpoint, with_optimizer=carry)
    facts = {"max_steps": trainer.state.global_step}
    if on_policy is not None:
        rounds = train_rounds(
            trainer, on_policy, train_dataset, model_format, record, eval_dataset, callbacks, live_eval
        )
        trainer = rounds.trainer
        facts = {"max_steps": rounds.global_step, "on_policy_rounds": rounds.rounds}
    save_policy(trainer, training_args.output_dir, merge_onto, **model_load_kwargs(model_args))
    if trainer.accelerator.is_main_process:
        from clocktune.train.record import write_training_record

        write_training_record(training_args.output_dir, **record, **facts)
    trainer.accelerator.print(f"Model saved to {training_args.output_dir}")
    return trainer


def make_parser() -> TrlParser:
    """The recipe's parser: YAML via ``--config``, then command-line overrides."""
    return TrlParser((TimelineDataArguments, ClockSFTConfig, ModelConfig))


def run(
    argv: list[str] | None = None,
    backends: Callable[[bool], BackendFactory] | None = None,
    experts: ExpertsBuilder | None = None,
    check_backends: Callable[[list[Timeline], bool], None] | None = None,
):
    """Parses ``argv`` (``--config FILE`` and overrides) and trains; the entry point of the recipe and the CLI.

    Args:
        argv: Command-line arguments; ``sys.argv[1:]`` when ``None``.
        backends: ``backends(trust_domain_code)``, the tool backends of live-evaluation and rollout sessions under
            the command line's ``--trust-domain-code`` (``data_gen.backends.session_backends``; see :func:`main`).
        experts: The experts that label the on-policy rollouts (see :func:`main`).
        check_backends: ``check_backends(timelines, trust_domain_code)``, which refuses timelines whose domain code
            the user did not trust before the model loads (``data_gen.backends.check_domain_code``).

    Returns:
        ``(trainer, training_args)``: the trainer after training (see :func:`main`) and the parsed training
        arguments, whose ``push_output_to_hub``, ``output_dir`` and ``hub_*`` fields tell the caller what to push
        where (``clocktune.cli.train_push.push_trained``; the train layer does not import the Hub's code).
    """
    data_args, training_args, model_args = make_parser().parse_args_and_config(args=argv)
    trust = data_args.trust_domain_code
    factory = backends(trust) if backends is not None else None
    check = (lambda timelines: check_backends(timelines, trust)) if check_backends is not None else None
    trainer = main(data_args, training_args, model_args, backends=factory, experts=experts, check_backends=check)
    return trainer, training_args
