"""The process heap on a CPU: keep freed memory for the next training step instead of handing it back.

A CPU training step allocates and frees activations of tens of megabytes in every layer. glibc's default serves
blocks that large with ``mmap`` and unmaps them when freed, and trims freed memory at the top of the heap, so each step
faults in and zeroes its activations' pages again: over 7 steps of the embedded model's CPU recipe the kernel's time
(``sys``) fell from 25 s to 9.5 s with freed memory kept, and steps ran 1.22x faster (docs/benchmarks-history.md, "Training
step"). ``mallopt`` sets what the ``MALLOC_*_`` environment variables would, from inside the process.
"""

from __future__ import annotations

import ctypes
import sys

# mallopt's parameter numbers (glibc's malloc.h).
M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3

# glibc's ceiling for the mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX): blocks up to 32 MiB come from the
# heap and are reused; larger ones are still mapped and unmapped.
MMAP_THRESHOLD = 32 * 1024 * 1024
# Free memory the heap may keep at its top before trimming (mallopt takes a C int: the largest), and the margin
# each growth of the heap takes, about a step's activations.
TRIM_THRESHOLD = 2**31 - 1
TOP_PAD = 512 * 1024**2


def hold_freed_memory() -> bool:
    """Tells glibc's allocator to keep freed blocks of up to 32 MiB and up to 2 GiB of free heap for reuse.

    The process's resident memory stays near its peak instead of falling between steps; ``malloc_trim`` (which
    ``ModelPolicy.close`` calls after each live session) still returns it on request.

    Returns:
        Whether the settings took (``False`` off glibc, where there is nothing to set).
    """
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None)
    if not hasattr(libc, "mallopt"):  # musl has none
        return False
    settings = ((M_MMAP_THRESHOLD, MMAP_THRESHOLD), (M_TRIM_THRESHOLD, TRIM_THRESHOLD), (M_TOP_PAD, TOP_PAD))
    return all(libc.mallopt(parameter, value) == 1 for parameter, value in settings)
