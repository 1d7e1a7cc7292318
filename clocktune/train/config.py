"""``ClockSFTConfig``: TRL's ``SFTConfig`` plus the clock fields, and the recipe's data/model arguments."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trl import SFTConfig

from clocktune.rendered_dataset import ACTION_TYPES

TIME_CODECS = ("text", "abs_bins", "log_delta")
MODEL_FORMATS = ("qwen2.5", "llama3.2", "chatml")
MASK_POLICIES = ("streaming", "causal")
ON_POLICY_OPTIMIZERS = ("continue", "restart")


@dataclass
class ClockSFTConfig(SFTConfig):
    r"""
    Configuration for [`~clocktune.train.trainer.ClockSFTTrainer`]: every field of TRL's `SFTConfig`, plus the clock
    fields below. Some `SFTConfig` defaults differ, because the data arrive pre-tokenized with their own labels and
    are packed by clocktune's collator: `packing=False`, `remove_unused_columns=False`,
    `dataset_kwargs={"skip_prepare_dataset": True}` (these three are enforced), and `bf16` left unset is on where the
    training runs on a GPU, or with `use_cpu` on a CPU with AMX tiles (:func:`cpu_has_amx`), off otherwise.

    Parameters:
        > Parameters that control the clock encoding

        time_codec (`str`, *optional*, defaults to `"abs_bins"`):
            How clock tokens state time: `"text"` (digits, no new vocabulary), `"abs_bins"` (absolute time in 100 ms
            bins, new special tokens) or `"log_delta"` (log-spaced bins of the time since the previous event).
        time_codec_kwargs (`dict[str, Any]`, *optional*):
            Parameters of the codec, e.g. `{"resolution": 0.05}` for `"abs_bins"`.
        model_format (`str`, *optional*):
            Tool-calling convention of the base model: `"qwen2.5"`, `"llama3.2"` or `"chatml"` (SmolLM2). Inferred
            from the model type when not set (`qwen2` → `"qwen2.5"`, `llama` → `"llama3.2"`, unless the tokenizer
            has `<|im_start|>`, then `"chatml"`).
        agent_clock_loss (`bool`, *optional*, defaults to `False`):
            Whether the clock tokens in front of the agent's actions carry loss. The runtime writes them, so by
            default the model is not asked to predict them.

        > Parameters that control streaming attention

        mask_policy (`str`, *optional*, defaults to `"streaming"`):
            `"streaming"`: tokens never see what had not arrived, or was no longer visible, at their time
            (superseded recogniser partials, results of calls later modified or cancelled). When nothing is hidden
            this is plain block-causal attention and takes the fast path. `"causal"`: ignore visibility (block-causal
            packing), for ablations.
        attention_window_s (`float`, *optional*):
            Limits attention to the last `attention_window_s` seconds, plus the system prompt and tool schemas (sink
            tokens), for long sessions. `None` attends to the whole session.
        cache_prompt (`bool`, *optional*, defaults to `False`):
            Run the system prompt at the start of each row (instructions and tool schemas, which carry no loss)
            without gradients, and feed it to the rest of the row as a KV cache. The forward pass is unchanged; the
            backward pass skips the prompt, so the weights learn only through the tokens after it. On the embedded
            model, whose ~700-token prompt is about two thirds of a timeline, LoRA steps run 1.5-1.6x faster on a
            CPU (BENCHMARKS.md).
            Only the prompt of the first timeline of a row is cached (the shortest across the batch). Needs
            `gradient_checkpointing: false` (checkpointed layers drop the cache) and sdpa, eager or flex_attention.
        share_prompt (`bool`, *optional*, defaults to `False`):
            When every row of a batch starts with the same system prompt (one domain's tools), run it once, as a KV
            cache repeated over the rows. Loss and gradients are those of running it in every row (their sum over
            the copies is what the repeat's backward computes), at the cost of one row's prompt: at 4 rows of the
            embedded model's one-domain timelines a step, 1.93x the timelines a second on a CPU, 2.34x with
            `cache_prompt` too (BENCHMARKS.md). The default collator then puts one timeline in each row (no
            packing), so that every row starts with the prompt. Rows that start otherwise run their own prompts,
            still as a cache; `train/shared_prompt` logs the share of batches that shared. With `cache_prompt` the
            shared prompt runs without gradients, once per optimizer step: micro-batches of gradient accumulation
            reuse its cache, so one timeline a micro-batch (`per_device_train_batch_size: 1`,
            `gradient_accumulation_steps: 4`) trains as four rows do, without padding each to the longest (same loss
            and gradients, tested; 1.08-1.3x faster steps on the embedded model, BENCHMARKS.md). The same needs as
            `cache_prompt`.

        > Parameters that control the loss

        action_loss_weights (`dict[str, float]`, *optional*):
            Weight of the loss on each action type's tokens, by the names the trainer logs (`"call"`,
            `"modify_cancel"`, `"wait"`, `"say"`, `"commit"`); types not named keep weight 1. Rare decisions can be
            outweighed by common ones: in the demo's data a user's self-correction is 8 of 465 decision points, and
            the embedded model trained at weight 1 never modified a call for one (BENCHMARKS.md).

        > Parameters that control the data

        max_timelines (`int`, *optional*):
            Use at most this many training timelines (the first ones), for quick runs.

        > Parameters that control how the model plays live (live evaluation and on-policy rollouts)

        constrained_decoding (`bool`, *optional*, defaults to `True`):
            Decode the model's actions under the grammar of the actions valid now (tools, argument schemas, open
            call ids; `clocktune.runtime.action_grammar`), as `clocktune eval` does by default, so that live
            evaluation and rollouts score the model as it is served. `False`: the plain argmax.

        > Parameters that control live evaluation

        live_eval_steps (`int`, *optional*, defaults to `0`):
            Every this many optimizer steps, and once more when training ends, play held-out dialogues live in the
            runtime with the model being trained and log live accuracy, response latency and failures by type
            (`live/accuracy`, `live/latency_p50_s`, `live/failures/<reason>`, ...; docs/design.md §8). `0` turns it
            off. Each session takes seconds on a CPU: 20 sessions of the embedded model take about 90 s.
        live_eval_sessions (`int`, *optional*, defaults to `20`):
            How many timelines of `live_eval_data` to play (the first ones, the same at every evaluation).
        live_eval_data (`list[str]`, *optional*):
            Timeline files or folders (`.jsonl`/`.parquet`) of held-out dialogues. Required when `live_eval_steps`
            is above 0.
        live_eval_profile (`str`, *optional*, defaults to `"phone-135m"`):
            Compute profile the virtual clock charges the model's prefill and decode: a built-in profile
            (`h200-3b`, `laptop-cpu-3b`, `phone-135m`) or a profile YAML written by `clocktune profile`.
        live_eval_call_bias (`float`, *optional*, defaults to `0.0`):
            Added to the call marker's logit at an action's first token while the user speaks, in live evaluation
            (`ModelPolicy.call_bias`; docs/design.md §5): evaluate at the operating point the model will serve at.
        runtime_batch_size (`int`, *optional*):
            Sessions whose forwards the model engine runs as one in live evaluation and on-policy rollouts
            (`clocktune.runtime.engine`; sessions' logs do not depend on it). Defaults to the device's
            (`engine.default_batch_size`).

        > Parameters that control on-policy rounds

        on_policy_rounds (`int`, *optional*, defaults to `0`):
            On-policy rounds (DAgger; docs/design.md §8) after the first training: in each, the model as trained so
            far plays training tasks live, an expert labels every decision it reached, and training continues on a
            mixture of those examples and the teacher's data. `0` turns them off. The tasks come from the first
            `train_data` folder, which must be generated data (holding its `generation.json`, from which the expert
            rebuilds each task). Round `r` writes to `output_dir/round-{r}` (its rollout in `rollout/`, its
            checkpoints, its final model); a run started again with the same command skips the finished rounds and
            resumes the rollout or the training of the one it stopped in. Runs in one process only.
        on_policy_sessions (`int`, *optional*, defaults to `100`):
            Training tasks each round's rollout plays (at most all of them). Round `r` plays the next slice of the
            training timelines after the earlier rounds' slices, wrapping around at the end.
        on_policy_steps (`int`, *optional*):
            Optimizer steps of each round's training (a fresh learning-rate schedule each round, warmup included).
            `None` takes `max_steps`.
        on_policy_weight (`float`, *optional*, defaults to `0.5`):
            Share of each round's training examples drawn from the rollout examples of all rounds so far; the rest
            are the teacher's timelines. `0` trains on the teacher's data alone, `1` on the rollout examples alone.
        on_policy_expert (`str`, *optional*, defaults to `"speculative"`):
            The expert strategy that labels the rollouts (`data_gen.expert`: the teacher of the training data).
        on_policy_profile (`str`, *optional*, defaults to `"phone-135m"`):
            Compute profile the virtual clock of the rollouts charges: a built-in profile or a profile YAML, as for
            `live_eval_profile`.
        on_policy_takeover (`bool`, *optional*, defaults to `False`):
            The expert plays each rollout session on from the model's first action that is not its own
            (`clocktune.train.rollout.TakeoverPolicy`), so that the round's data holds the expert's recovery from
            the model's mistake (a recovery demonstration) instead of the model's later actions.
        on_policy_optimizer (`str`, *optional*, defaults to `"continue"`):
            `continue`: each round trains on with the optimizer state (AdamW's moments and step counts) the phase
            before it ended with, as one training would; it is saved with each round's model and read from the
            checkpoint a finished first training is loaded from, so a run started again carries it too.
            `restart`: each round starts a fresh optimizer, whose first updates are full-size whatever their
            gradients' noise (measured: a round of the teacher's data alone then lost accuracy, BENCHMARKS.md).

        > Parameters that control the CPU

        cpu_fair_share (`bool`, *optional*, defaults to `True`):
            On a CPU, every two steps set torch's thread count to the cores other processes leave
            (`clocktune.train.cpu_share`): with one other CPU-bound process on two cores, two threads waiting for
            each other made steps 2-9x slower, one thread 1.7x. No effect on a GPU or where `/proc/stat` is missing.

        > Pushing to the Hub

        push_to_hub (`bool`, *optional*, defaults to `False`):
            Upload the saved model when training ends: what `output_dir` holds then (the model or adapter, its
            tokenizer and training record; never checkpoints or trainer state), with a model card, to
            `hub_model_id` (`output_dir`'s name when unset, in the token's namespace; `hub_private_repo`,
            `hub_revision` and `hub_token` apply), as `clocktune push` does. The entry points upload it
            (`recipes/sft.py` and `clocktune train`, through `clocktune.cli.train_push`); the Trainer sees
            `push_to_hub` off, so it pushes nothing itself, at init, at a checkpoint or at a save (`hub_strategy`
            has no effect): the request is kept in `push_output_to_hub`.
    """

    time_codec: str = field(
        default="abs_bins", metadata={"help": "Clock encoding: text, abs_bins or log_delta.", "choices": TIME_CODECS}
    )
    time_codec_kwargs: dict[str, Any] | None = field(default=None, metadata={"help": "Parameters of the codec."})
    model_format: str | None = field(
        default=None, metadata={"help": "qwen2.5, llama3.2 or chatml; inferred when not set."}
    )
    agent_clock_loss: bool = field(default=False, metadata={"help": "Train on the clock tokens of agent actions."})
    mask_policy: str = field(default="streaming", metadata={"help": "streaming or causal.", "choices": MASK_POLICIES})
    attention_window_s: float | None = field(
        default=None, metadata={"help": "Attend to the last N seconds plus sink tokens; None for all."}
    )
    cache_prompt: bool = field(
        default=False, metadata={"help": "Run each row's system prompt without gradients, as a KV cache."}
    )
    share_prompt: bool = field(
        default=False, metadata={"help": "Run a system prompt that every row starts with once, as a shared KV cache."}
    )
    action_loss_weights: dict[str, float] | None = field(
        default=None, metadata={"help": 'Loss weight per action type, e.g. {"modify_cancel": 5.0}; others 1.'}
    )
    max_timelines: int | None = field(default=None, metadata={"help": "Use at most this many training timelines."})
    constrained_decoding: bool = field(
        default=True, metadata={"help": "Decode live evaluation's and rollouts' actions under the action grammar."}
    )
    live_eval_steps: int = field(
        default=0, metadata={"help": "Play held-out dialogues live every N optimizer steps and at the end; 0: off."}
    )
    live_eval_sessions: int = field(default=20, metadata={"help": "Timelines of live_eval_data to play live."})
    live_eval_data: list[str] | None = field(
        default=None, metadata={"help": "Timeline files or folders of held-out dialogues for live evaluation."}
    )
    live_eval_profile: str = field(
        default="phone-135m", metadata={"help": "Device profile of the live evaluation: a built-in name or a YAML."}
    )
    live_eval_call_bias: float = field(
        default=0.0, metadata={"help": "Live evaluation's bias toward calling while the user speaks (0: none)."}
    )
    runtime_batch_size: int | None = field(
        default=None,
        metadata={"help": "Sessions per model forward in live evaluation and rollouts; None: the device's default."},
    )
    on_policy_rounds: int = field(
        default=0, metadata={"help": "On-policy rounds (rollout, labels, more training) after the first; 0: off."}
    )
    on_policy_sessions: int = field(default=100, metadata={"help": "Training tasks each round's rollout plays."})
    on_policy_steps: int | None = field(
        default=None, metadata={"help": "Optimizer steps of each on-policy round; None: max_steps."}
    )
    on_policy_weight: float = field(
        default=0.5, metadata={"help": "Share of each round's examples drawn from the rollouts; the rest teacher's."}
    )
    on_policy_expert: str = field(
        default="speculative", metadata={"help": "Expert strategy that labels the rollouts."}
    )
    on_policy_profile: str = field(
        default="phone-135m", metadata={"help": "Device profile of the rollouts: a built-in name or a YAML."}
    )
    on_policy_takeover: bool = field(
        default=False, metadata={"help": "The expert plays each rollout on from the model's first divergence."}
    )
    on_policy_optimizer: str = field(
        default="continue",
        metadata={"help": "continue: rounds keep the optimizer state; restart: a fresh optimizer each round."},
    )
    cpu_fair_share: bool = field(
        default=True, metadata={"help": "On a CPU, use as many threads as the cores other processes leave."}
    )

    # SFTConfig fields whose defaults differ here.
    packing: bool = field(default=False, metadata={"help": "Must stay False: clocktune's collator packs."})
    remove_unused_columns: bool = field(default=False, metadata={"help": "Must stay False: masks need the columns."})
    # Not a flag: the recipe's push_to_hub, which the Trainer never sees (see push_to_hub above).
    push_output_to_hub: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        # A Trainer with push_to_hub pushes at init, at each checkpoint and at save_model: adapters, and for SFT from
        # an adapter ones that name the raw base. The entry point uploads the final output (clocktune.cli.train_push).
        self.push_output_to_hub, self.push_to_hub = self.push_to_hub, False
        if self.time_codec not in TIME_CODECS:
            raise ValueError(f"time_codec must be one of {TIME_CODECS}, got {self.time_codec!r}")
        if self.model_format is not None and self.model_format not in MODEL_FORMATS:
            raise ValueError(f"model_format must be one of {MODEL_FORMATS} or None, got {self.model_format!r}")
        if self.mask_policy not in MASK_POLICIES:
            raise ValueError(f"mask_policy must be one of {MASK_POLICIES}, got {self.mask_policy!r}")
        if self.attention_window_s is not None and self.attention_window_s <= 0:
            raise ValueError(f"attention_window_s must be positive, got {self.attention_window_s}")
        if self.packing:
            raise ValueError("packing must be False: ClockSFTTrainer packs timelines itself, without splitting them")
        if self.remove_unused_columns:
            raise ValueError("remove_unused_columns must be False: the streaming mask needs the per-token columns")
        if self.max_length is None:
            raise ValueError("max_length must be set: it is the length of the packed rows")
        for name, weight in (self.action_loss_weights or {}).items():
            if name not in ACTION_TYPES[1:]:
                raise ValueError(
                    f"action_loss_weights: unknown action type {name!r}, expected one of {ACTION_TYPES[1:]}"
                )
            if not weight >= 0:
                raise ValueError(f"action_loss_weights: the weight of {name!r} must be at least 0, got {weight}")
        if self.max_timelines is not None and self.max_timelines < 1:
            raise ValueError(f"max_timelines must be at least 1, got {self.max_timelines}")
        self._check_live_eval()
        self._check_on_policy()
        self.dataset_kwargs = {**(self.dataset_kwargs or {}), "skip_prepare_dataset": True}
        if self.bf16 is None and not self.fp16:
            # TRL turns bf16 on by default, which transformers rejects on a machine without a GPU unless `use_cpu`
            # is set; on a CPU it pays only with AMX tiles.
            import torch

            on_accelerator = not self.use_cpu and (torch.cuda.is_available() or torch.backends.mps.is_available())
            self.bf16 = on_accelerator or (self.use_cpu and cpu_has_amx())
        super().__post_init__()
        # Checked after TrainingArguments resolves `gradient_checkpointing` into `activation_checkpointing`.
        if (self.cache_prompt or self.share_prompt) and self.activation_checkpointing:
            raise ValueError(
                "cache_prompt and share_prompt need gradient_checkpointing off: checkpointed layers drop the KV cache"
            )

    def _check_live_eval(self) -> None:
        """Refuses live-evaluation settings that would fail only after the first ``live_eval_steps`` steps."""
        if isinstance(self.live_eval_data, str):
            # A YAML scalar (`live_eval_data: data/eval`) reaches a list field unsplit.
            self.live_eval_data = [self.live_eval_data]
        if self.live_eval_steps < 0:
            raise ValueError(
                f"live_eval_steps must be at least 0 (0 turns live evaluation off), got {self.live_eval_steps}"
            )
        if self.runtime_batch_size is not None and self.runtime_batch_size < 1:
            raise ValueError(f"runtime_batch_size must be at least 1 (or unset), got {self.runtime_batch_size}")
        if self.live_eval_sessions < 1:
            raise ValueError(f"live_eval_sessions must be at least 1, got {self.live_eval_sessions}")
        if self.live_eval_steps == 0:
            return
        if not self.live_eval_data:
            raise ValueError(
                f"live_eval_steps is {self.live_eval_steps} but live_eval_data is not set: live evaluation plays "
                "held-out timelines; pass their files or folders in live_eval_data, or set live_eval_steps to 0"
            )
        from clocktune.runtime.device_profiles import load_device_profile

        try:
            load_device_profile(self.live_eval_profile)
        except ValueError as error:
            raise ValueError(f"live_eval_profile: {error}") from error

    def _check_on_policy(self) -> None:
        """Refuses on-policy settings that would fail only after the first training, when the first round starts."""
        if self.on_policy_rounds < 0:
            raise ValueError(
                f"on_policy_rounds must be at least 0 (0 turns on-policy rounds off), got {self.on_policy_rounds}"
            )
        if self.on_policy_sessions < 1:
            raise ValueError(f"on_policy_sessions must be at least 1, got {self.on_policy_sessions}")
        if self.on_policy_steps is not None and self.on_policy_steps < 1:
            raise ValueError(f"on_policy_steps must be at least 1, or None for max_steps, got {self.on_policy_steps}")
        if not 0 <= self.on_policy_weight <= 1:
            raise ValueError(
                "on_policy_weight is the share of each round's examples drawn from the rollouts and must lie in "
                f"[0, 1], got {self.on_policy_weight}"
            )
        if self.on_policy_optimizer not in ON_POLICY_OPTIMIZERS:
            raise ValueError(
                f"on_policy_optimizer must be one of {ON_POLICY_OPTIMIZERS}, got {self.on_policy_optimizer!r}"
            )
        if not self.on_policy_expert:
            raise ValueError("on_policy_expert must name the expert strategy that labels the rollouts")
        if self.on_policy_rounds == 0:
            return
        from clocktune.runtime.device_profiles import load_device_profile

        try:
            load_device_profile(self.on_policy_profile)
        except ValueError as error:
            raise ValueError(f"on_policy_profile: {error}") from error


def cpu_has_amx() -> bool:
    """Whether this CPU has AMX tiles, on which bf16 mixed precision pays.

    Measured here (docs/benchmarks-history.md, "Training step"): with AMX a bf16 matmul ran 7.1x the float32 rate and the closed-loop
    benchmark's LoRA step of the embedded model 1.43x; on a CPU with AVX-512 BF16 but no AMX the same step was 1.5x *slower* in
    bf16 than in float32. torch names the check privately (``torch.cpu._is_amx_tile_supported``); a torch without it
    counts as no AMX.

    Returns:
        ``True`` when torch reports AMX tile support.
    """
    import torch

    check = getattr(torch.cpu, "_is_amx_tile_supported", None)
    return bool(check is not None and check())
