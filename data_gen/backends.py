"""Tool backends: the stateful simulated services that execute a timeline's calls, one instance per session.

The runtime's executor and the ground-truth checks talk to every backend through :class:`ToolBackend`, so
generated domains and imported benchmarks run the same way.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Protocol

from clocktune.timeline.events import Timeline
from data_gen.domains import DOMAINS
from data_gen.domains.base import Domain, ToolError

__all__ = ["DomainBackend", "ToolBackend", "ToolError", "make_backend"]


class ToolBackend(Protocol):
    """A session's simulated services.

    ``execute`` runs one call with resolved arguments and returns its JSON-compatible result, raising
    :class:`ToolError` for a call the service refuses; ``state`` returns the JSON-compatible state that ground
    truth's ``final_state`` is compared with. ``sequential`` says whether reads depend on earlier writes (a file
    system's ``ls`` after ``cd``): the runtime then runs calls in the order they were issued.
    """

    sequential: bool

    def execute(self, name: str, arguments: dict[str, Any]) -> Any: ...

    def state(self) -> dict[str, Any]: ...


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
        """Runs one call; raises :class:`ToolError` when the backend refuses it."""
        try:
            return self.domain.execute(self.current, name, arguments)
        except (KeyError, TypeError) as error:
            raise ToolError(f"{name}: bad arguments ({error})") from error

    def state(self) -> dict[str, Any]:
        """The current state."""
        return self.current


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
    if timeline.domain.startswith("bfcl"):
        # Imported lazily: the BFCL classes load from the bfcl-eval wheel, which generated domains never need.
        from data_gen.importers.bfcl import backend_for_timeline

        return backend_for_timeline(timeline)
    raise ValueError(f"timeline {timeline.id!r}: no tool backend for domain {timeline.domain!r}")
