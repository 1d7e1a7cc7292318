"""Reading a file that a data file, a config or a command line names: a regular file, of bounded size, or a clear error.

Data is untrusted. A domain file path, a timeline file or a YAML config can name ``/dev/zero``, a FIFO that never
answers, or a multi-gigabyte file; reading it whole would hang or exhaust memory. Every reader of such a file goes
through :func:`read_data_bytes` or :func:`read_data_text`: the file is opened without blocking, checked to be a
regular file (after ``open``, on the descriptor itself, so a path swapped between the check and the read is caught
too), and read only up to its cap.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

__all__ = ["MAX_DATA_FILE_BYTES", "DataFileError", "open_data_file", "read_data_bytes", "read_data_text"]

MAX_DATA_FILE_BYTES = 64 * 1024 * 1024
"""The largest config or domain file read (64 MiB): far above any hand-written one, far below a machine's memory."""


class DataFileError(ValueError):
    """A file named by data or a config that is not a regular file, is too large, or is not text."""


def open_data_file(path: str | os.PathLike) -> BinaryIO:
    """Opens a regular file for reading in binary, for a reader that streams it (a timeline file of any size).

    The caller bounds what it reads at a time (a line, a chunk); the size of the whole file is not capped.

    Args:
        path: The file.

    Returns:
        The open file; close it (``with open_data_file(path) as handle:``).

    Raises:
        DataFileError: Naming the path, when it is not a regular file (a folder, a device, a FIFO, a socket).
        OSError: When it cannot be opened (missing, no permission); the message names the file.
    """
    # O_NONBLOCK: opening a FIFO with no writer would otherwise wait forever before fstat could refuse it.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    handle = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        handle.close()
        raise DataFileError(f"{path}: not a regular file")
    return handle


def read_data_bytes(path: str | os.PathLike, max_bytes: int = MAX_DATA_FILE_BYTES) -> bytes:
    """Reads a regular file of at most ``max_bytes`` bytes.

    Args:
        path: The file.
        max_bytes: The cap; a larger file is refused without being read.

    Returns:
        The file's bytes.

    Raises:
        DataFileError: Naming the path, when it is not a regular file (a folder, a device, a FIFO, a socket) or is
            larger than ``max_bytes``.
        OSError: When it cannot be opened (missing, no permission); the message names the file.
    """
    with open_data_file(path) as handle:
        info = os.fstat(handle.fileno())
        if info.st_size > max_bytes:
            raise DataFileError(f"{path}: {info.st_size} bytes, over the limit of {max_bytes}")
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:  # the file grew while it was read
        raise DataFileError(f"{path}: over the limit of {max_bytes} bytes")
    return data


def read_data_text(path: str | os.PathLike, max_bytes: int = MAX_DATA_FILE_BYTES) -> str:
    """Reads a regular UTF-8 text file of at most ``max_bytes`` bytes (see :func:`read_data_bytes`).

    Raises:
        DataFileError: As :func:`read_data_bytes`, and when the bytes are not UTF-8 (naming the byte offset).
        OSError: When it cannot be opened.
    """
    data = read_data_bytes(path, max_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise DataFileError(f"{Path(path)}: not a text file (byte {error.start}: {error.reason})") from None
