"""The shape every domain has: tools, a stateful simulated backend, and task grammars."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from clocktune.timeline.events import LatencyModel, ToolSchema
from clocktune.tools import BrokenCallError, ToolError
from data_gen.task import Task, TaskContext

# The tool interface lives in the library; domains raise its errors, imported here by every domain module.
__all__ = ["BrokenCallError", "Domain", "Grammar", "ToolError", "tool"]

Grammar = Callable[[TaskContext], Task]


@dataclass
class Domain:
    """A domain: its tool catalogue, backend and grammars.

    Args:
        name: Domain name (``"travel"``).
        tools: Tool schemas; read-only tools have ``side_effect=False``.
        initial_state: Draws a fresh backend state (JSON-compatible dict) from a random generator.
        execute: Runs one call against a state, mutating it for state-changing tools, and returns the result
            content (a JSON-compatible dict); raises :class:`ToolError` when the call cannot be served.
        grammars: Task grammars with their relative weights.
    """

    name: str
    tools: list[ToolSchema]
    initial_state: Callable[[random.Random], dict[str, Any]]
    execute: Callable[[dict[str, Any], str, dict[str, Any]], dict[str, Any]]
    grammars: list[tuple[Grammar, float]]

    def tool(self, name: str) -> ToolSchema:
        """Returns the schema of tool ``name``."""
        for tool in self.tools:
            if tool.name == name:
                return tool
        raise KeyError(f"domain {self.name!r} has no tool {name!r}")


def tool(
    name: str,
    description: str,
    properties: dict[str, dict],
    required: list[str] | None = None,
    side_effect: bool = False,
    latency_s: float = 0.6,
) -> ToolSchema:
    """Builds a tool schema with an object-typed JSON Schema for its arguments.

    Args:
        name: Function name.
        description: One sentence for the model.
        properties: JSON Schema of each argument.
        required: Required argument names; defaults to all of ``properties``.
        side_effect: True for state-changing tools.
        latency_s: Median latency of the tool.

    Returns:
        The tool schema.
    """
    parameters = {
        "type": "object",
        "properties": properties,
        "required": list(properties) if required is None else required,
        "additionalProperties": False,
    }
    return ToolSchema(name, description, parameters, side_effect, LatencyModel(median_s=latency_s))
