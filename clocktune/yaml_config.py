"""Config dataclasses read from YAML and checked by the rules their fields declare, every bad field named.

The rules live on the fields, as pydantic constraints in the annotations (:data:`PositiveFloat`,
:data:`Probability`, ...). The same rules apply both ways a config is made: :func:`load_validated_yaml` validates a
file through the dataclass's ``TypeAdapter`` (errors name ``file:key.subkey``), and a dataclass built in Python
calls :func:`check_fields` from its ``__post_init__`` (errors name ``Class.field``).
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import Field, GetCoreSchemaHandler, TypeAdapter, ValidationError
from pydantic_core import CoreSchema

T = TypeVar("T")

PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
"""A finite number above 0 (rates, scales)."""
NonNegativeFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]
"""A finite number of at least 0 (durations, spreads)."""
Probability = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
"""A probability, in [0, 1]."""
PositiveInt = Annotated[int, Field(ge=1)]
"""A count of at least 1."""


def _message(detail: Any) -> str:
    # A ValueError raised by a __post_init__ (a rule across fields) reads better without pydantic's prefix.
    if detail["type"] == "value_error":
        return str(detail["ctx"]["error"])
    return detail["msg"]


@functools.cache
def _field_adapters(cls: type) -> tuple[tuple[str, TypeAdapter], ...]:
    hints = typing.get_type_hints(cls, include_extras=True)
    return tuple(
        (field.name, TypeAdapter(hints[field.name]))
        for field in dataclasses.fields(cls)
        if typing.get_origin(hints[field.name]) is Annotated
    )


def check_fields(instance: Any) -> None:
    """Checks a config dataclass built in Python against the constraints its field annotations declare.

    Call it from ``__post_init__``. Fields without constraints (nested configs, which check themselves, names,
    choices) are left to the type checker, as Python construction leaves them.

    Args:
        instance: A dataclass instance.

    Raises:
        ValueError: Naming ``Class.field``, the rule and the value, for the first field that breaks its rule.
    """
    for name, adapter in _field_adapters(type(instance)):
        value = getattr(instance, name)
        try:
            adapter.validate_python(value)
        except ValidationError as error:
            message = _message(error.errors(include_url=False)[0])
            raise ValueError(f"{type(instance).__name__}.{name}: {message}, got {value!r}") from None


def every_field_required(schema: CoreSchema, handler: GetCoreSchemaHandler) -> CoreSchema:
    """A dataclass's validation schema with its fields' defaults dropped: a file must give every field.

    For a dataclass whose defaults serve Python callers but must never fill a gap in a file; return it from the
    class's ``__get_pydantic_core_schema__``. Python construction keeps the defaults.

    Args:
        schema: The schema pydantic generates for the dataclass (``handler(source)``).
        handler: The schema handler, to resolve a reference.

    Returns:
        The same schema, every field required.
    """
    resolved = handler.resolve_ref_schema(schema)
    if resolved["type"] != "dataclass":
        raise TypeError(f"every_field_required takes a dataclass's schema, got a {resolved['type']!r} schema")
    for item in resolved["schema"]["fields"]:
        if item["schema"]["type"] == "default":
            item["schema"] = item["schema"]["schema"]
    return schema


def _yaml_problem(error: yaml.YAMLError) -> str:
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None)
    if mark is not None and problem:
        return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
    return " ".join(str(error).split())


def load_validated_yaml(path: str | Path, adapter: TypeAdapter[T], what: str) -> T:
    """Reads a YAML file and validates it as ``adapter``'s type.

    Args:
        path: The YAML file; an empty one validates as ``{}``.
        adapter: The pydantic adapter of the dataclass it holds.
        what: What the file is, for the error (``generator config``, ``device profile``).

    Returns:
        The validated value.

    Raises:
        ValueError: On one line, naming ``path`` when the file is not a YAML mapping, and ``path:key.subkey`` and
            the problem for every bad field.
        OSError: When the file cannot be read (its message names the file).
    """
    try:
        with open(path, encoding="utf-8") as handle:
            raw = yaml.safe_load(handle)
    except yaml.YAMLError as error:
        raise ValueError(f"{path}: not valid YAML ({_yaml_problem(error)})") from None
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not a text file (byte {error.start}: {error.reason})") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: a {what} is a mapping of keys to values, got a {type(raw).__name__}")
    try:
        return adapter.validate_python(raw)
    except ValidationError as error:
        problems = [
            f"{path}:{'.'.join(str(part) for part in detail['loc']) or '-'}: {_message(detail)}"
            for detail in error.errors(include_url=False)
        ]
        raise ValueError(f"invalid {what}: " + "; ".join(problems)) from None
