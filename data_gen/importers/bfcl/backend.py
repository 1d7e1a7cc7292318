"""BFCL's simulated API classes as the backend of one session, and their state and results as JSON."""

from __future__ import annotations

import copy
import datetime
import decimal
import inspect
import json
import math
import os
import types
from collections.abc import Mapping, Sequence
from typing import Any

from clocktune.timeline.events import Timeline
from data_gen.domains.base import BrokenCallError, ToolError
from data_gen.importers.bfcl.errors import BfclError
from data_gen.importers.bfcl.wheel import api_class

__all__ = ["STATELESS_CLASSES", "BfclBackend", "BfclCallError", "backend_for_timeline", "to_json"]

STATELESS_CLASSES = frozenset({"MathAPI"})  # BFCL loads no scenario into these

# Attributes left out of the state: back-references, which BFCL's own equality ignores too
# (Directory.__eq__ compares name and contents) and which would make the state cyclic.
_BACK_REFERENCES: dict[str, frozenset[str]] = {"Directory": frozenset({"parent"})}


class BfclCallError(BrokenCallError):
    """A call BFCL cannot run at all (unknown function, wrong arguments, an exception inside the class).

    Unlike a plain :class:`ToolError` (a refusal the service states as ``{"error": ...}``, which BFCL's ground
    truth sometimes contains), this means the call itself is broken.
    """


def to_json(value: Any) -> Any:
    """Converts a BFCL value (results, instance attributes) to JSON-compatible data, deterministically.

    Dicts keep their order with keys as strings, tuples become lists, sets sorted lists, dates ISO strings,
    non-finite floats strings, objects the dict of their public attributes (back-references left out), and
    anything else its ``str``.

    Args:
        value: Any value.

    Returns:
        The JSON-compatible value.
    """
    return _to_json(value, ())


def _to_json(value: Any, ancestors: tuple[int, ...]) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if id(value) in ancestors:
        return f"<cycle {type(value).__name__}>"
    inner = ancestors + (id(value),)
    if isinstance(value, dict):
        return {key if isinstance(key, str) else str(key): _to_json(item, inner) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_json(item, inner) for item in value]
    if isinstance(value, (set, frozenset)):
        return sorted((_to_json(item, inner) for item in value), key=lambda item: json.dumps(item, sort_keys=True))
    if hasattr(value, "__dict__") and not isinstance(value, (type, types.ModuleType)) and not callable(value):
        skip = _BACK_REFERENCES.get(type(value).__name__, frozenset())
        return {
            key: _to_json(item, inner)
            for key, item in vars(value).items()
            if not key.startswith("_") and key not in skip
        }
    return str(value)


class BfclBackend:
    """BFCL's simulated services for one session, behind the project's ``ToolBackend`` protocol.

    Instances are created and loaded as BFCL's ``execute_multi_turn_func_call`` does: one instance per involved
    class, ``_load_scenario(deepcopy(initial_config[class]), long_context=...)`` for stateful classes, and each
    public method name resolved to the class that owns it (the later class when two share a name).

    Args:
        involved_classes: BFCL class names.
        initial_config: The entry's ``initial_config`` (scenario per class).
        long_context: Load the long-context variant of the scenarios (``multi_turn_long_context``).
        bfcl_dir: See :func:`~data_gen.importers.bfcl.wheel.find_bfcl_root`.
    """

    # Reads depend on earlier writes (``ls`` after ``cd``): the runtime's executor keeps program order.
    sequential = True

    def __init__(
        self,
        involved_classes: Sequence[str],
        initial_config: Mapping[str, Any],
        long_context: bool = False,
        bfcl_dir: str | os.PathLike | None = None,
    ):
        self.involved_classes = list(involved_classes)
        self._instances: dict[str, Any] = {}
        self._methods: dict[str, Any] = {}
        for class_name in self.involved_classes:
            instance = api_class(class_name, bfcl_dir)()
            if class_name not in STATELESS_CLASSES:
                # A scenario keeps references into its config: a private copy keeps the caller's config intact.
                scenario = copy.deepcopy(dict(initial_config).get(class_name, {}))
                try:
                    instance._load_scenario(scenario, long_context=long_context)
                except Exception as error:  # a malformed scenario: BFCL's loaders index into it freely
                    raise BfclError(
                        f"initial_config.{class_name}: cannot load the scenario ({type(error).__name__}: {error})"
                    ) from error
            self._instances[class_name] = instance
            for name, method in inspect.getmembers(instance, predicate=inspect.ismethod):
                if not name.startswith("_"):
                    self._methods[name] = method

    def execute(self, name: str, arguments: dict[str, Any]) -> Any:
        """Runs one call.

        Args:
            name: Function name.
            arguments: Resolved arguments (copied: BFCL classes store argument lists in their state).

        Returns:
            The JSON-compatible result; ``{}`` for functions that return nothing.

        Raises:
            ToolError: When the service answers ``{"error": ...}``.
            BfclCallError: For an unknown function, arguments it does not take, or an exception inside it.
        """
        method = self._methods.get(name)
        if method is None:
            raise BfclCallError(f"{name}: no such function in {', '.join(self.involved_classes)}")
        try:
            result = method(**copy.deepcopy(arguments))
        except Exception as error:  # whatever the class raises (TypeError for wrong arguments too): a broken call
            raise BfclCallError(f"{name}: {type(error).__name__}: {error}") from error
        if isinstance(result, dict) and "error" in result:
            raise ToolError(str(result["error"]))
        return {} if result is None else to_json(result)

    def state(self) -> dict[str, Any]:
        """Each instance's public attributes, what BFCL's multi-turn state checker compares.

        Returns:
            ``{class name: {attribute: JSON value}}`` in the order of ``involved_classes``.
        """
        return {
            class_name: {key: to_json(value) for key, value in vars(instance).items() if not key.startswith("_")}
            for class_name, instance in self._instances.items()
        }


def _initial_state(timeline: Timeline) -> tuple[list[str], dict, bool]:
    state = timeline.initial_state
    classes, config, long_context = (
        state.get("involved_classes"),
        state.get("initial_config"),
        state.get("long_context", False),
    )
    if not isinstance(classes, list) or not all(isinstance(name, str) for name in classes):
        raise BfclError(f"timeline {timeline.id!r}: initial_state.involved_classes must be a list of class names")
    if not isinstance(config, dict):
        raise BfclError(f"timeline {timeline.id!r}: initial_state.initial_config must be an object")
    if not isinstance(long_context, bool):
        raise BfclError(f"timeline {timeline.id!r}: initial_state.long_context must be true or false")
    return classes, config, long_context


def backend_for_timeline(timeline: Timeline, bfcl_dir: str | os.PathLike | None = None) -> BfclBackend:
    """A fresh backend in the initial state of an imported BFCL timeline.

    Args:
        timeline: A timeline whose ``initial_state`` holds ``involved_classes``, ``initial_config`` and
            ``long_context``.
        bfcl_dir: See :func:`~data_gen.importers.bfcl.wheel.find_bfcl_root`.

    Returns:
        The backend.

    Raises:
        BfclError: For a malformed initial state or a missing wheel.
    """
    classes, config, long_context = _initial_state(timeline)
    return BfclBackend(classes, config, long_context, bfcl_dir)
