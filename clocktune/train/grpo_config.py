"""The configuration of reinforcement learning in the runtime: TRL's ``GRPOConfig`` and what the runtime adds."""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import GRPOConfig

__all__ = ["SCREEN_RULES", "ClockGRPOConfig"]

# Which screened tasks a run keeps (``screen_keep``; ``clocktune.train.task_screen`` says what each keeps).
SCREEN_RULES = ("greedy_failed", "mixed")


@dataclass
class ClockGRPOConfig(GRPOConfig):
    r"""GRPO whose rollouts are sessions played in the runtime (``clocktune.train.grpo``).

    A prompt is a task: a training timeline, named by its id. Its ``num_generations`` rollouts play it in the runtime
    (the same speech and tool latencies: the timeline's), sampled at ``temperature`` by the model being trained,
    batched by the engine. The reward of a rollout is

        success − latency_weight · latency_s − violation_penalty · violations − notice_penalty · notices
            + progress_weight · progress

    each term a reward function of its own (``task_success``, ``first_words_latency``, ``side_effect_violations``,
    ``session_notices``, ``task_progress``), so that TRL logs every component per step (``rewards/<name>/mean``);
    ``reward_weights`` are set from the fields below unless given.

    Parameters:
        latency_weight (`float`, *optional*, defaults to `0.1`):
            λ: reward lost per second from the end of the user's speech to the agent's first words.
        progress_weight (`float`, *optional*, defaults to `0.0`):
            Reward per unit of the task's progress, the share of it got right (``runtime.scoring.task_progress``:
            the ground-truth calls argument by argument, the final state, the facts said; 1 exactly where the rollout
            succeeded). Success alone is all or nothing, so where a task's rollouts all fail their group learns only
            from latency; with this, the one that called the right tool with the right arguments but one is ranked
            above the one that never called, as fine-grained tool-use rewards do (ToolRL, Qian et al. 2025). 0: the
            progress is logged (``rewards/task_progress/mean``) and not rewarded.
        latency_cap_s (`float`, *optional*, defaults to `10.0`):
            The latency charged to a session that never answered.
        violation_penalty (`float`, *optional*, defaults to `1.0`):
            Reward lost per side-effect violation (a call with side effects made on a guess that turned out wrong).
        notice_penalty (`float`, *optional*, defaults to `0.1`):
            Reward lost per notice (an action the runtime refused).
        rollout_profile (`str`, *optional*, defaults to `"phone-135m"`):
            Device profile the virtual clock charges during rollouts (a built-in name or a profile file).
        rollout_call_bias (`float`, *optional*, defaults to `0.0`):
            The policy's bias toward calling while the user speaks, during rollouts and live evaluation.
        rollout_continuation_temperature (`float`, *optional*):
            The rollouts' temperature past each action's first token, the one that names its kind (wait, call,
            modify, commit, say...); unset: ``temperature`` throughout. 0 samples only which action to take, and
            when, and writes each action's content greedily, as live evaluation does: the rollouts of a task then
            differ in their decisions, not in sampled words and arguments.
        rollout_draft (`str`, *optional*, defaults to `"none"`):
            Drafter of the rollouts' speculative decoding (``prompt_lookup``, ``layer_skip``, ``int8``...), toggled by
            the engine's active batch; what is sampled does not depend on it.
        rollout_profile_costs (`str`, *optional*):
            A profile file whose ``speculation`` section prices the drafts (``clocktune profile``); measured at the
            first rollout when unset.
        rollout_turn_limit_s (`float`, *optional*, defaults to `60.0`):
            A rollout's turn ends this many (virtual) seconds after it began, answered or not (``SessionConfig``).
        rollout_max_notices (`int`, *optional*, defaults to `12`):
            A rollout ends after this many notices (``SessionConfig``).
        constrained_decoding (`bool`, *optional*, defaults to `True`):
            Rollouts decode under the grammar of valid actions.
        expert_generations (`int`, *optional*, defaults to `0`):
            Of each task's ``num_generations`` rollouts, how many the expert plays instead of the policy (the
            generator's expert, ``rollout_expert``, rebuilding the task from its timeline's seed): mixed-policy GRPO
            (LUFFY, Yan et al. 2025). The expert's session is scored and rendered like the others and joins its
            group; its action tokens carry loss at ratio 1 (TRL takes the policy's own log-probs as the old ones when
            a rollout gives none), so it weighs as a sample of the policy would: its advantage times the gradient of
            the policy's log-probability of the expert's tokens. Without dividing by the group's spread, an expert
            that completes the task has advantage ``1 - the group's mean success``: it pulls hardest where the
            policy's own samples fail, and barely where they succeed. 0: every rollout is the policy's.
        rollout_expert (`str`, *optional*, defaults to `"speculative"`):
            The expert strategy that plays the expert's rollouts (``data_gen.expert.EXPERT_STRATEGIES``).
        screen_tasks (`int`, *optional*, defaults to `0`):
            Before training, play this many training tasks (drawn by ``seed``) with the starting policy, greedily
            once and as a group of ``num_generations`` samples, and train only on those ``screen_keep`` keeps
            (``clocktune.train.task_screen``; the outcomes go to ``output_dir/task_screen.json``, read back on a
            resume). 0: every training task, unscreened.
        screen_keep (`str`, *optional*, defaults to `"greedy_failed"`):
            ``greedy_failed``: tasks greedy play fails and a sample completes, so that every group pulls the greedy
            policy toward a task it does not do yet. ``mixed``: tasks whose samples both succeed and fail (DAPO's
            dynamic sampling, once before training).
        runtime_batch_size (`int`, *optional*):
            Most sessions in one forward of the rollouts' engine (``None``: every rollout of the step at once).
        live_eval_steps, live_eval_sessions, live_eval_data, live_eval_profile, live_eval_call_bias:
            As in ``ClockSFTConfig``: play held-out dialogues live every so many steps (greedy) and log the figures.
        scale_rewards (`str`, *optional*, defaults to `"none"`):
            TRL's, with another default: advantages are not divided by the group's spread. Where a task's rollouts
            all succeed or all fail, that spread is the latency term's alone, and dividing by it gave a few hundredths
            of a second the weight of success (16 steps at λ = 0.1: live accuracy 0.60 → 0.48 with it, 0.62 without;
            BENCHMARKS.md).
        push_to_hub (`bool`):
            Upload the saved policy when training ends: the merged model in ``output_dir`` and its training record,
            with a model card, to ``hub_model_id`` (``output_dir``'s name when unset; ``hub_private_repo``,
            ``hub_revision`` and ``hub_token`` apply), as ``clocktune push`` does. The entry points upload it
            (``recipes/grpo.py``, through ``clocktune.cli.train_push``); the Trainer sees ``push_to_hub`` off, since
            it would push the LoRA adapters of its checkpoints, which name a base they were not trained on. The
            request is kept in ``push_output_to_hub``.
        mask_truncated_completions (`bool`):
            Refused: a rollout's completion is its session's rendering, which ends where the session ended, not at an
            EOS token, so TRL takes rollouts for truncated (every one, in every run of BENCHMARKS.md) and would
            mask them out of the loss. For the same reason TRL's ``completions/clipped_ratio`` reads 1 and means
            nothing here.
    """

    scale_rewards: str = field(
        default="none",
        metadata={"help": "Advantages divided by the group's (group) or batch's (batch) spread, or not."},
    )
    latency_weight: float = field(default=0.1, metadata={"help": "λ: reward lost per second of latency."})
    progress_weight: float = field(default=0.0, metadata={"help": "Reward per unit of the task's progress (0-1)."})
    latency_cap_s: float = field(default=10.0, metadata={"help": "Latency charged to a session that never answered."})
    violation_penalty: float = field(default=1.0, metadata={"help": "Reward lost per side-effect violation."})
    notice_penalty: float = field(default=0.1, metadata={"help": "Reward lost per notice."})
    rollout_profile: str = field(default="phone-135m", metadata={"help": "Device profile of the rollouts' clock."})
    rollout_call_bias: float = field(default=0.0, metadata={"help": "Call bias of the rollouts and live evaluation."})
    rollout_continuation_temperature: float | None = field(
        default=None, metadata={"help": "Temperature past an action's first token (unset: temperature)."}
    )
    rollout_draft: str = field(default="none", metadata={"help": "Drafter of the rollouts' speculative decoding."})
    rollout_profile_costs: str | None = field(
        default=None, metadata={"help": "A profile file whose speculation section prices the drafts."}
    )
    rollout_turn_limit_s: float = field(default=60.0, metadata={"help": "A rollout's turn limit, seconds."})
    rollout_max_notices: int = field(default=12, metadata={"help": "A rollout ends after this many notices."})
    constrained_decoding: bool = field(default=True, metadata={"help": "Rollouts decode under the action grammar."})
    expert_generations: int = field(
        default=0, metadata={"help": "Of each task's num_generations rollouts, how many the expert plays."}
    )
    rollout_expert: str = field(default="speculative", metadata={"help": "The expert strategy of those rollouts."})
    screen_tasks: int = field(
        default=0,
        metadata={"help": "Training tasks to screen with the start before training (0: none, train on all)."},
    )
    screen_keep: str = field(
        default="greedy_failed",
        metadata={"help": "Screened tasks kept: greedy_failed or mixed.", "choices": list(SCREEN_RULES)},
    )
    runtime_batch_size: int | None = field(default=None, metadata={"help": "Most sessions in one forward."})
    live_eval_steps: int = field(default=0, metadata={"help": "Play held-out dialogues live every this many steps."})
    live_eval_sessions: int = field(default=20, metadata={"help": "Timelines of live_eval_data to play live."})
    live_eval_data: list[str] | None = field(default=None, metadata={"help": "Held-out timeline files or folders."})
    live_eval_profile: str = field(default="phone-135m", metadata={"help": "Device profile of live evaluation."})
    live_eval_call_bias: float = field(default=0.0, metadata={"help": "Call bias of live evaluation."})
    # Not a flag: the recipe's push_to_hub, which the Trainer never sees (see push_to_hub above).
    push_output_to_hub: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        # The fresh LoRA sits on the merged start, so an adapter the Trainer pushed (at init, at each save, at
        # save_model) would name a base it was not trained on: the Trainer never sees the request, the entry point
        # uploads the merged output once it is saved (clocktune.cli.train_push).
        self.push_output_to_hub, self.push_to_hub = self.push_to_hub, False
        if self.mask_truncated_completions:
            raise ValueError(
                "mask_truncated_completions: a rollout's completion ends where its session ended, not at an EOS token, "
                "so TRL takes rollouts for truncated (every one, in every run measured) and would mask them out of "
                "the loss. Leave it off"
            )
        if self.reward_weights is None:
            self.reward_weights = [
                1.0,
                -self.latency_weight,
                -self.violation_penalty,
                -self.notice_penalty,
                self.progress_weight,
            ]
        if isinstance(self.live_eval_data, str):
            self.live_eval_data = [self.live_eval_data]
        super().__post_init__()
        if self.latency_weight < 0 or self.violation_penalty < 0 or self.notice_penalty < 0:
            raise ValueError("latency_weight, violation_penalty and notice_penalty are penalties: give them >= 0")
        if self.progress_weight < 0:
            raise ValueError("progress_weight rewards progress toward the task: give it >= 0")
        if self.rollout_continuation_temperature is not None and self.rollout_continuation_temperature < 0:
            raise ValueError("rollout_continuation_temperature must be >= 0 (0: greedy past an action's first token)")
        if not 0 <= self.expert_generations < self.num_generations:
            raise ValueError(
                f"expert_generations is {self.expert_generations}: give 0 to num_generations - 1 "
                f"({self.num_generations - 1}), so that each task's group holds a rollout of the policy"
            )
        if self.screen_tasks < 0:
            raise ValueError(f"screen_tasks is {self.screen_tasks}: give the number of tasks to screen, or 0")
        if self.screen_keep not in SCREEN_RULES:
            raise ValueError(f"screen_keep is {self.screen_keep!r}: give one of {', '.join(SCREEN_RULES)}")
        if self.live_eval_steps > 0 and not self.live_eval_data:
            raise ValueError("live_eval_steps is set but live_eval_data is empty: name held-out timelines")
