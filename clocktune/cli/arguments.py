"""What both command lines (``clocktune`` and ``clocktune-datagen``) share: argument types and error reports.

The ``type=`` functions reject a number that makes no sense where argparse reads it, so that argparse prints
``error: argument --num: must be ≥ 1, got -1`` with the usage and exits 2 before anything runs.
:func:`run_command` turns the errors a command expects (bad input, files it cannot read or write) into one line
``error: ...`` on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from pathlib import Path

import yaml

__all__ = [
    "EXPECTED_ERRORS",
    "add_batch_size_flag",
    "add_constrained_flag",
    "add_trust_flag",
    "check_out_apart",
    "describe_error",
    "draft_name",
    "non_negative_int",
    "output_file",
    "output_folder",
    "positive_float",
    "positive_int",
    "probability",
    "run_command",
]

# ValueError covers pydantic's ValidationError, the TimelineFormatError listing file:line:field, the settings
# stamps' mismatch errors, BFCL's errors and pyarrow's ArrowInvalid; OSError covers every file-system failure
# (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, FileExistsError, disk full).
EXPECTED_ERRORS: tuple[type[BaseException], ...] = (ValueError, OSError, yaml.YAMLError)


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None


def positive_int(text: str) -> int:
    """An integer of at least 1 (a count, a size, a limit)."""
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be ≥ 1, got {text}")
    return value


def non_negative_int(text: str) -> int:
    """An integer of at least 0 (a 0-based position)."""
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be ≥ 0, got {text}")
    return value


def probability(text: str) -> float:
    """A number in [0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number in [0, 1], got {text!r}") from None
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {text}")
    return value


def positive_float(text: str) -> float:
    """A finite number above 0 (seconds, rates)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def draft_name(text: str) -> str:
    """A ``--draft`` value: one of the drafters, ``layer_skip:N`` or ``prompt_lookup:N`` with a positive N.

    Args:
        text: The argument as typed.

    Returns:
        ``text``, checked.

    Raises:
        argparse.ArgumentTypeError: For anything else.
    """
    base, colon, layers = text.partition(":")
    if base not in ("none", "prompt_lookup", "layer_skip", "int8", "int4", "auto") or (
        colon and (base not in ("layer_skip", "prompt_lookup") or not layers.isdigit() or int(layers) < 1)
    ):
        raise argparse.ArgumentTypeError(f"{text!r}: one of none, prompt_lookup[:N], layer_skip[:N], int8, int4, auto")
    return text


def _existing_ancestor(path: Path) -> Path:
    # The path itself when it exists, else its nearest existing folder-to-be-created-in ("." or "/" at worst).
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def output_folder(text: str) -> str:
    """An output folder: one that exists, or one that can be created (no file where a folder must be)."""
    path = Path(text)
    found = _existing_ancestor(path)
    if found == path and not found.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a file, not a folder")
    if not found.is_dir():
        raise argparse.ArgumentTypeError(f"{text} would go under {found}, which is a file, not a folder")
    return text


def output_file(text: str) -> str:
    """An output file: a file to create or replace, not a folder (its folder is created if missing)."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder, not a file")
    found = _existing_ancestor(path.parent)
    if not found.is_dir():
        raise argparse.ArgumentTypeError(f"{text} would go under {found}, which is a file, not a folder")
    return text


def check_out_apart(out: str, inputs: str | list[str] | None, flag: str) -> None:
    """Refuses an output folder that is one of the command's input folders or lies inside one.

    A command writes results, journals and plots into ``--out``; inside an input folder they would become part of
    the input (``validate`` of the data folder would then fail on ``results.jsonl``), and a rerun would read them
    back as data.

    Args:
        out: The ``--out`` folder.
        inputs: The input paths (files or folders), or ``None``.
        flag: The inputs' flag, for the message (``--data``).

    Raises:
        ValueError: ``argument --out: OUT is (inside) the input folder INPUT (--data): ...``.
    """
    if inputs is None:
        return
    out_path = Path(out).resolve()
    for name in [inputs] if isinstance(inputs, str) else inputs:
        folder = Path(name).resolve()
        if not folder.is_dir():
            continue
        if out_path == folder or out_path.is_relative_to(folder):
            where = "is" if out_path == folder else "lies inside"
            raise ValueError(
                f"argument --out: {out} {where} the input folder {name} ({flag}): what the command writes would "
                "mix with its input; choose a folder outside it"
            )


def add_batch_size_flag(parser: argparse.ArgumentParser) -> None:
    """Adds ``--batch-size`` to a command that plays sessions of a checkpoint through the model engine."""
    parser.add_argument(
        "--batch-size",
        type=positive_int,
        default=None,
        help="sessions whose forwards the model engine runs as one (default: 50 on a CPU, 64 on a GPU); the"
        " sessions' logs are the same at any batch size",
    )


def add_constrained_flag(parser: argparse.ArgumentParser, who: str = "a checkpoint's actions") -> None:
    """Adds ``--constrained``/``--no-constrained`` to a command whose checkpoint decodes actions in the runtime.

    Args:
        parser: The command's parser.
        who: What decodes, as the help says it (``the student's actions``, ``the --data sessions``...).
    """
    parser.add_argument(
        "--constrained",
        action=argparse.BooleanOptionalAction,
        default=True,
        help=f"decode {who} under the grammar of valid actions (--no-constrained: the plain argmax)",
    )


def add_trust_flag(parser: argparse.ArgumentParser) -> None:
    """Adds ``--trust-domain-code`` to a command that may play sessions of timelines naming a domain file."""
    parser.add_argument(
        "--trust-domain-code",
        action="store_true",
        help="import the Python backend of a declarative domain file the timelines name (code from the data: "
        "pass it only for data you trust, as trust_remote_code for models); a recorded-responses backend needs none",
    )


def describe_error(error: BaseException) -> str:
    """The message of an expected error, as the user reads it: ``path: reason`` for a file-system error."""
    if isinstance(error, OSError) and error.strerror:
        if error.filename is None:
            return error.strerror
        second = f" -> {error.filename2}" if error.filename2 is not None else ""
        return f"{error.filename}{second}: {error.strerror}"
    return str(error) or type(error).__name__


def run_command(command: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Runs one ``cmd_*`` function, reporting what it raises of :data:`EXPECTED_ERRORS`.

    Args:
        command: The command.
        args: Its parsed command line.

    Returns:
        The command's exit status (0, or 1 when it found problems in what it checks); 2 when it raised an expected
        error, which is printed as ``error: ...`` on stderr.
    """
    try:
        return command(args)
    except EXPECTED_ERRORS as error:
        print(f"error: {describe_error(error)}", file=sys.stderr)
        return 2
