"""Tool backends of the generator's domains and of imported benchmarks, and the factory that picks one per timeline.

:func:`make_backend` is the :data:`clocktune.tools.BackendFactory` the CLI hands to sessions and evaluations: the
runtime receives it and never looks domains up itself (docs/design.md §6).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from clocktune.timeline.events import Timeline
from clocktune.timeline.io import Issue
from clocktune.tools import BrokenCallError, ToolBackend, ToolError
from data_gen.domains import DOMAINS
from data_gen.domains.base import Domain

__all__ = ["DomainBackend", "check_ground_truth_state", "make_backend", "serves"]

# Imported BFCL timelines are named "bfcl"; their backends load from the bfcl-eval wheel.
BFCL_DOMAIN = "bfcl"


@dataclass
class DomainBackend:
    """The backend of a generated domain: its ``execute`` function over a private copy of the state.

    Args:
        domain: The domain.
        current: The state calls read and mutate (copied from the timeline by :func:`make_backend`).
    """

    domain: Domain
    current: dict[str, Any]
    # Generated domains pass data between calls through ``$ref`` inputs, never through state.
    sequential = False

    def execute(self, name: str, arguments: dict[str, Any]) -> Any:
        """Runs one call; raises :class:`ToolError` when the backend refuses it, :class:`BrokenCallError` when
        it cannot run it."""
        if not any(tool.name == name for tool in self.domain.tools):
            raise BrokenCallError(f"unknown tool {name!r}")
        try:
            return self.domain.execute(self.current, name, arguments)
        except (KeyError, TypeError) as error:
            raise BrokenCallError(f"{name}: bad arguments ({error})") from error

    def state(self) -> dict[str, Any]:
        """The current state."""
        return self.current


def serves(domain: str) -> bool:
    """Whether :func:`make_backend` has a backend for timelines of ``domain``."""
    return domain in DOMAINS or domain.startswith(BFCL_DOMAIN)


def make_backend(timeline: Timeline) -> ToolBackend:
    """A fresh backend for a timeline, in the timeline's initial state.

    Args:
        timeline: The timeline whose ``domain`` and ``initial_state`` pick and seed the backend.

    Returns:
        The backend.

    Raises:
        ValueError: For a domain no backend serves (or, for imported BFCL timelines, a missing ``bfcl-eval``).
    """
    if timeline.domain in DOMAINS:
        return DomainBackend(DOMAINS[timeline.domain], copy.deepcopy(timeline.initial_state))
    if timeline.domain.startswith(BFCL_DOMAIN):
        # Imported lazily: the BFCL classes load from the bfcl-eval wheel, which generated domains never need.
        from data_gen.importers.bfcl import backend_for_timeline

        return backend_for_timeline(timeline)
    raise ValueError(f"timeline {timeline.id!r}: no tool backend for domain {timeline.domain!r}")


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


def check_ground_truth_state(timeline: Timeline, path: str = "<timeline>", line: int = 0) -> list[Issue]:
    """Replays a timeline's ground-truth calls on a fresh backend and compares the final state.

    Refusals are outcomes (ground truth holds the calls that reached the backend) and do not count; a call the
    backend cannot run at all does. Timelines of domains no backend serves are left alone.

    Args:
        timeline: The timeline.
        path: File name for the issues.
        line: Line number for the issues.

    Returns:
        One issue when the backend cannot be built, a call cannot run, or the replay ends in another state than
        ``ground_truth.final_state`` (the field names where they first differ); else none.
    """
    if not serves(timeline.domain):
        return []
    try:
        backend = make_backend(timeline)
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
