"""References between calls: an argument ``{"$ref": "c1"}`` or ``{"$ref": "c1.items.0.id"}`` is (part of) call
``c1``'s result, which makes the calls a dependency graph."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any


def ref_target(value: object) -> str | None:
    """Returns the call id a ``{"$ref": "c1.path"}`` value points to, or ``None`` for a literal value."""
    if isinstance(value, dict) and len(value) == 1 and isinstance(value.get("$ref"), str):
        return value["$ref"].split(".", 1)[0]
    return None


def iter_refs(arguments: object) -> Iterator[str]:
    """Yields the call ids referenced anywhere inside an arguments object (repeats included)."""
    target = ref_target(arguments)
    if target is not None:
        yield target
    elif isinstance(arguments, dict):
        for value in arguments.values():
            yield from iter_refs(value)
    elif isinstance(arguments, list):
        for value in arguments:
            yield from iter_refs(value)


def resolve_refs(arguments: Any, result_of: Callable[[str], Any]) -> Any:
    """Replaces each ``{"$ref": "id.path"}`` in ``arguments`` by the value at ``path`` in the result of ``id``.

    Args:
        arguments: Arguments object, possibly nested.
        result_of: Returns the result content of a referenced id.

    Returns:
        The arguments with every reference resolved.

    Raises:
        LookupError: When a path does not exist in the result, naming the reference and the missing part.
    """
    if ref_target(arguments) is not None:
        target, *path = arguments["$ref"].split(".")
        value = result_of(target)
        for part in path:
            try:
                value = value[int(part)] if isinstance(value, list) else value[part]
            except (KeyError, IndexError, TypeError, ValueError):
                raise LookupError(f"{arguments['$ref']!r}: no {part!r} in the result of {target}") from None
        return value
    if isinstance(arguments, dict):
        return {key: resolve_refs(value, result_of) for key, value in arguments.items()}
    if isinstance(arguments, list):
        return [resolve_refs(value, result_of) for value in arguments]
    return arguments
