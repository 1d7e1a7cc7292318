"""The error every part of the BFCL importer raises for bad input."""

from __future__ import annotations

__all__ = ["BfclError"]


class BfclError(ValueError):
    """Missing or malformed BFCL input; the message names the file, the entry id and the field."""
