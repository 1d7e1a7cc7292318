"""Loads a script of ``scripts/`` as a module, so that tests call its functions."""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def load_script(filename: str) -> ModuleType:
    """Imports ``scripts/<filename>`` under its stem.

    Args:
        filename: The script's file name, e.g. ``bench_closed_loop.py``.

    Returns:
        The module, registered in ``sys.modules`` (dataclasses look their module up there).
    """
    spec = importlib.util.spec_from_file_location(Path(filename).stem, SCRIPTS / filename)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
