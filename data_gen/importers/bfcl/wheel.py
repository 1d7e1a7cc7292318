"""Locating and loading the ``bfcl-eval`` wheel: its folder, version, simulated API classes and function docs.

Only the wheel's data files and the modules in ``eval_checker/multi_turn_eval/func_source_code`` are used. The
parent packages are registered as empty namespace modules, so no ``__init__`` of ``bfcl_eval`` ever runs.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import types
from functools import lru_cache
from pathlib import Path

from data_gen.importers.bfcl.errors import BfclError

__all__ = [
    "API_CLASSES",
    "BFCL_VERSION",
    "DEFAULT_DIR",
    "ENV_DIR",
    "api_class",
    "find_bfcl_root",
    "function_docs",
    "installed_version",
    "read_jsonl",
]

BFCL_VERSION = "2026.3.23"  # the wheel SIDE_EFFECTS and the tests were checked against (`make bfcl` pins it)
ENV_DIR = "CLOCKTUNE_BFCL_DIR"
DEFAULT_DIR = "~/.cache/clocktune/bfcl-eval/bfcl_eval"

# Each class of the multi-turn categories: its module in func_source_code and its function doc file in
# data/multi_turn_func_doc (BFCL's constants/executable_backend_config.py maps them the same way).
API_CLASSES: dict[str, tuple[str, str]] = {
    "GorillaFileSystem": ("gorilla_file_system", "gorilla_file_system.json"),
    "MathAPI": ("math_api", "math_api.json"),
    "MessageAPI": ("message_api", "message_api.json"),
    "TwitterAPI": ("posting_api", "posting_api.json"),
    "TicketAPI": ("ticket_api", "ticket_api.json"),
    "TradingBot": ("trading_bot", "trading_bot.json"),
    "TravelAPI": ("travel_booking", "travel_booking.json"),
    "VehicleControlAPI": ("vehicle_control", "vehicle_control.json"),
}

_PACKAGE = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"


def find_bfcl_root(path: str | os.PathLike | None = None) -> Path:
    """The ``bfcl_eval`` package folder of an installed ``bfcl-eval`` wheel.

    Args:
        path: The ``bfcl_eval`` folder (or the ``--target`` folder holding it); defaults to the environment
            variable ``CLOCKTUNE_BFCL_DIR``, then to ``~/.cache/clocktune/bfcl-eval/bfcl_eval``.

    Returns:
        The resolved ``bfcl_eval`` folder.

    Raises:
        BfclError: When no BFCL package is there, naming what to run.
    """
    if path is not None:
        where = "the given path"
    elif os.environ.get(ENV_DIR):
        path, where = os.environ[ENV_DIR], f"${ENV_DIR}"
    else:
        path, where = DEFAULT_DIR, "the default location"
    folder = Path(path).expanduser()
    if (folder / "bfcl_eval").is_dir() and not (folder / "eval_checker").is_dir():
        folder = folder / "bfcl_eval"  # the --target folder was given
    if (
        not (folder / "eval_checker" / "multi_turn_eval" / "func_source_code").is_dir()
        or not (folder / "data").is_dir()
    ):
        raise BfclError(
            f"no bfcl_eval package at {folder} ({where}); run `make bfcl` (pip install --no-deps --target "
            f"~/.cache/clocktune/bfcl-eval bfcl-eval=={BFCL_VERSION}), or pass --bfcl-dir or set {ENV_DIR}"
        )
    return folder.resolve()


def installed_version(root: Path) -> str:
    """The version of the wheel at ``root``.

    Args:
        root: A ``bfcl_eval`` folder from :func:`find_bfcl_root`.

    Returns:
        The version from the ``.dist-info`` folder next to it, or ``"unknown"``.
    """
    infos = sorted(root.parent.glob("bfcl_eval-*.dist-info"))
    return infos[-1].name[len("bfcl_eval-") : -len(".dist-info")] if infos else "unknown"


def _register_packages(root: Path) -> None:
    # The API modules import each other by absolute name (bfcl_eval....long_context). Registering the parent
    # packages as empty modules lets those imports resolve without running any bfcl_eval __init__, which in some
    # versions imports the clashing dependencies.
    parts = _PACKAGE.split(".")
    folder = root.parent
    for depth, part in enumerate(parts, start=1):
        name = ".".join(parts[:depth])
        folder = folder / part
        module = sys.modules.get(name)
        if module is None:
            module = types.ModuleType(name)
            module.__path__ = [str(folder)]
            module.__package__ = name
            sys.modules[name] = module
            if depth > 1:
                setattr(sys.modules[".".join(parts[: depth - 1])], part, module)
        elif str(folder) not in [str(Path(entry).resolve()) for entry in getattr(module, "__path__", [])]:
            raise BfclError(
                f"{name} is already loaded from {list(getattr(module, '__path__', []))}, not {folder}; "
                "use one BFCL installation per process"
            )


def _api_module(root: Path, module: str) -> types.ModuleType:
    _register_packages(root)
    try:
        return importlib.import_module(f"{_PACKAGE}.{module}")
    except ImportError as error:
        raise BfclError(
            f"cannot import BFCL module {module} from {root}: {error}; install the missing package "
            f"{error.name!r} into the project environment"
        ) from error


def api_class(class_name: str, bfcl_dir: str | os.PathLike | None = None) -> type:
    """The simulated API class ``class_name`` of the wheel.

    Args:
        class_name: A key of :data:`API_CLASSES`, e.g. ``"GorillaFileSystem"``.
        bfcl_dir: See :func:`find_bfcl_root`.

    Returns:
        The class.

    Raises:
        BfclError: For a class outside the multi-turn categories or a wheel that cannot be loaded.
    """
    if class_name not in API_CLASSES:
        raise BfclError(f"unsupported BFCL class {class_name!r}; supported: {', '.join(API_CLASSES)}")
    return getattr(_api_module(find_bfcl_root(bfcl_dir), API_CLASSES[class_name][0]), class_name)


@lru_cache(maxsize=64)
def _function_docs(root: Path, class_name: str) -> tuple[dict, ...]:
    path = root / "data" / "multi_turn_func_doc" / API_CLASSES[class_name][1]
    return tuple(read_jsonl(path))


def function_docs(class_name: str, bfcl_dir: str | os.PathLike | None = None) -> list[dict]:
    """The BFCL function docs of one class, as the wheel ships them (``name``, ``description``, ``parameters``).

    Args:
        class_name: A key of :data:`API_CLASSES`.
        bfcl_dir: See :func:`find_bfcl_root`.

    Returns:
        One dict per function, in file order (do not modify: they are cached).

    Raises:
        BfclError: For an unsupported class, a missing wheel or a malformed doc file.
    """
    if class_name not in API_CLASSES:
        raise BfclError(f"unsupported BFCL class {class_name!r}; supported: {', '.join(API_CLASSES)}")
    return list(_function_docs(find_bfcl_root(bfcl_dir), class_name))


def read_jsonl(path: Path) -> list[dict]:
    """Reads a BFCL data file: one JSON object a line (the wheel names them ``.json``); blank lines are skipped.

    Args:
        path: The file.

    Returns:
        The objects in file order.

    Raises:
        BfclError: For a missing file, or naming ``path:line`` for a line that is not a JSON object.
    """
    if not path.is_file():
        raise BfclError(f"{path}: no such file")
    records = []
    with open(path, encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise BfclError(f"{path}:{line_no}: not valid JSON ({error.msg})") from None
            if not isinstance(record, dict):
                raise BfclError(f"{path}:{line_no}: expected a JSON object")
            records.append(record)
    return records
