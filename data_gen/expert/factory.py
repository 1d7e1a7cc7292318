"""Building experts for generated timelines: the task is rebuilt from the timeline's seed, never read off its events."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import TypeAdapter, ValidationError

from clocktune.data_files import read_data_text
from clocktune.runtime.policy import PolicyFactory
from clocktune.runtime.speech import utterances
from clocktune.timeline.events import Timeline
from data_gen.config import GeneratorConfig
from data_gen.dialogues import dialogue_task, select_domains
from data_gen.domains.base import Domain
from data_gen.expert.policy import EXPERT_STRATEGIES, ExpertPolicy
from data_gen.task import Task

__all__ = ["expert_factory", "generator_config_of", "spoken_words"]

_CONFIG = TypeAdapter(GeneratorConfig)


def spoken_words(timeline: Timeline) -> list[list[str]]:
    """The words of each utterance of a timeline, as the recogniser finally had them (revised partials replaced).

    Args:
        timeline: A generated timeline or a session log.

    Returns:
        One list of words per utterance.
    """
    turns, _ = utterances(timeline)
    spoken = []
    for chunks in turns:
        texts: dict[str, str] = {}
        for chunk in chunks:
            if chunk.revises is not None:
                texts.pop(chunk.revises, None)
            texts[chunk.id] = chunk.text or ""
        spoken.append(" ".join(texts.values()).split())
    return spoken


def _check(timeline: Timeline, task: Task, domain: str) -> None:
    # A config other than the one the timeline was generated with rebuilds another task: refuse it here rather than
    # let an expert pursue calls the user never asked for.
    words = [turn.words for turn in task.turns]
    if domain != timeline.domain or task.kind != timeline.task or words != spoken_words(timeline):
        raise ValueError(
            f"timeline {timeline.id!r}: its seed rebuilds a {domain}/{task.kind} task with other words than the "
            f"timeline's {timeline.domain}/{timeline.task} dialogue; pass the generator config it was made with"
        )


def expert_factory(
    strategy: str, config: GeneratorConfig | None = None, domains: list[Domain] | None = None
) -> PolicyFactory:
    """A factory of experts for generated timelines (``run_policy``, ``compare_policies``, rollouts).

    Args:
        strategy: One of :data:`~data_gen.expert.policy.EXPERT_STRATEGIES`.
        config: The generator config the timelines were generated with (default: the defaults); its planner's
            threshold and acknowledgement rate shape the ``speculative`` expert.
        domains: Domains to rebuild tasks from; defaults to ``select_domains(config)``, looked up once, without
            importing any domain file's backend code: an expert rebuilds tasks (data), never calls a backend, and
            the config may come from a dataset (:func:`experts_of_data`).

    Returns:
        ``factory(timeline) -> ExpertPolicy``; the factory raises ``ValueError`` for a timeline whose seed does not
        rebuild its dialogue under ``config`` (an imported or differently configured one).

    Raises:
        ValueError: For an unknown strategy.
    """
    if strategy not in EXPERT_STRATEGIES:
        raise ValueError(f"unknown expert strategy {strategy!r}; choose from {EXPERT_STRATEGIES}")
    config = config or GeneratorConfig()
    domains = domains or select_domains(config, trust_code=False)

    def build(timeline: Timeline) -> ExpertPolicy:
        drawn = dialogue_task(timeline.seed, config, domains)
        _check(timeline, drawn.task, drawn.domain.name)
        return ExpertPolicy(
            drawn.task,
            timeline.tools,
            strategy,
            threshold=config.planner.threshold,
            ack_rate=config.planner.ack_rate,
            seed=timeline.seed,
        )

    return build


def generator_config_of(data_dir: str | Path) -> GeneratorConfig:
    """The generator config a data folder was generated with (its ``generation.json``), to rebuild its tasks.

    Args:
        data_dir: A folder written by ``clocktune-datagen generate``.

    Returns:
        The config.

    Raises:
        FileNotFoundError: When the folder has no ``generation.json`` (imported data: no task to rebuild).
        ValueError: When its ``config`` is not a generator config (naming the file and field).
    """
    path = Path(data_dir) / "generation.json"
    if not path.is_file():
        parent = Path(data_dir).parent
        hint = f"; name the generated folder above it, {parent}" if (parent / "generation.json").is_file() else ""
        raise FileNotFoundError(
            f"{path}: not found; an expert rebuilds tasks from the generator config of generated data "
            f"(imported BFCL or chat data have no task to rebuild){hint}"
        )
    try:
        return _CONFIG.validate_python(json.loads(read_data_text(path))["config"])
    except (KeyError, TypeError, json.JSONDecodeError, ValidationError) as error:
        raise ValueError(f"{path}: config: not a generator config ({error})") from None


def experts_of_data(strategy: str, data_dir: str | Path) -> PolicyFactory:
    """The experts that label on-policy rollouts of a folder of generated timelines (``train(experts=...)``).

    Args:
        strategy: One of :data:`~data_gen.expert.policy.EXPERT_STRATEGIES` (``on_policy_expert``).
        data_dir: A folder written by ``clocktune-datagen generate`` (holding its ``generation.json``).

    Returns:
        ``factory(timeline) -> expert``.

    Raises:
        FileNotFoundError: When the folder has no ``generation.json``.
        ValueError: As :func:`generator_config_of` and :func:`expert_factory`.
    """
    return expert_factory(strategy, generator_config_of(data_dir))
