"""YAML files read into validated dataclasses, every bad field named by file and key."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import TypeAdapter, ValidationError

T = TypeVar("T")


def load_validated_yaml(path: str | Path, adapter: TypeAdapter[T], what: str) -> T:
    """Reads a YAML file and validates it as ``adapter``'s type.

    Args:
        path: The YAML file; an empty one validates as ``{}``.
        adapter: The pydantic adapter of the dataclass it holds.
        what: What the file is, for the error (``generator config``, ``device profile``).

    Returns:
        The validated value.

    Raises:
        ValueError: Naming ``path:key.subkey`` and the problem for every bad field.
    """
    with open(path, encoding="utf-8") as handle:
        raw = yaml.safe_load(handle) or {}
    try:
        return adapter.validate_python(raw)
    except ValidationError as error:
        lines = [
            f"{path}:{'.'.join(str(part) for part in detail['loc']) or '-'}: {detail['msg']}"
            for detail in error.errors(include_url=False)
        ]
        raise ValueError(f"invalid {what}:\n" + "\n".join(lines)) from None
