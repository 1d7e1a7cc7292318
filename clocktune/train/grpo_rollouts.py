"""GRPO's rollouts: each task played in the runtime by the model being trained, and what the trainer learns from.

TRL hands the rollout function each prompt (a task: a training timeline's id) ``num_generations`` times;
:class:`RuntimeRollouts` plays every copy in the runtime at once, on the virtual clock, with the model sampling its
actions (a :class:`~clocktune.runtime.model_policy.ModelPolicy` per session, all of one step's sessions sharing one
:class:`~clocktune.runtime.engine.Engine`, so their forwards are batched). It returns the rendered sessions (the
renderer's ids, loss on the model's actions only) and the reward's inputs, and keeps each rollout's token times and
visibility in :class:`StreamingRows` for the trainer's log-prob pass (``clocktune.train.grpo``). The task screen
(``clocktune.train.task_screen``) plays its groups through the same class.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from clocktune.render import render
from clocktune.runtime.engine import Engine, Forward
from clocktune.runtime.scoring import task_progress as task_progress_of

if TYPE_CHECKING:
    from trl import GRPOTrainer

    from clocktune.render import Rendering
    from clocktune.runtime.policy import PolicyFactory
    from clocktune.timeline.events import Timeline
    from clocktune.tools import BackendFactory
    from clocktune.train.grpo_config import ClockGRPOConfig

__all__ = ["RuntimeRollouts", "StreamingRows", "session_logprobs"]


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
        """The sampling seed of each rollout of a step: the same after a resume, different for every copy.

        Raises:
            ValueError: For a negative step or seed (sampling seeds are non-negative).
        """
        if step < 0 or self.args.seed < 0:
            raise ValueError(f"step {step}, seed {self.args.seed}: rollouts' seeds come from non-negative ones")
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
