"""The declarative domain file format: pydantic dataclasses, and the checks across fields, with file:line:key errors.

The format itself is described in the package docstring (``data_gen/declarative/__init__.py``). Types and unknown
keys are checked by pydantic through :func:`clocktune.yaml_config.load_validated_yaml`; what a type cannot say (a
call to an unknown tool, a ``$ref`` to an unknown call, a bad JSON Schema, a placeholder naming nothing) is checked
by :func:`check_spec`. Every message names the file, the line where the YAML parser found the key, and the key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import jsonschema
import yaml
from pydantic import ConfigDict, Field, TypeAdapter

from clocktune.data_files import read_data_text
from clocktune.yaml_config import PositiveFloat, Probability, StrictLoader, load_validated_yaml

__all__ = ["DomainFileError", "DomainSpec", "PLACEHOLDER", "load_spec", "refs_in"]

_STRICT = ConfigDict(extra="forbid")
Name = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.-]*$")]
Scalar = str | int | float | bool
# "{slot}", "{call.path.0}"; "{{" and "}}" are literal braces.
PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([A-Za-z_][\w.-]*)\}")


class DomainFileError(ValueError):
    """A declarative domain file that cannot be used; the message names ``file:line:key`` of every problem."""


@dataclass
class FunctionSpec:
    """A function in the OpenAI format: ``{"name", "description", "parameters"}``."""

    __pydantic_config__ = _STRICT

    name: Name
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})


@dataclass
class ToolSpec:
    """A tool: ``{"type": "function", "function": {...}}`` or the bare function's keys, plus how it behaves."""

    __pydantic_config__ = _STRICT

    type: Literal["function"] | None = None
    function: FunctionSpec | None = None
    name: Name | None = None
    description: str | None = None
    parameters: dict[str, Any] | None = None
    side_effect: bool = False
    latency_s: PositiveFloat = 0.6

    def spec(self) -> FunctionSpec:
        """The function, whichever form the file used (checked by :func:`check_spec`)."""
        if self.function is not None:
            return self.function
        parameters = self.parameters if self.parameters is not None else {"type": "object", "properties": {}}
        return FunctionSpec(self.name or "", self.description or "", parameters)


@dataclass
class CallOverride:
    """A call of the turn with some arguments replaced: what a reading guesses before the words settle them."""

    __pydantic_config__ = _STRICT

    call: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass
class ReadingSpec:
    """What the words so far make likely: calls of the turn (by key, or with guessed arguments) and a confidence."""

    __pydantic_config__ = _STRICT

    calls: list[str | CallOverride]
    confidence: Annotated[float, Field(gt=0, le=1)] | Literal["confident", "unsure", "guess"] = "confident"


@dataclass
class PhraseSpec:
    """Words of the utterance (one of the alternatives, drawn per dialogue), and the reading they lead to."""

    __pydantic_config__ = _STRICT

    say: str | list[str]
    reading: ReadingSpec | None = None


@dataclass
class CallSpec:
    """One call the user wants: a tool and its arguments (placeholders for slots, ``{"$ref": ...}`` for results)."""

    __pydantic_config__ = _STRICT

    tool: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass
class AnswerSpec:
    """The final answer of a turn, and the facts it must contain (placeholders for slots and results)."""

    __pydantic_config__ = _STRICT

    text: str
    facts: list[str] = field(default_factory=list)


@dataclass
class TurnSpec:
    """One user utterance, the calls it asks for (the gold reading at its end) and the answer."""

    __pydantic_config__ = _STRICT

    utterance: Annotated[list[PhraseSpec], Field(min_length=1)]
    answer: AnswerSpec
    calls: dict[Name, CallSpec] = field(default_factory=dict)
    tail: Probability = 0.6


@dataclass
class TaskSpec:
    """A task template: slots with the values each can take, and its turns."""

    __pydantic_config__ = _STRICT

    name: Name
    turns: Annotated[list[TurnSpec], Field(min_length=1)]
    weight: PositiveFloat = 1.0
    slots: dict[Name, Annotated[list[Scalar], Field(min_length=1)]] = field(default_factory=dict)


@dataclass
class ResponseSpec:
    """A recorded response: a call with these exact arguments gets this result (or this refusal)."""

    __pydantic_config__ = _STRICT

    tool: str
    arguments: dict[str, Any] = field(default_factory=dict)
    result: Any = None
    error: str | None = None


@dataclass
class BackendSpec:
    """The backend: a Python callable ``module:function`` or a table of recorded responses."""

    __pydantic_config__ = _STRICT

    # Dotted names only: no relative ("..evil") or empty parts. Where the module may live: data_gen.declarative.
    execute: Annotated[str, Field(pattern=r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")] | None = (
        None
    )
    responses: list[ResponseSpec] | None = None


@dataclass
class DomainSpec:
    """A whole declarative domain file."""

    __pydantic_config__ = _STRICT

    name: Name
    tools: Annotated[list[ToolSpec], Field(min_length=1)]
    backend: BackendSpec
    tasks: Annotated[list[TaskSpec], Field(min_length=1)]
    description: str = ""
    state: dict[str, Any] = field(default_factory=dict)


_ADAPTER = TypeAdapter(DomainSpec)


def refs_in(value: Any) -> list[str]:
    """The ``$ref`` strings anywhere inside ``value``."""
    if isinstance(value, dict):
        if set(value) == {"$ref"} and isinstance(value["$ref"], str):
            return [value["$ref"]]
        return [ref for item in value.values() for ref in refs_in(item)]
    if isinstance(value, list):
        return [ref for item in value for ref in refs_in(item)]
    return []


def strings_in(value: Any) -> list[str]:
    """Every string inside ``value`` (the places placeholders can be)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for item in value.values() for text in strings_in(item)]
    if isinstance(value, list):
        return [text for item in value for text in strings_in(item)]
    return []


def _node_line(root: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    # The 1-based line of the deepest node on the path `loc` (mapping keys, sequence indices) the YAML file has.
    node, line = root, None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            match = next((value for key, value in node.value if key.value == str(part)), None)
            key_node = next((key for key, _ in node.value if key.value == str(part)), None)
            if match is None:
                break
            node, line = match, key_node.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line


class _Problems:
    """Collects ``file:line:key: message`` lines, the line looked up in the composed YAML."""

    def __init__(self, path: Path, root: yaml.Node | None):
        self.path, self.root, self.lines = path, root, []

    def add(self, loc: tuple[Any, ...], message: str) -> None:
        line = _node_line(self.root, loc)
        key = ".".join(str(part) for part in loc) or "-"
        self.lines.append(f"{self.path}:{line if line is not None else 0}:{key}: {message}")

    def raise_if_any(self) -> None:
        if self.lines:
            raise DomainFileError("invalid declarative domain: " + "; ".join(self.lines))


def _compose(path: Path) -> yaml.Node | None:
    try:
        return yaml.compose(read_data_text(path), Loader=StrictLoader)
    except (yaml.YAMLError, ValueError, OSError, RecursionError):
        return None  # load_validated_yaml reports these


def _with_lines(message: str, path: Path, root: yaml.Node | None) -> str:
    # load_validated_yaml names "file:key.subkey"; add the line the key is on, as "file:line:key.subkey".
    def line_of(match: re.Match) -> str:
        loc = tuple(int(part) if part.isdigit() else part for part in match.group(1).split("."))
        line = _node_line(root, loc)
        return f"{path}:{line}:{match.group(1)}:" if line is not None else match.group(0)

    return re.sub(re.escape(str(path)) + r":([^\s:;]+):", line_of, message)


def _check_tool(problems: _Problems, index: int, tool: ToolSpec) -> bool:
    # Returns whether the parameters are a valid object schema (only then are slot values checked against it).
    loc = ("tools", index)
    bare = [name for name in ("name", "description", "parameters") if getattr(tool, name) is not None]
    if tool.function is not None and bare:
        problems.add(loc, f"give the function either under 'function' or bare, not both (also has {bare})")
    elif tool.function is None and tool.name is None:
        problems.add(loc, "a tool needs 'function' (OpenAI format) or a bare 'name'")
    spec_loc = (*loc, "function", "parameters") if tool.function is not None else (*loc, "parameters")
    parameters = tool.spec().parameters
    try:
        jsonschema.Draft202012Validator.check_schema(parameters)
    except jsonschema.SchemaError as error:
        where = "".join(f".{part}" for part in error.path)
        problems.add(spec_loc, f"not a valid JSON Schema (at {where or 'the top'}: {error.message})")
        return False
    if parameters.get("type") != "object":
        problems.add(spec_loc, "a tool's parameters are an object schema ('type: object')")
        return False
    return True


def _check_turn(
    problems: _Problems, loc: tuple[Any, ...], turn: TurnSpec, tools: dict[str, ToolSpec | None], slot_values: dict
) -> None:
    keys: list[str] = []
    slots = set(slot_values)
    for key, planned in turn.calls.items():
        call_loc = (*loc, "calls", key)
        if planned.tool not in tools:
            problems.add((*call_loc, "tool"), f"unknown tool {planned.tool!r}; tools: {sorted(tools)}")
        elif tools[planned.tool] is not None:
            _check_slot_values(problems, (*call_loc, "arguments"), planned.arguments, tools[planned.tool], slot_values)
        for ref in refs_in(planned.arguments):
            target = ref.split(".")[0]
            if target not in keys:
                problems.add((*call_loc, "arguments"), f"$ref {ref!r} names no call declared above it in this turn")
        _check_placeholders(problems, (*call_loc, "arguments"), strings_in(planned.arguments), slots)
        if key in slots:
            problems.add(call_loc, f"call key {key!r} is also a slot name")
        keys.append(key)
    for index, phrase in enumerate(turn.utterance):
        phrase_loc = (*loc, "utterance", index)
        _check_placeholders(problems, (*phrase_loc, "say"), strings_in(phrase.say), slots)
        if phrase.reading is None:
            continue
        for number, item in enumerate(phrase.reading.calls):
            key = item if isinstance(item, str) else item.call
            if key not in turn.calls:
                message = f"reading names call {key!r}, not one of this turn's calls {keys}"
                problems.add((*phrase_loc, "reading", "calls", number), message)
            if isinstance(item, CallOverride):
                _check_placeholders(
                    problems, (*phrase_loc, "reading", "calls", number), strings_in(item.arguments), slots
                )
    texts = [turn.answer.text, *turn.answer.facts]
    _check_placeholders(problems, (*loc, "answer"), texts, slots | set(keys), "slot or call")


def _check_placeholders(
    problems: _Problems, loc: tuple[Any, ...], texts: list[str], known: set, what: str = "slot"
) -> None:
    for text in texts:
        for match in PLACEHOLDER.finditer(text):
            if match.group(1) is not None and match.group(1).split(".")[0] not in known:
                problems.add(loc, f"placeholder {match.group(0)} names no {what} of this task: {sorted(known)}")


def _check_slot_values(
    problems: _Problems, loc: tuple[Any, ...], arguments: dict[str, Any], tool: ToolSpec, slots: dict[str, list]
) -> None:
    # An argument that is one slot takes each of its values: each must fit the argument's schema, or the
    # generated timelines would fail validation.
    properties = tool.spec().parameters.get("properties", {})
    for name, value in arguments.items():
        match = PLACEHOLDER.fullmatch(value) if isinstance(value, str) else None
        if match is None or match.group(1) not in slots or not isinstance(properties.get(name), dict):
            continue
        validator = jsonschema.Draft202012Validator(properties[name])
        bad = [item for item in slots[match.group(1)] if not validator.is_valid(item)]
        if bad:
            problems.add((*loc, name), f"slot {match.group(1)!r} takes values the schema of {name!r} refuses: {bad}")


def check_spec(spec: DomainSpec, path: Path, root: yaml.Node | None) -> None:
    """Checks what the types cannot: tool forms and schemas, calls, ``$ref``s, readings, placeholders, backend.

    Args:
        spec: The file, as validated by pydantic.
        path: The file, for the messages.
        root: The composed YAML (for line numbers), or ``None``.

    Raises:
        DomainFileError: Naming ``file:line:key`` of every problem.
    """
    problems = _Problems(path, root)
    tools: dict[str, ToolSpec | None] = {}  # None: a tool whose schema is broken
    for index, tool in enumerate(spec.tools):
        valid = _check_tool(problems, index, tool)
        name = tool.spec().name
        if name in tools:
            problems.add(("tools", index), f"tool {name!r} is declared twice")
        tools[name] = tool if valid else None
    kinds = [task.name for task in spec.tasks]
    for index, task in enumerate(spec.tasks):
        if kinds.count(task.name) > 1:
            problems.add(("tasks", index, "name"), f"task {task.name!r} is declared twice")
        for number, turn in enumerate(task.turns):
            _check_turn(problems, ("tasks", index, "turns", number), turn, tools, task.slots)
    backend = spec.backend
    if (backend.execute is None) == (backend.responses is None):
        problems.add(("backend",), "give exactly one of 'execute' (module:function) and 'responses' (a table)")
    for index, response in enumerate(backend.responses or []):
        if response.tool not in tools:
            problems.add(("backend", "responses", index, "tool"), f"unknown tool {response.tool!r}")
        if response.result is not None and response.error is not None:
            problems.add(("backend", "responses", index), "a response has a result or an error, not both")
    problems.raise_if_any()


def load_spec(path: str | Path) -> DomainSpec:
    """Reads and checks a declarative domain file (YAML, or JSON, which YAML reads too).

    Args:
        path: The file.

    Returns:
        The checked spec.

    Raises:
        DomainFileError: Naming ``file:line:key`` (or ``file:key`` where the parser gives no line) of every problem.
        OSError: When the file cannot be read.
    """
    path = Path(path)
    root = _compose(path)
    try:
        spec = load_validated_yaml(path, _ADAPTER, "declarative domain")
    except ValueError as error:
        raise DomainFileError(_with_lines(str(error), path, root)) from None
    check_spec(spec, path, root)
    return spec
