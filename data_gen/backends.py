"""Tool backends of the generator's domains and of imported benchmarks, and the factory that picks one per timeline.

:func:`make_backend` is the :data:`clocktune.tools.BackendFactory` the CLI hands to sessions and evaluations: the
runtime receives it and never looks domains up itself (docs/design.md §6).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterable
from typing import Any

from clocktune.timeline.events import GroundTruthCall, Timeline
from clocktune.timeline.io import Issue
from clocktune.tools import BackendFactory, BrokenCallError, ToolBackend, ToolError
from data_gen.declarative import UntrustedDomainCodeError, declared_backend
from data_gen.plugins import DomainBackend, DomainPlugin, find_plugin

__all__ = [
    "BFCL_PLUGIN",
    "DomainBackend",
    "RecordingBackend",
    "backend_factory",
    "check_domain_code",
    "check_ground_truth_state",
    "make_backend",
    "serves",
    "session_backends",
]

# Imported BFCL timelines are named "bfcl"; their backends load from the bfcl-eval wheel.
BFCL_DOMAIN = "bfcl"


def _bfcl_backend(timeline: Timeline) -> ToolBackend:
    # Imported lazily: the BFCL classes load from the bfcl-eval wheel, which generated domains never need.
    from data_gen.importers.bfcl.backend import backend_for_timeline

    return backend_for_timeline(timeline)


BFCL_PLUGIN = DomainPlugin(BFCL_DOMAIN, _bfcl_backend, prefix=True)
"""The BFCL importer's plugin (entry point ``bfcl``): import-only, serving ``bfcl`` and ``bfcl-...`` timelines."""


class RecordingBackend:
    """A backend that records every call reaching it: an importer's ground truth, the calls as they ran.

    Args:
        backend: The backend that serves the calls.
    """

    def __init__(self, backend: ToolBackend) -> None:
        self.backend = backend
        self.sequential = backend.sequential
        self.calls: list[GroundTruthCall] = []

    def execute(self, name: str, arguments: dict[str, Any]) -> Any:
        """Records the call, then serves it.

        Args:
            name: The tool.
            arguments: Its resolved arguments.

        Returns:
            What the backend returns (its errors propagate, after the call is recorded).
        """
        self.calls.append(GroundTruthCall(name, copy.deepcopy(arguments)))
        return self.backend.execute(name, arguments)

    def state(self) -> dict[str, Any]:
        """The wrapped backend's state."""
        return self.backend.state()


def backend_factory(timeline: Timeline, trust_domain_code: bool = False) -> BackendFactory | None:
    """The one lookup of a timeline's backend: a registered plugin, else the declarative domain file it names.

    Args:
        timeline: The timeline.
        trust_domain_code: Whether a domain file the timeline names may run its backend module (the user's
            ``--trust-domain-code``); a plugin is installed code and needs no flag.

    Returns:
        The factory, or ``None`` when no plugin serves the domain and the timeline names no usable domain file.

    Raises:
        UntrustedDomainCodeError: When the timeline's domain file has a Python backend and the flag is off.
        ValueError: When the entry point that would serve the domain failed to load, or the domain file it names
            is missing, changed or invalid.
    """
    plugin = find_plugin(timeline.domain)
    if plugin is not None:
        return plugin.backend
    # A declarative domain given with --domain FILE is no plugin: its timelines name the file (path and hash).
    return declared_backend(timeline, trust_domain_code)


def serves(timeline: Timeline | str, trust_domain_code: bool = False) -> bool:
    """Whether :func:`make_backend` has a backend for a timeline (or, given a name, for a registered domain)."""
    try:
        if isinstance(timeline, str):
            return find_plugin(timeline) is not None
        return backend_factory(timeline, trust_domain_code) is not None
    except ValueError:
        return False


def make_backend(timeline: Timeline, trust_domain_code: bool = False) -> ToolBackend:
    """A fresh backend for a timeline, in the timeline's initial state.

    Args:
        timeline: The timeline whose ``domain`` and ``initial_state`` pick and seed the backend.
        trust_domain_code: Whether a domain file the timeline names may run its backend module.

    Returns:
        The backend.

    Raises:
        ValueError: For a domain no backend serves, naming a broken entry point or a declarative domain file that
            is missing or changed (or, for imported BFCL timelines, a missing ``bfcl-eval``); an
            :class:`UntrustedDomainCodeError` for a domain file's code without the flag.
    """
    factory = backend_factory(timeline, trust_domain_code)
    if factory is None:
        raise ValueError(f"timeline {timeline.id!r}: no tool backend for domain {timeline.domain!r}")
    return factory(timeline)


def session_backends(trust_domain_code: bool = False) -> BackendFactory:
    """:func:`make_backend` with the user's trust bound: the factory the CLI hands to sessions and training.

    Args:
        trust_domain_code: The command line's ``--trust-domain-code``.

    Returns:
        ``factory(timeline) -> ToolBackend``.
    """
    return functools.partial(make_backend, trust_domain_code=trust_domain_code)


def check_domain_code(timelines: Iterable[Timeline], trust_domain_code: bool = False) -> None:
    """Refuses, before anything runs, timelines whose domain file would run code the user did not trust.

    A command that plays sessions calls it on its timelines first, so that the refusal is one line up front, not a
    failed session in the middle of a run (and no output folder is stamped). Other backend problems are left to
    the sessions, which report them as they do today.

    Args:
        timelines: The timelines the command will play.
        trust_domain_code: The command line's ``--trust-domain-code``.

    Raises:
        UntrustedDomainCodeError: For the first timeline naming a domain file with a Python backend, without the
            flag; the message names the file, the module and the flag. Nothing is imported.
    """
    seen: set[str] = set()
    for timeline in timelines:
        named = timeline.initial_state.get("domain_file")
        key = f"{timeline.domain}\0{named.get('path') if isinstance(named, dict) else ''}"
        if key in seen:
            continue
        seen.add(key)
        try:
            backend_factory(timeline, trust_domain_code)
        except UntrustedDomainCodeError:
            raise
        except ValueError:
            continue


def _differing_field(state: Any, expected: Any) -> str:
    # Names where two states first differ, descending through keys both sides have ("Class.attribute").
    field = ""
    while isinstance(state, dict) and isinstance(expected, dict):
        key = next((k for k in dict.fromkeys([*state, *expected]) if state.get(k) != expected.get(k)), None)
        if key is None or key not in state or key not in expected:
            break
        field += f".{key}"
        state, expected = state[key], expected[key]
    return field


def check_ground_truth_state(
    timeline: Timeline, path: str = "<timeline>", line: int = 0, trust_domain_code: bool = False
) -> list[Issue]:
    """Replays a timeline's ground-truth calls on a fresh backend and compares the final state.

    Refusals are outcomes (ground truth holds the calls that reached the backend) and do not count; a call the
    backend cannot run at all does. Timelines of domains no backend serves are left alone.

    Args:
        timeline: The timeline.
        path: File name for the issues.
        line: Line number for the issues.
        trust_domain_code: Whether a domain file the timeline names may run its backend module.

    Returns:
        One issue when the backend cannot be built, a call cannot run, or the replay ends in another state than
        ``ground_truth.final_state`` (the field names where they first differ); else none.
    """
    if not serves(timeline, trust_domain_code):
        return []
    try:
        backend = make_backend(timeline, trust_domain_code)
    except ValueError as error:
        return [Issue(path, line, "initial_state", str(error))]
    for index, call in enumerate(timeline.ground_truth.calls):
        try:
            backend.execute(call.name, call.arguments)
        except BrokenCallError as error:
            return [Issue(path, line, f"ground_truth.calls.{index}", f"replay failed: {error}")]
        except ToolError:
            continue
    state, expected = backend.state(), timeline.ground_truth.final_state
    if state != expected:
        field = "ground_truth.final_state" + _differing_field(state, expected)
        return [Issue(path, line, field, "differs from replaying ground_truth.calls")]
    return []
