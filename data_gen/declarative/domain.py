"""A checked declarative domain file turned into a :class:`~data_gen.domains.base.Domain`: grammars and backend.

The domain's state is ``{"domain_file": {"path", "sha256"}, "state": <the file's state>}``: the file's own state,
which the backend callable reads and mutates, beside the name and content hash of the file. A generated timeline
thus names the file that can rebuild its backend, and :func:`declared_backend` (through
``data_gen.backends.make_backend``) rebuilds it for ``clocktune eval`` and ``clocktune-datagen validate``, refusing a
file whose content changed since.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import importlib
import importlib.util
import json
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clocktune.timeline.events import LatencyModel, Timeline, ToolSchema
from clocktune.tools import BackendFactory, ToolError
from data_gen.declarative.spec import (
    PLACEHOLDER,
    CallOverride,
    DomainFileError,
    DomainSpec,
    ReadingSpec,
    TaskSpec,
    TurnSpec,
    load_spec,
    refs_in,
)
from data_gen.domains.base import Domain, Grammar
from data_gen.plugins import domain_plugin
from data_gen.task import Answer, PlannedCall, Task, TaskContext, Turn

__all__ = ["declared_backend", "file_digest", "load_domain_file"]

Execute = Callable[[dict[str, Any], str, dict[str, Any]], Any]


def file_digest(path: str | Path) -> str:
    """The sha256 of a file's bytes (what the settings stamp and the timelines record)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _fill(value: Any, slots: dict[str, Any]) -> Any:
    # Arguments: "{slot}" alone keeps the slot value's type (a number stays a number); {"$ref": ...} stays a reference.
    if isinstance(value, str):
        match = PLACEHOLDER.fullmatch(value)
        if match is not None and match.group(1) in slots:
            return slots[match.group(1)]
        return _text(value, slots)
    if isinstance(value, dict):
        return value if set(value) == {"$ref"} else {k: _fill(v, slots) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(item, slots) for item in value]
    return value


def _lookup(results: dict[str, Any], name: str) -> Any:
    key, *path = name.split(".")
    value = results[key]
    for part in path:
        if isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        elif isinstance(value, dict) and part in value:
            value = value[part]
        else:
            raise LookupError(
                f"the result of call {key!r} has no {'.'.join(path)!r} (result: {json.dumps(results[key])})"
            )
    return value


def _text(template: str, slots: dict[str, Any], results: dict[str, Any] | None = None) -> str:
    def replace(match: Any) -> str:
        if match.group(1) is None:
            return match.group(0)[0]  # "{{" -> "{", "}}" -> "}"
        name = match.group(1)
        if name in slots:
            return str(slots[name])
        value = _lookup(results or {}, name)
        return value if isinstance(value, str) else json.dumps(value)

    return PLACEHOLDER.sub(replace, template)


def _confidence(context: TaskContext, reading: ReadingSpec) -> float:
    if isinstance(reading.confidence, float | int):
        return float(reading.confidence)
    return {"confident": context.confident, "unsure": context.unsure, "guess": context.guess}[reading.confidence]()


def _with_dependencies(keys: list[str], calls: dict[str, PlannedCall]) -> list[str]:
    # A reading names the calls the words settle; the calls they depend on ($ref) come along, in declared order.
    wanted, pending = set(keys), list(keys)
    while pending:
        for ref in refs_in(calls[pending.pop()].arguments):
            target = ref.split(".")[0]
            if target not in wanted:
                wanted.add(target)
                pending.append(target)
    return [key for key in calls if key in wanted]


def _turn(context: TaskContext, source: str, task: TaskSpec, turn: TurnSpec, slots: dict[str, Any]) -> Turn:
    calls = {key: PlannedCall(key, spec.tool, _fill(spec.arguments, slots)) for key, spec in turn.calls.items()}
    builder = context.utterance()
    for phrase in turn.utterance:
        builder.say(_text(phrase.say if isinstance(phrase.say, str) else context.pick(phrase.say), slots))
        if phrase.reading is None:
            continue
        guessed = {}
        for item in phrase.reading.calls:
            if isinstance(item, CallOverride):
                guessed[item.call] = {**calls[item.call].arguments, **_fill(item.arguments, slots)}
        keys = _with_dependencies(
            [item if isinstance(item, str) else item.call for item in phrase.reading.calls], calls
        )
        planned = [PlannedCall(key, calls[key].name, guessed.get(key, calls[key].arguments)) for key in keys]
        builder.reading(planned, _confidence(context, phrase.reading))

    def answer(results: dict[str, Any]) -> Answer:
        try:
            return Answer(
                _text(turn.answer.text, slots, results), [_text(f, slots, results) for f in turn.answer.facts]
            )
        except LookupError as error:
            raise DomainFileError(f"{source}: task {task.name!r}: answer: {error.args[0]}") from None

    if not builder.words:
        # UtteranceBuilder would refuse it without naming the template.
        raise DomainFileError(f"{source}: task {task.name!r}: a turn drew an utterance without words")
    return builder.done(calls=list(calls.values()), answer=answer, tail=turn.tail)


def _grammar(source: str, task: TaskSpec) -> Grammar:
    def grammar(context: TaskContext) -> Task:
        slots = {name: context.pick(values) for name, values in task.slots.items()}
        return Task(task.name, [_turn(context, source, task, turn, slots) for turn in task.turns])

    grammar.__name__ = grammar.__qualname__ = f"{task.name}_template"
    return grammar


def _import_callable(target: str, folder: Path, where: str) -> Execute:
    # "module:function"; a module beside the domain file is found there when it is not importable from sys.path.
    module_name, _, attribute = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        candidate = folder.joinpath(*module_name.split(".")).with_suffix(".py")
        if error.name != module_name.split(".")[0] or not candidate.is_file():
            raise DomainFileError(f"{where}: cannot import {module_name!r} ({error})") from None
        # A private name per file: two domain folders may each have a "backend.py".
        private = f"_clocktune_domain_{hashlib.sha256(str(candidate.resolve()).encode()).hexdigest()[:16]}"
        module = sys.modules.get(private)
        if module is None:
            spec = importlib.util.spec_from_file_location(private, candidate)
            module = importlib.util.module_from_spec(spec)
            sys.modules[private] = module
            try:
                spec.loader.exec_module(module)
            except Exception:
                del sys.modules[private]
                raise
    except ImportError as error:
        raise DomainFileError(f"{where}: cannot import {module_name!r} ({error})") from None
    value: Any = module
    for part in attribute.split("."):
        if not hasattr(value, part):
            raise DomainFileError(f"{where}: {module_name!r} has no {attribute!r}")
        value = getattr(value, part)
    if not callable(value):
        raise DomainFileError(f"{where}: {target!r} is not callable")
    return value


def _recorded(spec: DomainSpec) -> Execute:
    def key(name: str, arguments: Any) -> str:
        return json.dumps([name, arguments], sort_keys=True)

    responses = spec.backend.responses or []
    table = {key(r.tool, r.arguments): r for r in reversed(responses)}  # the first of equal entries wins

    def execute(state: dict[str, Any], name: str, arguments: dict[str, Any]) -> Any:
        response = table.get(key(name, arguments))
        if response is None:
            # Equal values the JSON text tells apart (21 and 21.0, a result passed on through $ref).
            response = next((r for r in responses if r.tool == name and r.arguments == arguments), None)
        if response is None:
            raise ToolError(f"no recorded response for {name} with {json.dumps(arguments, sort_keys=True)}")
        if response.error is not None:
            raise ToolError(response.error)
        return copy.deepcopy(response.result)

    return execute


def _build(path: Path, digest: str) -> Domain:
    spec = load_spec(path)
    source = str(path)
    if spec.backend.execute is not None:
        inner = _import_callable(spec.backend.execute, path.parent, f"{source}:backend.execute")
    else:
        inner = _recorded(spec)

    def execute(state: dict[str, Any], name: str, arguments: dict[str, Any]) -> Any:
        # The backend sees the file's state alone; the domain file's name and hash ride beside it.
        return inner(state["state"], name, arguments)

    identity = {"path": source, "sha256": digest}

    def initial_state(rng: random.Random) -> dict[str, Any]:
        return {"domain_file": dict(identity), "state": copy.deepcopy(spec.state)}

    tools = []
    for tool in spec.tools:
        function = tool.spec()
        latency = LatencyModel(median_s=tool.latency_s)
        tools.append(ToolSchema(function.name, function.description, function.parameters, tool.side_effect, latency))
    grammars = [(_grammar(source, task), task.weight) for task in spec.tasks]
    return Domain(spec.name, tools, initial_state, execute, grammars)


@functools.lru_cache(maxsize=64)
def _cached(path: str, digest: str) -> Domain:
    return _build(Path(path), digest)


def load_domain_file(path: str | Path) -> Domain:
    """Reads a declarative domain file into a generatable domain (cached per file path and content).

    Args:
        path: The YAML (or JSON) file; see the package docstring for the format.

    Returns:
        The domain; its timelines name the file (resolved path, sha256) in their initial state.

    Raises:
        DomainFileError: Naming ``file:line:key`` of every problem in the file, or a backend that cannot be imported.
        OSError: When the file cannot be read.
    """
    resolved = Path(path).resolve()
    return _cached(str(resolved), file_digest(resolved))


def declared_backend(timeline: Timeline) -> BackendFactory | None:
    """The backend factory of a timeline generated from a declarative domain file, from the file it names.

    Args:
        timeline: Any timeline.

    Returns:
        The factory, or ``None`` when the timeline's initial state names no domain file.

    Raises:
        ValueError: When the file it names cannot be read or loaded, has changed since (another sha256), or
            defines another domain.
    """
    state = timeline.initial_state
    named = state.get("domain_file") if set(state) == {"domain_file", "state"} else None
    if (
        not isinstance(named, dict)
        or not isinstance(named.get("path"), str)
        or not isinstance(named.get("sha256"), str)
    ):
        return None
    where = f"timeline {timeline.id!r} (domain {timeline.domain!r}): its domain file {named['path']}"
    try:
        digest = file_digest(named["path"])
    except OSError as error:
        raise ValueError(f"{where} cannot be read ({error.strerror or error})") from None
    if digest != named["sha256"]:
        raise ValueError(f"{where} has changed since the timeline was generated: restore it or regenerate the data")
    domain = _cached(named["path"], digest)
    if domain.name != timeline.domain:
        raise ValueError(f"{where} defines domain {domain.name!r}")
    return domain_plugin(domain).backend
