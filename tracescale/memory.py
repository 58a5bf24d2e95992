"""Process memory: hand the C heap's freed pages back to the system between large pieces of work.

Why a module of its own: both the map step (one rank file after another in one process) and
the replay (a second decode, then a graph of millions of nodes) free large column buffers and
then allocate new ones; glibc keeps freed heap pages mapped, so without this the peak of a
process grows with the number of rank files it has read, not with the largest one.
"""

from __future__ import annotations

import ctypes
import sys

_M_MMAP_THRESHOLD, _MMAP_FROM = -3, 1 << 20


def return_freed_memory() -> None:
    """Hand freed C heap memory back to the system (glibc; nothing elsewhere).

    glibc raises its mmap threshold (up to 32 MiB) each time a mapped block is freed, so after
    the first rank file numpy's column-sized buffers come from the heap, and freed ones stay
    mapped between live ones. So the threshold is fixed at 1 MiB (every large buffer is its own
    mapping, returned when freed; this stays set for the process) and the heap's free pages are
    trimmed now.
    """
    if sys.platform != "linux":
        return
    try:
        libc = ctypes.CDLL(None)
        mallopt, trim = libc.mallopt, libc.malloc_trim
    except (OSError, AttributeError):  # musl and other libcs: nothing to tune
        return
    mallopt(_M_MMAP_THRESHOLD, _MMAP_FROM)
    trim(0)
