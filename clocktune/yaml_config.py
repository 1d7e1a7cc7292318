"""Config dataclasses read from YAML and checked by the rules their fields declare, every bad field named.

The rules live on the fields, as pydantic constraints in the annotations (:data:`PositiveFloat`,
:data:`Probability`, ...). The same rules apply both ways a config is made: :func:`load_validated_yaml` validates a
file through the dataclass's ``TypeAdapter`` (errors name ``file:key.subkey``), and a dataclass built in Python
calls :func:`check_fields` from its ``__post_init__`` (errors name ``Class.field``).

Files are read as untrusted data (:class:`StrictLoader`): a regular file of bounded size, no key given twice in a
mapping (YAML parsers keep the last silently), and anchors and aliases expanding to at most
:data:`MAX_YAML_NODES` nodes (a "billion laughs" file of a few hundred bytes otherwise expands to gigabytes as soon
as anything walks the value).
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

from clocktune.data_files import read_data_text

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


# The most nodes a YAML document may expand to, aliases counted each time they are used. The largest file here (a
# declarative domain with its state) has a few thousand; a million is far above any hand-written config.
MAX_YAML_NODES = 1_000_000


class DuplicateKeyError(yaml.MarkedYAMLError):
    """A YAML mapping that gives one key twice."""

    def __init__(self, key: str, mark: yaml.Mark):
        super().__init__(problem=f"duplicate key {key!r}", problem_mark=mark)
        self.key = key


class StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` for untrusted files: no duplicate keys, alias expansion bounded by :data:`MAX_YAML_NODES`.

    ``yaml.compose(text, Loader=StrictLoader)`` and ``yaml.load(text, Loader=StrictLoader)`` both check the bound;
    construction refuses duplicate keys (a merge key ``<<`` may still be overridden, as YAML intends).
    """

    def get_single_node(self) -> yaml.Node | None:
        """The document's node, once its expansion (every alias counted where it is used) is within the bound."""
        node = super().get_single_node()
        if node is not None and _expanded_size(node) > MAX_YAML_NODES:
            raise yaml.YAMLError(f"anchors and aliases expand to more than {MAX_YAML_NODES:,} nodes (an alias bomb?)")
        return node

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict[Any, Any]:
        """A mapping, refusing a key given twice."""
        if isinstance(node, yaml.MappingNode):
            seen: set[tuple[str, str]] = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                    continue
                key = (key_node.tag, key_node.value)
                if key in seen:
                    raise DuplicateKeyError(key_node.value, key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _expanded_size(root: yaml.Node) -> int:
    # Nodes the document expands to, an aliased node counted at every use. An alias is the same Python object as
    # its anchor in the composed graph (a DAG), so sizes are memoised by id: linear in the file, not in the
    # expansion; iterative, so a deeply nested file cannot overflow the stack here. Stops early past the bound.
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes:
            continue
        children = (
            [item for pair in node.value for item in pair]
            if isinstance(node, yaml.MappingNode)
            else (node.value if isinstance(node, yaml.SequenceNode) else [])
        )
        if children_done or not children:
            sizes[id(node)] = min(1 + sum(sizes[id(child)] for child in children), MAX_YAML_NODES + 1)
        else:
            stack.append((node, True))
            stack.extend((child, False) for child in children if id(child) not in sizes)
    return sizes[id(root)]


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
        ValueError: On one line, naming ``path`` when the file is not a YAML mapping, ``path:line:key`` for a key
            given twice, and ``path:key.subkey`` and the problem for every bad field.
        DataFileError: When ``path`` is not a regular file, is over the size cap or is not UTF-8.
        OSError: When the file cannot be read (its message names the file).
    """
    text = read_data_text(path)  # a regular file, bounded, UTF-8 (a DataFileError names the file)
    try:
        raw = yaml.load(text, Loader=StrictLoader)  # noqa: S506 - StrictLoader is a SafeLoader
    except DuplicateKeyError as error:
        raise ValueError(f"{path}:{error.problem_mark.line + 1}:{error.key}: duplicate key") from None
    except yaml.YAMLError as error:
        raise ValueError(f"{path}: not valid YAML ({_yaml_problem(error)})") from None
    except RecursionError:
        raise ValueError(f"{path}: not valid YAML (nested too deep to read)") from None
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
