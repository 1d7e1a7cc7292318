"""Domain plugins: domains and tool backends registered through package entry points.

Every domain clocktune knows, the eight built-in ones and the BFCL importer included, is an entry point of the
group ``clocktune.domains`` (the project's own are declared in ``pyproject.toml``). An entry point loads either

- a :class:`~data_gen.domains.base.Domain`: generatable, served by a :class:`DomainBackend` over its ``execute``;
- or a :class:`DomainPlugin`: a backend factory, with a ``domain`` when it can also be generated (``None``: an
  import-only source such as BFCL), and ``prefix=True`` to serve every timeline domain ``name``, ``name-...`` or
  ``name:...``.

A third-party package registers its own the same way::

    [project.entry-points."clocktune.domains"]
    pharmacy = "my_package.pharmacy:DOMAIN"

:func:`registered_plugins` loads them all once; :func:`find_plugin` (backends), :func:`generatable_domains`
(generation) and ``data_gen.domains.DOMAINS`` all read it, so one lookup serves every caller. An entry point that
fails to load (a module not installed yet, a wrong object, a name registered twice) breaks only its own domain: it is
reported, naming the entry point, when that domain is asked for.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from clocktune.timeline.events import Timeline, copy_json
from clocktune.tools import BrokenCallError, ToolBackend
from data_gen.domains.base import Domain

__all__ = [
    "GROUP",
    "DomainBackend",
    "DomainPlugin",
    "clear_registry",
    "domain_plugin",
    "find_plugin",
    "generatable_domains",
    "plugin_errors",
    "registered_plugins",
]

GROUP = "clocktune.domains"
_LOG = logging.getLogger(__name__)


@dataclass
class DomainBackend:
    """The backend of a generated domain: its ``execute`` function over a private copy of the state.

    Args:
        domain: The domain.
        current: The state calls read and mutate (copied from the timeline by the plugin's factory).
    """

    domain: Domain
    current: dict[str, Any]
    # Generated domains pass data between calls through ``$ref`` inputs, never through state.
    sequential = False

    def execute(self, name: str, arguments: dict[str, Any]) -> Any:
        """Runs one call; raises :class:`ToolError` when the backend refuses it, :class:`BrokenCallError` when
        it cannot run it."""
        if not any(tool.name == name for tool in self.domain.tools):
            raise BrokenCallError(f"unknown tool {name!r}")
        try:
            return self.domain.execute(self.current, name, arguments)
        except (KeyError, TypeError) as error:
            raise BrokenCallError(f"{name}: bad arguments ({error})") from error

    def state(self) -> dict[str, Any]:
        """The current state."""
        return self.current


@dataclass(frozen=True)
class DomainPlugin:
    """What an entry point of group ``clocktune.domains`` provides when it is more than a generatable domain.

    Args:
        name: The domain name the plugin serves (the entry point's name).
        backend: A fresh backend for a timeline, in the timeline's initial state.
        domain: The generatable domain; ``None`` for an import-only source (timelines come from an importer).
        prefix: Whether the plugin also serves timeline domains ``name-...`` and ``name:...`` (one importer, many
            sources).
    """

    name: str
    backend: Callable[[Timeline], ToolBackend]
    domain: Domain | None = None
    prefix: bool = False

    def serves(self, domain: str) -> bool:
        """Whether timelines of ``domain`` are this plugin's."""
        return domain == self.name or (self.prefix and domain.startswith((f"{self.name}-", f"{self.name}:")))


def domain_plugin(domain: Domain) -> DomainPlugin:
    """The plugin of a generatable domain: a :class:`DomainBackend` over a copy of each timeline's initial state.

    Args:
        domain: The domain.

    Returns:
        The plugin, named as the domain.
    """
    return DomainPlugin(domain.name, lambda timeline: DomainBackend(domain, copy_json(timeline.initial_state)), domain)


@dataclass(frozen=True)
class _Broken:
    # An entry point that did not give a plugin, kept so that asking for its domain names it and says why.
    name: str
    message: str


def _load_entry(name: str, value: str, load: Callable[[], Any]) -> DomainPlugin | _Broken:
    where = f"entry point {name} = {value!r} (group {GROUP})"
    try:
        loaded = load()
    except Exception as error:  # noqa: BLE001 - any failure of a third-party import breaks only its domain
        return _Broken(name, f"{where} failed to load: {type(error).__name__}: {error}")
    if isinstance(loaded, Domain):
        loaded = domain_plugin(loaded)
    if not isinstance(loaded, DomainPlugin):
        return _Broken(name, f"{where} loads a {type(loaded).__name__}, not a Domain or a DomainPlugin")
    if loaded.name != name:
        return _Broken(name, f"{where} loads domain {loaded.name!r}: the entry point must be named as its domain")
    return loaded


@functools.cache
def _registry() -> dict[str, DomainPlugin | _Broken]:
    found: dict[str, list[Any]] = {}
    for entry in entry_points(group=GROUP):
        # The same distribution can be seen twice on sys.path (an editable install and its egg-info): one entry.
        if all(other.value != entry.value for other in found.get(entry.name, [])):
            found.setdefault(entry.name, []).append(entry)
    registry: dict[str, DomainPlugin | _Broken] = {}
    for name, entries in sorted(found.items()):
        if len(entries) > 1:
            values = " and ".join(repr(entry.value) for entry in entries)
            registry[name] = _Broken(name, f"domain {name!r} is registered twice (group {GROUP}): {values}")
        else:
            registry[name] = _load_entry(name, entries[0].value, entries[0].load)
    return registry


def registered_plugins() -> dict[str, DomainPlugin]:
    """Every plugin that loaded, by name (loaded once per process; ``clear_registry`` reloads).

    Returns:
        The plugins, sorted by name.
    """
    return {name: plugin for name, plugin in _registry().items() if isinstance(plugin, DomainPlugin)}


def plugin_errors() -> dict[str, str]:
    """Why each entry point that did not load failed, by domain name."""
    return {name: plugin.message for name, plugin in _registry().items() if isinstance(plugin, _Broken)}


def clear_registry() -> None:
    """Forgets the loaded plugins, so that the next lookup reads the entry points again (after an install)."""
    _registry.cache_clear()


def find_plugin(domain: str) -> DomainPlugin | None:
    """The plugin serving timelines of ``domain``: the one of that name, else a prefix plugin that covers it.

    Args:
        domain: A timeline's ``domain``.

    Returns:
        The plugin, or ``None`` when none is registered for it.

    Raises:
        ValueError: When the entry point that would serve ``domain`` failed to load (the message names it).
    """
    registry = _registry()
    candidates = [registry[domain]] if domain in registry else []
    candidates += [plugin for name, plugin in registry.items() if name != domain and domain.startswith(name)]
    for candidate in candidates:
        if isinstance(candidate, DomainPlugin) and candidate.serves(domain):
            return candidate
    for candidate in candidates:
        # A broken entry point's prefix setting is unknown: name it wherever it could have served the domain.
        if isinstance(candidate, _Broken) and (
            domain == candidate.name or domain.startswith((f"{candidate.name}-", f"{candidate.name}:"))
        ):
            raise ValueError(candidate.message)
    return None


def generatable_domains() -> dict[str, Domain]:
    """The registered domains that can be generated, by name (entry points that failed to load are left out).

    Returns:
        The domains, sorted by name.
    """
    domains = {name: plugin.domain for name, plugin in registered_plugins().items() if plugin.domain is not None}
    for name, message in plugin_errors().items():
        _LOG.debug("domain %s left out: %s", name, message)
    return domains
