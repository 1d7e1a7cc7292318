"""A checkpoint's decoding metrics (acceptance, tokens/s, ms per step) added to a command's ``summary.json``.

``clocktune eval`` and ``clocktune rollout`` both decode with a checkpoint's policy factory, whose ``decoding``
(:class:`~clocktune.runtime.speculative.SpeculationStats`) the sessions of the run filled in.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from clocktune.atomic import atomic_write_text

__all__ = ["add_decoding_summary"]


def add_decoding_summary(path: Path, factories: dict[str, Any]) -> None:
    """Adds each checkpoint's decoding metrics to a JSON file under ``decoding`` (creating it), and prints them.

    Sessions resumed from a journal were decoded by an earlier run: only those played now are counted.

    Args:
        path: The JSON file (``eval``'s ``summary.json``; ``rollout`` keeps them apart from its data's summary, which
            a resumed run must reproduce byte for byte, in ``decoding.json``).
        factories: Policy factories by role (``policy``, ``baseline``, ``student``); those that are not a
            checkpoint's, or decoded nothing in this run, are left out.
    """
    decoding = {
        role: factory.decoding.summary()
        for role, factory in factories.items()
        if getattr(factory, "decoding", None) is not None and factory.decoding.actions
    }
    if not decoding:
        return
    summary = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    summary["decoding"] = decoding
    atomic_write_text(path, json.dumps(summary, indent=2) + "\n")
    for role, metrics in decoding.items():
        print(
            f"decoding ({role}, {metrics['drafter']}): {metrics['tokens_per_s']} action tokens/s, acceptance "
            f"{metrics['acceptance_rate']}, mean accepted length {metrics['mean_accepted_length']}, "
            f"{metrics['target_ms_per_forward']} ms per target forward"
        )
