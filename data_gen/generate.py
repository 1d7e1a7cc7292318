"""Generating a timeline: a dialogue's task played out by its expert in the runtime, on the virtual clock.

The dialogue's seed draws its task (:mod:`data_gen.dialogues`); the user speaks the task's words
(:class:`~clocktune.runtime.speech.SpokenWords`); the expert of the config's ``teacher`` strategy
(:class:`~data_gen.expert.policy.ExpertPolicy`) plays the agent against the domain's backend in a runtime
:class:`~clocktune.runtime.session.Session`. The timeline is the session's log, so it is what the runtime produces:
replayed by its expert in the runtime it comes back with the same events at the same times.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from clocktune.runtime.executor import CallState
from clocktune.runtime.session import Session, SessionConfig, SessionLog
from clocktune.runtime.speech import SpokenWords
from clocktune.runtime.virtual_clock import run_virtual
from clocktune.timeline.events import GroundTruth, GroundTruthCall, Timeline, copy_json
from clocktune.tools import ToolBackend
from data_gen.config import GeneratorConfig
from data_gen.dialogues import dialogue_seed, dialogue_task
from data_gen.domains.base import Domain
from data_gen.expert.perturb import PerturbedExpert
from data_gen.expert.policy import ExpertPolicy
from data_gen.plugins import DomainBackend
from data_gen.task import Task

__all__ = ["GenerationError", "PlayedTask", "generate_dialogue", "play_task"]


class GenerationError(RuntimeError):
    """A task its expert could not play out (a grammar or expert bug), raised with the dialogue and what happened."""


@dataclass
class PlayedTask:
    """A task its expert played out in a runtime session.

    Args:
        log: The session's outcome; ``log.timeline`` is the dialogue's timeline, its ground truth still the
            header's.
        calls: The executor's calls, as they ran (``CallState.executed_with``).
        expert: The expert, with its record of each answered turn's gold calls and the last answer's facts.
        context_only: Ids of the logged agent events that were the perturbation's wrong actions (``config.perturb``).
    """

    log: SessionLog
    calls: dict[str, CallState]
    expert: ExpertPolicy
    context_only: list[str]


def play_task(
    header: Timeline, task: Task, backend: ToolBackend, config: GeneratorConfig, program_order: bool = False
) -> PlayedTask:
    """Plays a task out with the expert of the config's ``teacher`` strategy in a session on the virtual clock.

    A share ``config.perturb.dialogues`` of dialogues (drawn from the header's seed) is played by the expert under a
    :class:`~data_gen.expert.perturb.PerturbedExpert`: some of its actions are replaced with wrong ones, which it
    then puts right.

    Args:
        header: The timeline's header (id, domain, task, seed, teacher, tools, initial state); no events.
        task: The task: the words the user speaks, the readings, the gold calls and the answer.
        backend: The session's backend, in the header's initial state.
        config: Generator config (speech, device, the expert's threshold and acknowledgement rate, the noise).
        program_order: Whether the task's calls must run in the order listed (BFCL; ``ExpertPolicy``).

    Returns:
        The played task.

    Raises:
        GenerationError: When the expert does not finish the task cleanly (a notice, a timeout, giving up).
    """
    expert = ExpertPolicy(
        task,
        header.tools,
        config.teacher,
        threshold=config.planner.threshold,
        ack_rate=config.planner.ack_rate,
        seed=header.seed,
        program_order=program_order,
    )
    policy: ExpertPolicy | PerturbedExpert = expert
    perturb = config.perturb
    if perturb.dialogues > 0:
        rng = random.Random(f"{header.seed}:perturb")  # its own stream: the task and the speech draw the same
        if rng.random() < perturb.dialogues:
            policy = PerturbedExpert(expert, header, tuple(perturb.kinds), rng, perturb.budget, perturb.rate)
    speech = SpokenWords([turn.words for turn in task.turns], config.speech, header.seed)
    session = Session(header, policy, SessionConfig(device=config.device), backend, speech)
    log = run_virtual(session.run())
    perturbed = isinstance(policy, PerturbedExpert)
    # A wrong action may earn a notice (a wait with nothing pending: "act now"); the expert's own actions never may.
    expert_notices = policy.expert_notices if perturbed else log.notices
    if log.end_reason != "done" or expert_notices:
        notices = [event.text for event in log.timeline.events if event.kind == "notice"]
        raise GenerationError(
            f"dialogue {header.id} ({header.domain}/{header.task}): the {config.teacher} expert ended with "
            f"{log.end_reason!r} after {log.notices} notice(s) {notices}"
        )
    return PlayedTask(log, session.executor.calls, expert, list(policy.own_event_ids) if perturbed else [])


def generate_dialogue(index: int, seed: int, config: GeneratorConfig, domains: list[Domain] | None = None) -> Timeline:
    """Generates dialogue ``index`` of the run seeded with ``seed``; the same arguments give the same timeline.

    Args:
        index: Position of the dialogue in the run.
        seed: Seed of the run.
        config: Generator config (its ``teacher`` is the expert's strategy, its ``device`` what the clock charges).
        domains: Domains to draw from; defaults to :func:`~data_gen.dialogues.select_domains`.

    Returns:
        The timeline.

    Raises:
        GenerationError: When the expert does not finish the task cleanly (a notice, a timeout, giving up).
    """
    own_seed = dialogue_seed(seed, index)
    drawn = dialogue_task(own_seed, config, domains)
    header = Timeline(
        id=f"{seed}-{index:07d}",
        domain=drawn.domain.name,
        task=drawn.task.kind,
        seed=own_seed,
        teacher=config.teacher,
        tools=drawn.tools,
        initial_state=drawn.initial_state,
        ground_truth=GroundTruth(),
        events=[],
    )
    backend = DomainBackend(drawn.domain, copy_json(drawn.initial_state))  # the timeline keeps the initial one
    played = play_task(header, drawn.task, backend, config)
    # The gold calls as they reached the backend (a call whose input failed never did), in gold order per turn.
    calls = []
    for call_id in played.expert.gold_call_ids:
        call = played.calls[call_id]
        if call.executed_with is not None:
            calls.append(GroundTruthCall(call.name, call.executed_with))
    ground_truth = GroundTruth(calls=calls, final_state=played.log.final_state, facts=list(played.expert.facts))
    return replace(played.log.timeline, ground_truth=ground_truth, context_only=played.context_only)
