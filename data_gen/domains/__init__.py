"""The domain catalogue: each module defines one ``DOMAIN``; ``DOMAINS`` maps names to them."""

from __future__ import annotations

import importlib

from data_gen.domains.base import Domain

_MODULES = (
    "banking",
    "calendar",
    "customer_support",
    "restaurants",
    "shopping",
    "smart_home",
    "travel",
    "weather_news",
)


def _load() -> dict[str, Domain]:
    domains = {}
    for module in _MODULES:
        try:
            domain = importlib.import_module(f"data_gen.domains.{module}").DOMAIN
        except ModuleNotFoundError as error:
            if error.name != f"data_gen.domains.{module}":
                raise
            continue
        domains[domain.name] = domain
    return domains


DOMAINS: dict[str, Domain] = _load()
