"""BFCL function docs as tool schemas: JSON Schema parameters, the side-effect table, positional parameter order."""

from __future__ import annotations

import copy
import inspect
import os
from collections.abc import Sequence
from importlib import resources
from typing import Any

import yaml

from clocktune.timeline.events import ToolSchema
from data_gen.config import GeneratorConfig
from data_gen.importers.bfcl.errors import BfclError
from data_gen.importers.bfcl.wheel import API_CLASSES, api_class, function_docs

__all__ = ["DEFAULT_MEDIAN_S", "DOC_FIXES", "SIDE_EFFECTS", "doc_to_schema", "parameter_names", "tool_schemas"]

DEFAULT_MEDIAN_S = 0.6  # BFCL states no latencies: every tool gets the project's default median
_SIDE_EFFECTS_FILE = "side_effects.yaml"


def _load_side_effects() -> dict[str, dict[str, bool]]:
    # Package data rather than a path next to the module, so that it loads from a wheel or a zip as well.
    text = resources.files(__package__).joinpath(_SIDE_EFFECTS_FILE).read_text(encoding="utf-8")
    table = yaml.safe_load(text)
    if not isinstance(table, dict) or not all(
        isinstance(functions, dict) and all(isinstance(flag, bool) for flag in functions.values())
        for functions in table.values()
    ):
        raise BfclError(f"{_SIDE_EFFECTS_FILE}: expected class -> function -> true/false")
    return table


# Class -> function -> whether it changes its instance's state (True: runs only after a commit).
SIDE_EFFECTS: dict[str, dict[str, bool]] = _load_side_effects()

_TYPE_NAMES = {"dict": "object", "float": "number", "tuple": "array", "list": "array", "int": "integer",
               "str": "string", "bool": "boolean"}  # fmt: skip
_JSON_TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})

# Where BFCL's own ground truth calls a function with an argument type its doc does not allow, the schema takes
# the union, so that the entry imports faithfully instead of being dropped. (class, function, argument) -> schema.
DOC_FIXES: dict[tuple[str, str, str], dict[str, Any]] = {
    # multi_turn_*_173 closes "ticket_001"; the doc says integer; TicketAPI compares ids with ==, so both work.
    ("TicketAPI", "close_ticket", "ticket_id"): {"type": ["integer", "string"]},
}


def _json_schema(spec: Any, where: str) -> dict:
    if not isinstance(spec, dict):
        raise BfclError(f"{where}: expected a parameter spec object, got {type(spec).__name__}")
    schema: dict[str, Any] = {}
    for key, value in spec.items():
        if key == "type":
            if value == "any":
                continue  # JSON Schema says "any type" by leaving the type out
            mapped = _TYPE_NAMES.get(value, value)
            if mapped not in _JSON_TYPES:
                raise BfclError(f"{where}.type: unknown BFCL type {value!r}")
            schema["type"] = mapped
        elif key == "properties":
            schema[key] = {name: _json_schema(sub, f"{where}.{name}") for name, sub in value.items()}
        elif key == "items":
            schema[key] = _json_schema(value, f"{where}.items")
        else:
            schema[key] = copy.deepcopy(value)
    return schema


def doc_to_schema(doc: dict, class_name: str, config: GeneratorConfig | None = None) -> ToolSchema:
    """Converts one BFCL function doc to a tool schema.

    Args:
        doc: The function doc (``name``, ``description``, ``parameters`` with BFCL types).
        class_name: The class that owns the function, for the side-effect table.
        config: Generator config whose ``tools`` sets the latency model (defaults when ``None``).

    Returns:
        The schema, with ``parameters`` in JSON Schema (an object that allows no undocumented argument).

    Raises:
        BfclError: For a malformed doc or a function missing from :data:`SIDE_EFFECTS`.
    """
    name = doc.get("name")
    where = f"{API_CLASSES.get(class_name, ('', class_name))[1]}:{name}"
    if not isinstance(name, str) or not isinstance(doc.get("parameters", {}), dict):
        raise BfclError(f"{where}: a function doc needs a name and a parameters object")
    try:
        side_effect = SIDE_EFFECTS[class_name][name]
    except KeyError:
        raise BfclError(
            f"{where}: {class_name}.{name} is not classified in SIDE_EFFECTS "
            f"(data_gen/importers/bfcl/{_SIDE_EFFECTS_FILE}); add it as read-only (false) or state-changing (true)"
        ) from None
    parameters = _json_schema(doc.get("parameters") or {"type": "dict"}, f"{where}.parameters")
    parameters["type"] = "object"
    parameters.setdefault("properties", {})
    parameters.setdefault("required", [])
    parameters["additionalProperties"] = False
    for (fixed_class, fixed_name, argument), schema in DOC_FIXES.items():
        if (fixed_class, fixed_name) == (class_name, name) and argument in parameters["properties"]:
            parameters["properties"][argument] = {**parameters["properties"][argument], **schema}
    latency = (config or GeneratorConfig()).tools.apply(DEFAULT_MEDIAN_S)
    return ToolSchema(name, str(doc.get("description", "")), parameters, side_effect, latency)


def tool_schemas(
    involved_classes: Sequence[str], config: GeneratorConfig | None = None, bfcl_dir: str | os.PathLike | None = None
) -> list[ToolSchema]:
    """The tools of an entry: every function of its involved classes.

    Args:
        involved_classes: BFCL class names, in the entry's order.
        config: Generator config (latency model).
        bfcl_dir: See :func:`~data_gen.importers.bfcl.wheel.find_bfcl_root`.

    Returns:
        One schema per function name; where two classes share a name the later class's doc wins, as BFCL
        resolves the call to the later class.
    """
    schemas: dict[str, ToolSchema] = {}
    for class_name in involved_classes:
        for doc in function_docs(class_name, bfcl_dir):
            schema = doc_to_schema(doc, class_name, config)
            schemas.pop(schema.name, None)
            schemas[schema.name] = schema
    return list(schemas.values())


def parameter_names(
    involved_classes: Sequence[str], bfcl_dir: str | os.PathLike | None = None
) -> dict[str, list[str]]:
    """Parameter names of each documented function in the order its method declares them.

    Positional arguments of a call string bind in this order, as they do when BFCL evaluates the string. The
    docs mostly list parameters in the same order, but not always (``purchase_insurance``).

    Args:
        involved_classes: BFCL class names; a later class wins a shared function name.
        bfcl_dir: See :func:`~data_gen.importers.bfcl.wheel.find_bfcl_root`.

    Returns:
        Function name -> parameter names.
    """
    names: dict[str, list[str]] = {}
    for class_name in involved_classes:
        cls = api_class(class_name, bfcl_dir)
        for doc in function_docs(class_name, bfcl_dir):
            method = getattr(cls, doc["name"], None)
            if method is None:
                raise BfclError(f"{API_CLASSES[class_name][1]}:{doc['name']}: {class_name} has no such method")
            names[doc["name"]] = [
                parameter.name
                for parameter in list(inspect.signature(method).parameters.values())[1:]  # after self
                if parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD)
            ]
    return names
