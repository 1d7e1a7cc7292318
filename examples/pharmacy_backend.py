"""The backend of ``examples/pharmacy.yaml``: ``execute(state, name, arguments) -> result``.

The domain file names it as ``pharmacy_backend:execute``; it is imported from the domain file's own folder, and only
when the user trusts the file (``generate --domain examples/pharmacy.yaml``, or ``--trust-domain-code`` on a command
reading timelines that name it). It mutates ``state`` for the state-changing tool and raises :class:`ToolError` to
refuse a call.
"""

from __future__ import annotations

from typing import Any

from clocktune.tools import ToolError


def execute(state: dict[str, Any], name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Runs one pharmacy call against ``state``.

    Args:
        state: The domain file's ``state`` (a private copy per dialogue).
        name: The tool.
        arguments: Its arguments, ``$ref`` inputs resolved.

    Returns:
        The result.

    Raises:
        ToolError: For a prescription without refills left, or an unknown prescription.
    """
    if name == "find_prescription":
        prescription = state["prescriptions"][arguments["medication"]]
        return {"medication": arguments["medication"], **prescription}
    if name == "refill_prescription":
        found = [p for p in state["prescriptions"].values() if p["id"] == arguments["prescription_id"]]
        if not found:
            raise ToolError(f"no prescription {arguments['prescription_id']}")
        if found[0]["refills_left"] == 0:
            raise ToolError("no refills left on this prescription: ask your doctor for a new one")
        found[0]["refills_left"] -= 1
        state["refills"].append(arguments["prescription_id"])
        return {"refill_id": f"rf{len(state['refills'])}", "ready": "tomorrow after 10am"}
    if name == "check_stock":
        return {"store": arguments["store"], "packs": state["stock"][arguments["store"]][arguments["medication"]]}
    if name == "store_hours":
        return {"store": arguments["store"], **state["hours"][arguments["store"]]}
    raise ToolError(f"unknown tool {name}")
