"""The domain catalogue: ``DOMAINS`` maps names to every generatable domain registered as a plugin.

Each built-in domain module defines one ``DOMAIN``, registered (like BFCL and third-party domains) as an entry point
of the group ``clocktune.domains`` in ``pyproject.toml``; :mod:`data_gen.plugins` loads them. ``DOMAINS`` is read
from that registry when it is first asked for, so that importing a domain module never loads all the others.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DOMAINS"]


def __getattr__(name: str) -> Any:
    # Module attribute on demand (PEP 562): the registry imports the domain modules, which import this package.
    if name == "DOMAINS":
        from data_gen.plugins import generatable_domains

        return generatable_domains()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
