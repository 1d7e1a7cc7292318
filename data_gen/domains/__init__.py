"""The domain catalogue: each module defines one ``DOMAIN``; ``DOMAINS`` maps names to them."""

from __future__ import annotations

import copy
import importlib

from clocktune.timeline.events import Timeline
from clocktune.timeline.io import Issue
from data_gen.domains.base import Domain, ToolError

_MODULES = (
    "banking",
    "calendar",
    "customer_support",
    "restaurants",
    "shopping",
    "smart_home",
    "travel",
    "weather_news",
)


def _load() -> dict[str, Domain]:
    domains = {}
    for module in _MODULES:
        try:
            domain = importlib.import_module(f"data_gen.domains.{module}").DOMAIN
        except ModuleNotFoundError as error:
            if error.name != f"data_gen.domains.{module}":
                raise
            continue
        domains[domain.name] = domain
    return domains


DOMAINS: dict[str, Domain] = _load()


def check_ground_truth_state(timeline: Timeline, path: str = "<timeline>", line: int = 0) -> list[Issue]:
    """Replays a timeline's ground-truth calls on its domain's backend and compares the final state.

    Timelines of domains this catalogue does not know (imported data) are left to their own checks.

    Args:
        timeline: The timeline.
        path: File name for the issues.
        line: Line number for the issues.

    Returns:
        One issue when the replayed state differs from ``ground_truth.final_state`` or a call fails; else none.
    """
    domain = DOMAINS.get(timeline.domain)
    if domain is None:
        return []
    state = copy.deepcopy(timeline.initial_state)
    for index, call in enumerate(timeline.ground_truth.calls):
        try:
            domain.execute(state, call.name, call.arguments)
        except (ToolError, KeyError, TypeError) as error:
            return [Issue(path, line, f"ground_truth.calls.{index}", f"replay failed: {error}")]
    if state != timeline.ground_truth.final_state:
        return [Issue(path, line, "ground_truth.final_state", "differs from replaying ground_truth.calls")]
    return []
