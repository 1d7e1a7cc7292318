"""Writing files and folders atomically: into a temporary sibling, then renamed into place.

A reader (or a rerun after a kill) never sees half a file: it sees the old content or the new one. Every writer
of the project goes through these functions, so the permissions and the clean-up on failure are the same
everywhere.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

__all__ = ["atomic_write", "atomic_write_folder", "atomic_write_lines", "atomic_write_text"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: str | os.PathLike, write: Callable[[Path], object]) -> None:
    """Writes one file through a temporary sibling: ``write`` fills it, then it is renamed onto ``path``.

    Args:
        path: The file to create or replace; its folder must exist.
        write: Writes the content to the path it is given (a Parquet writer, ``figure.savefig``, ...). The
            temporary name keeps ``path``'s suffix, so writers that pick a format by suffix pick the right one.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=f".tmp{path.suffix}")
    os.close(fd)
    try:
        write(Path(tmp))
        # mkstemp creates 0600; what the project writes (datasets, reports) is meant to be read by others.
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_lines(path: str | os.PathLike, lines: Iterable[str]) -> int:
    """Writes text lines (UTF-8) atomically.

    Args:
        path: The file to create or replace; its folder must exist.
        lines: Lines including their newlines (consumed as they are written: a generator is fine).

    Returns:
        Number of lines written.
    """
    count = 0

    def write(tmp: Path) -> None:
        nonlocal count
        with tmp.open("w", encoding="utf-8") as handle:
            for line in lines:
                handle.write(line)
                count += 1

    atomic_write(path, write)
    return count


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Writes a text file (UTF-8) atomically.

    Args:
        path: The file to create or replace; its folder must exist.
        text: Its content.
    """
    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def atomic_write_folder(target: str | os.PathLike, save: Callable[[Path], object]) -> None:
    """Writes a folder through a temporary sibling and renames it into place, replacing any previous one.

    A reader sees the old folder, then (after a brief absence) the new one, never a half-written one.

    Args:
        target: The folder to create or replace.
        save: Writes the content into the folder it is given (which exists and is empty), e.g.
            ``tokenizer.save_pretrained``.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"))
    try:
        os.chmod(staging, 0o777 & ~_umask())  # mkdtemp makes it private; the result should not be
        save(staging)
        if target.exists():
            # Renaming onto a non-empty folder fails: move the old one aside first, delete it once the new is in.
            old = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".old"))
            os.replace(target, old)
            os.replace(staging, target)
            shutil.rmtree(old)
        else:
            os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
