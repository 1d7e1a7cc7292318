"""Generating a timeline: a dialogue's task played out by its expert in the runtime, on the virtual clock.

The dialogue's seed draws its task (:mod:`data_gen.dialogues`); the user speaks the task's words
(:class:`~clocktune.runtime.speech.SpokenWords`); the expert of the config's ``teacher`` strategy
(:class:`~data_gen.expert.policy.ExpertPolicy`) plays the agent against the domain's backend in a runtime
:class:`~clocktune.runtime.session.Session`. The timeline is the session's log, so it is what the runtime produces:
replayed by its expert in the runtime it comes back with the same events at the same times.
"""

from __future__ import annotations

import copy
from dataclasses import replace

from clocktune.runtime.session import Session, SessionConfig, SessionLog
from clocktune.runtime.speech import SpokenWords
from clocktune.runtime.virtual_clock import run_virtual
from clocktune.timeline.events import GroundTruth, GroundTruthCall, Timeline
from data_gen.config import GeneratorConfig
from data_gen.dialogues import dialogue_seed, dialogue_task
from data_gen.domains.base import Domain
from data_gen.expert.policy import ExpertPolicy
from data_gen.plugins import DomainBackend

__all__ = ["GenerationError", "generate_dialogue"]


class GenerationError(RuntimeError):
    """A task its expert could not play out (a grammar or expert bug), raised with the dialogue and what happened."""


def _ground_truth(session: Session, log: SessionLog, expert: ExpertPolicy) -> GroundTruth:
    # The gold calls as they reached the backend (a call whose input failed never did), in gold order per turn.
    calls = []
    for call_id in expert.gold_call_ids:
        call = session.executor.calls[call_id]
        if call.executed_with is not None:
            calls.append(GroundTruthCall(call.name, call.executed_with))
    return GroundTruth(calls=calls, final_state=log.final_state, facts=list(expert.facts))


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
    expert = ExpertPolicy(
        drawn.task,
        drawn.tools,
        config.teacher,
        threshold=config.planner.threshold,
        ack_rate=config.planner.ack_rate,
        seed=own_seed,
    )
    speech = SpokenWords([turn.words for turn in drawn.task.turns], config.speech, own_seed)
    backend = DomainBackend(drawn.domain, copy.deepcopy(drawn.initial_state))  # the timeline keeps the initial one
    session = Session(header, expert, SessionConfig(device=config.device), backend, speech)
    log = run_virtual(session.run())
    if log.end_reason != "done" or log.notices:
        notices = [event.text for event in log.timeline.events if event.kind == "notice"]
        raise GenerationError(
            f"dialogue {header.id} ({header.domain}/{header.task}): the {config.teacher} expert ended with "
            f"{log.end_reason!r} after {log.notices} notice(s) {notices}"
        )
    return replace(log.timeline, ground_truth=_ground_truth(session, log, expert))
