"""A checked declarative domain file turned into a :class:`~data_gen.domains.base.Domain`: grammars and backend.

The domain's state is ``{"domain_file": {"path", "sha256"}, "state": <the file's state>}``: the file's own state,
which the backend callable reads and mutates, beside the name and content hash of the file. A generated timeline
thus names the file that can rebuild its backend, and :func:`declared_backend` (through
``data_gen.backends.make_backend``) rebuilds it for ``clocktune eval`` and ``clocktune-datagen validate``, refusing a
file whose content changed since.

A file's backend code is untrusted data until the user says otherwise, as ``trust_remote_code`` draws the line on
the Hub. ``backend.execute`` may name only a module beside the domain file (inside its folder) or a module of an
installed clocktune plugin (a distribution with entry points in group ``clocktune.domains``), never the standard
library or any other importable name; and that module is imported only when the caller trusts the file: the user
passed it on the command line (``generate --domain FILE``, a generator config's ``domain_files``) or gave
``--trust-domain-code``. A file named by a timeline or a dataset is otherwise loaded for its tasks and tools alone,
and its backend refuses with :class:`UntrustedDomainCodeError`. A recorded-responses backend is data and needs no
trust.
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
from dataclasses import dataclass
from importlib.metadata import entry_points, packages_distributions
from pathlib import Path
from typing import Any

from clocktune.data_files import read_data_bytes
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
from data_gen.plugins import GROUP, domain_plugin
from data_gen.task import Answer, PlannedCall, Task, TaskContext, Turn

__all__ = [
    "TRUST_FLAG",
    "UntrustedDomainCodeError",
    "backend_digest",
    "declared_backend",
    "file_digest",
    "load_domain_file",
]

TRUST_FLAG = "--trust-domain-code"
"""The command-line flag with which the user lets a domain file named by data run its backend's code."""


class UntrustedDomainCodeError(ValueError):
    """A domain file named by data whose backend is Python code, asked to run without the user's trust."""


Execute = Callable[[dict[str, Any], str, dict[str, Any]], Any]


def file_digest(path: str | Path) -> str:
    """The sha256 of a file's bytes (what the settings stamp and the timelines record).

    Raises:
        clocktune.data_files.DataFileError: When the path is not a regular file or is over the size cap (a timeline
            may name ``/dev/zero``).
        OSError: When it cannot be read.
    """
    return hashlib.sha256(read_data_bytes(path)).hexdigest()


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


@functools.cache
def _plugin_packages() -> frozenset[str]:
    # The top-level packages of distributions that register clocktune domains: the only installed code a domain
    # file's backend may name (the user chose to install them).
    plugins = {entry.dist.name for entry in entry_points(group=GROUP) if entry.dist is not None}
    return frozenset(top for top, dists in packages_distributions().items() if plugins.intersection(dists))


def _module_beside(module_name: str, folder: Path) -> Path | None:
    # folder/a/b.py (or folder/a/b/__init__.py), resolved: a symlink out of the folder is not beside it.
    base = folder.joinpath(*module_name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.exists():
            resolved = candidate.resolve()
            if not resolved.is_relative_to(folder.resolve()) or not resolved.is_file():
                return None
            return resolved
    return None


@dataclass(frozen=True)
class _BackendCode:
    """Where a file's ``backend.execute`` lives, found without importing anything."""

    target: str  # "module:function"
    module: str
    file: Path | None  # the module beside the domain file, or None for a plugin's module


def _locate(target: str, folder: Path, where: str) -> _BackendCode:
    module_name = target.partition(":")[0]
    beside = _module_beside(module_name, folder)
    if beside is not None:
        return _BackendCode(target, module_name, beside)
    if module_name.split(".")[0] in _plugin_packages():
        return _BackendCode(target, module_name, None)
    raise DomainFileError(
        f"{where}: {module_name!r} is neither a module in the domain file's folder ({folder}) nor part of an "
        f"installed clocktune plugin (a package with entry points in group {GROUP}); a backend may name no other code"
    )


def _import_callable(code: _BackendCode, where: str) -> Execute:
    module_name, _, attribute = code.target.partition(":")
    try:
        if code.file is None:
            module = importlib.import_module(module_name)
        else:
            # A private name per file: two domain folders may each have a "backend.py".
            private = f"_clocktune_domain_{hashlib.sha256(str(code.file).encode()).hexdigest()[:16]}"
            module = sys.modules.get(private)
            if module is None:
                spec = importlib.util.spec_from_file_location(private, code.file)
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
        raise DomainFileError(f"{where}: {code.target!r} is not callable")
    return value


def backend_digest(path: str | Path) -> str | None:
    """The sha256 of the module a domain file's ``backend.execute`` names, for the settings stamp.

    Generation resumed after the backend's code was edited would mix two backends in one dataset: the stamp holds
    this digest beside the file's own. Nothing is imported: a plugin's module is found by its import spec.

    Args:
        path: The domain file.

    Returns:
        The digest of the module's source, or ``None`` for a recorded-responses backend.

    Raises:
        DomainFileError: When the file is invalid or its backend names a module it may not.
    """
    path = Path(path).resolve()
    spec = load_spec(path)
    if spec.backend.execute is None:
        return None
    code = _locate(spec.backend.execute, path.parent, f"{path}:backend.execute")
    origin = code.file
    if origin is None:
        found = importlib.util.find_spec(code.module)
        origin = Path(found.origin) if found is not None and found.origin else None
    if origin is None:
        raise DomainFileError(f"{path}:backend.execute: cannot find the source of {code.module!r}")
    return file_digest(origin)


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


@dataclass(frozen=True)
class _Loaded:
    domain: Domain
    untrusted: str | None  # why its backend refuses to run (code it was not trusted to import), or None


def _untrusted(message: str) -> Execute:
    def refuse(state: dict[str, Any], name: str, arguments: dict[str, Any]) -> Any:
        raise UntrustedDomainCodeError(message)

    return refuse


def _build(path: Path, digest: str, trust_code: bool) -> _Loaded:
    spec = load_spec(path)
    source = str(path)
    untrusted = None
    if spec.backend.execute is not None:
        where = f"{source}:backend.execute"
        code = _locate(spec.backend.execute, path.parent, where)
        if trust_code:
            inner = _import_callable(code, where)
        else:
            untrusted = (
                f"{source}: backend.execute {code.target!r} runs Python code ({code.file or code.module}) and the "
                f"domain file was named by data, not by you: pass {TRUST_FLAG} to run it"
            )
            inner = _untrusted(untrusted)
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
    return _Loaded(Domain(spec.name, tools, initial_state, execute, grammars), untrusted)


@functools.lru_cache(maxsize=64)
def _cached(path: str, digest: str, trust_code: bool) -> _Loaded:
    return _build(Path(path), digest, trust_code)


def load_domain_file(path: str | Path, *, trust_code: bool) -> Domain:
    """Reads a declarative domain file into a generatable domain (cached per file path, content and trust).

    Args:
        path: The YAML (or JSON) file; see the package docstring for the format.
        trust_code: Whether its backend module may be imported: true for a file the user named (``generate
            --domain FILE``, a generator config given with ``--config``) or with ``--trust-domain-code``; false
            for one named by data, whose backend then refuses every call with :class:`UntrustedDomainCodeError`
            (its tasks and tools still load: they are data).

    Returns:
        The domain; its timelines name the file (resolved path, sha256) in their initial state.

    Raises:
        DomainFileError: Naming ``file:line:key`` of every problem in the file, a backend module outside the file's
            folder and the installed plugins, or (trusted) one that cannot be imported.
        OSError: When the file cannot be read.
    """
    resolved = Path(path).resolve()
    return _cached(str(resolved), file_digest(resolved), trust_code).domain


def declared_backend(timeline: Timeline, trust_code: bool = False) -> BackendFactory | None:
    """The backend factory of a timeline generated from a declarative domain file, from the file it names.

    Args:
        timeline: Any timeline.
        trust_code: Whether the file's backend module may be imported (the user's ``--trust-domain-code``).

    Returns:
        The factory, or ``None`` when the timeline's initial state names no domain file.

    Raises:
        UntrustedDomainCodeError: When the file's backend is Python code and ``trust_code`` is false (nothing is
            imported); one line naming the module and the flag.
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
    except ValueError as error:  # not a regular file, or too large
        raise ValueError(f"{where} cannot be read ({error})") from None
    if digest != named["sha256"]:
        raise ValueError(f"{where} has changed since the timeline was generated: restore it or regenerate the data")
    loaded = _cached(named["path"], digest, trust_code)
    if loaded.domain.name != timeline.domain:
        raise ValueError(f"{where} defines domain {loaded.domain.name!r}")
    if loaded.untrusted is not None:
        raise UntrustedDomainCodeError(f"timeline {timeline.id!r}: {loaded.untrusted}")
    return domain_plugin(loaded.domain).backend
