"""Generating timelines: one dialogue from a seed, and many written to sharded files."""

from __future__ import annotations

import random
from dataclasses import replace

from clocktune.timeline.events import Timeline
from data_gen.config import GeneratorConfig
from data_gen.domains import DOMAINS
from data_gen.domains.base import Domain
from data_gen.no_tool import no_tool
from data_gen.planner import simulate
from data_gen.task import TaskContext


def dialogue_seed(seed: int, index: int) -> int:
    """The seed of dialogue ``index`` of a run seeded with ``seed`` (independent of how work is split)."""
    return random.Random(f"{seed}:{index}").getrandbits(48)


def select_domains(config: GeneratorConfig) -> list[Domain]:
    """The domains a config draws from, in a fixed order.

    Raises:
        ValueError: For an unknown domain name.
    """
    names = config.domains or sorted(DOMAINS)
    unknown = [name for name in names if name not in DOMAINS]
    if unknown:
        raise ValueError(f"unknown domain(s) {unknown}; known: {sorted(DOMAINS)}")
    return [DOMAINS[name] for name in names]


def generate_dialogue(index: int, seed: int, config: GeneratorConfig, domains: list[Domain] | None = None) -> Timeline:
    """Generates dialogue ``index`` of the run seeded with ``seed``; the same arguments give the same timeline.

    Args:
        index: Position of the dialogue in the run.
        seed: Seed of the run.
        config: Generator config (its ``teacher`` picks the agent side).
        domains: Domains to draw from; defaults to :func:`select_domains`.

    Returns:
        The timeline.
    """
    domains = domains or select_domains(config)
    own_seed = dialogue_seed(seed, index)
    rng = random.Random(f"{own_seed}:task")
    domain = domains[rng.randrange(len(domains))]
    state = domain.initial_state(random.Random(f"{own_seed}:state"))
    context = TaskContext(rng, state, config.planner.threshold, config.planner.early_wrong_rate)
    if rng.random() < config.no_tool_rate:
        task = no_tool(context, domain)
    else:
        grammars, weights = zip(*domain.grammars, strict=True)
        task = rng.choices(grammars, weights)[0](context)
    tools = [replace(tool, latency=config.tools.apply(tool.latency.median_s)) for tool in domain.tools]
    events, ground_truth = simulate(domain, tools, task, state, config, own_seed, config.teacher)
    return Timeline(
        id=f"{seed}-{index:07d}",
        domain=domain.name,
        task=task.kind,
        seed=own_seed,
        teacher=config.teacher,
        tools=tools,
        initial_state=state,
        ground_truth=ground_truth,
        events=events,
    )
