"""The tool interface: what the runtime asks of the simulated services that execute a session's calls.

The runtime's executor and the ground-truth checks talk to every backend through :class:`ToolBackend`, so
generated domains, imported benchmarks and users' own services run the same way. The runtime never looks a
backend up by domain: sessions and evaluations receive a :data:`BackendFactory` from the layer that knows the
domains (the generator's ``data_gen.backends.make_backend``, wired in by the CLI). See docs/design.md §6.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from clocktune.timeline.events import Timeline

__all__ = ["BackendFactory", "BrokenCallError", "RemoteTools", "ToolBackend", "ToolError"]


class ToolError(Exception):
    """Raised by a backend for a call it cannot serve (unknown id, no seats left); becomes an error result."""


class BrokenCallError(ToolError):
    """A call a backend cannot run at all (unknown tool, wrong arguments), unlike a refusal the service states.

    Both become error results in a session; replaying ground truth tolerates refusals (they are outcomes, and
    imported benchmarks contain them) but not broken calls.
    """


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


class RemoteTools(Protocol):
    """A backend some of whose tools run elsewhere: a live client's own tools (``clocktune serve``).

    For a tool it answers ``remote(name)`` true for, the executor does not call ``execute``: it sends the call with
    :meth:`request` and waits (up to its timeout) for ``ToolExecutor.answer``; the call's latency is the real one.
    """

    sequential: bool

    def remote(self, name: str) -> bool: ...

    def request(self, call_id: str, version: int, name: str, arguments: dict[str, Any]) -> None: ...

    def execute(self, name: str, arguments: dict[str, Any]) -> Any: ...

    def state(self) -> dict[str, Any]: ...


# backends(timeline) -> a fresh backend in the timeline's initial state, one per session.
BackendFactory = Callable[[Timeline], ToolBackend]
