"""What a dialogue's own seed decides before any agent acts: its domain, tools, initial state and task."""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any

from clocktune.timeline.events import ToolSchema
from data_gen.config import GeneratorConfig
from data_gen.declarative import load_domain_file
from data_gen.domains.base import Domain
from data_gen.no_tool import no_tool
from data_gen.plugins import find_plugin, generatable_domains, plugin_errors
from data_gen.task import Task, TaskContext


def dialogue_seed(seed: int, index: int) -> int:
    """The seed of dialogue ``index`` of a run seeded with ``seed`` (independent of how work is split)."""
    return random.Random(f"{seed}:{index}").getrandbits(48)


def select_domains(config: GeneratorConfig, trust_code: bool = True) -> list[Domain]:
    """The domains a config draws from, in a fixed order: ``domains`` by name, then ``domain_files``.

    Names are looked up among the registered plugins (:mod:`data_gen.plugins`); with neither list, every registered
    generatable domain is drawn from, sorted by name. A domain file may not take a name a registered plugin serves
    (``bfcl-x`` is the BFCL importer's): its timelines would be routed to that plugin's backend.

    Args:
        config: The generator config.
        trust_code: Whether the domain files' backend modules may be imported: true for the user's own config
            (the command line's ``--config`` and ``--domain``), false for one read from data (a dataset's
            ``generation.json``); see :func:`data_gen.declarative.load_domain_file`.

    Raises:
        ValueError: For an unknown domain name (naming the entry points that failed to load), a domain file that
            cannot be used (naming file, line and key), or two domains of one name.
        OSError: When a domain file cannot be read.
    """
    registered = generatable_domains()
    names = config.domains or ([] if config.domain_files else sorted(registered))
    if not registered and not config.domain_files:
        raise ValueError(
            "no domains are registered (entry points of group clocktune.domains): install the project with "
            "`pip install -e .` (make setup)"
        )
    files = [load_domain_file(path, trust_code=trust_code) for path in config.domain_files]
    from_files = {domain.name: domain for domain in files}
    unknown = [name for name in names if name not in registered and name not in from_files]
    if unknown:
        broken = "".join(f"; {message}" for name, message in plugin_errors().items() if name in unknown)
        raise ValueError(f"unknown domain(s) {unknown}; known: {sorted(registered)}{broken}")
    for path, domain in zip(config.domain_files, files, strict=True):
        if domain.name in registered:
            raise ValueError(f"{path}: domain {domain.name!r} is already a registered domain: rename it")
        served_by = find_plugin(domain.name)
        if served_by is not None:
            raise ValueError(
                f"{path}: domain {domain.name!r} would be served by the registered plugin {served_by.name!r} "
                f"(it serves every {served_by.name}-... and {served_by.name}:... domain): rename it"
            )
        if sum(other.name == domain.name for other in files) > 1:
            raise ValueError(f"{path}: domain {domain.name!r} is given twice in domain_files")
    chosen = [registered.get(name) or from_files[name] for name in names]
    return chosen + [domain for domain in files if domain.name not in names]


@dataclass
class DialogueTask:
    """What a dialogue's own seed decides before any agent acts: the domain, its tools, the backend's initial state
    and the task (the user's words, the readings they allow, the gold calls and the answer).

    Args:
        domain: The domain drawn.
        tools: The domain's tools with the config's latency models.
        initial_state: The backend's state before the dialogue (the grammar reads it; nobody may modify it).
        task: What the grammar wrote.
    """

    domain: Domain
    tools: list[ToolSchema]
    initial_state: dict[str, Any]
    task: Task


def dialogue_task(own_seed: int, config: GeneratorConfig, domains: list[Domain] | None = None) -> DialogueTask:
    """Rebuilds a dialogue's domain, initial state and task from its own seed (``Timeline.seed``).

    The draws are those ``data_gen.generate.generate_dialogue`` makes, so an expert can recover the privileged
    task of any generated timeline from its header and the config it was generated with.

    Args:
        own_seed: The dialogue's seed (:func:`dialogue_seed` of the run seed and the index).
        config: Generator config the dialogue was (or will be) generated with.
        domains: Domains to draw from; defaults to :func:`select_domains`.

    Returns:
        The dialogue's task.
    """
    domains = domains or select_domains(config)
    rng = random.Random(f"{own_seed}:task")
    domain = domains[rng.randrange(len(domains))]
    state = domain.initial_state(random.Random(f"{own_seed}:state"))
    context = TaskContext(rng, state, config.planner.threshold, config.planner.early_wrong_rate)
    # A no-tool request names two of the domain's tools; a one-tool declarative domain always gets a task.
    if rng.random() < config.no_tool_rate and len(domain.tools) >= 2:
        task = no_tool(context, domain)
    else:
        grammars, weights = zip(*domain.grammars, strict=True)
        task = rng.choices(grammars, weights)[0](context)
    tools = [replace(tool, latency=config.tools.apply(tool.latency.median_s)) for tool in domain.tools]
    return DialogueTask(domain, tools, state, task)
