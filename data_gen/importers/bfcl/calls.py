"""BFCL ground-truth call strings parsed with :mod:`ast` into a name and literal arguments, never evaluated."""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping, Sequence
from typing import Any

from data_gen.importers.bfcl.errors import BfclError

__all__ = ["parse_call"]


def parse_call(
    text: str, parameters: Mapping[str, Sequence[str]] | None = None, where: str = "<call>"
) -> tuple[str, dict[str, Any]]:
    """Parses a BFCL call string such as ``mv(source='a', destination='b')`` without evaluating it.

    Args:
        text: One call: a plain function name and literal arguments (strings, numbers, booleans, ``None``,
            lists, tuples and dicts of those).
        parameters: Documented parameter names per function, to name positional arguments.
        where: Where the string comes from (entry id, turn), for errors.

    Returns:
        ``(name, arguments)`` with JSON-compatible arguments (tuples become lists).

    Raises:
        BfclError: Naming ``where`` and the string when it is not such a call.
    """
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as error:
        raise BfclError(f"{where}: cannot parse call {text!r} ({error.msg})") from None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise BfclError(f"{where}: {text!r} is not a call of a plain function name")
    name = node.func.id
    arguments: dict[str, Any] = {}
    if node.args:
        names = (parameters or {}).get(name)
        if names is None:
            raise BfclError(
                f"{where}: {text!r} passes arguments by position and {name!r} has no documented parameters"
            )
        if len(node.args) > len(names):
            raise BfclError(f"{where}: {text!r} passes {len(node.args)} positional arguments; {name} takes {names}")
        for parameter, value in zip(names, node.args, strict=False):
            arguments[parameter] = _literal(value, text, where)
    for keyword in node.keywords:
        if keyword.arg is None:
            raise BfclError(f"{where}: {text!r} unpacks **arguments, which is not a literal")
        if keyword.arg in arguments:
            raise BfclError(f"{where}: {text!r} gives {keyword.arg!r} twice")
        arguments[keyword.arg] = _literal(keyword.value, text, where)
    return name, arguments


def _literal(node: ast.expr, text: str, where: str) -> Any:
    if isinstance(node, ast.Starred):
        raise BfclError(f"{where}: {text!r} unpacks *arguments, which is not a literal")
    try:
        value = ast.literal_eval(node)  # literals only: names, calls and attributes raise
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise BfclError(f"{where}: in {text!r}, {ast.unparse(node)!r} is not a literal value") from None
    return _json_literal(value, text, where)


def _json_literal(value: Any, text: str, where: str) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise BfclError(f"{where}: {text!r} holds the non-finite number {value}")
        return value
    if isinstance(value, (list, tuple)):
        return [_json_literal(item, text, where) for item in value]
    if isinstance(value, dict):
        if not all(isinstance(key, str) for key in value):
            raise BfclError(f"{where}: {text!r} holds a dict with non-string keys")
        return {key: _json_literal(item, text, where) for key, item in value.items()}
    raise BfclError(f"{where}: {text!r} holds a {type(value).__name__}, which JSON cannot carry")
