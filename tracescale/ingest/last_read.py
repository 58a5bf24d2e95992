"""The rank traces the map step read in this process (the last one, and all of a small
study's), handed to the replay once.

Why: the replay builds its graph from one rank's trace, and reads that file a second time
because the map step frees each trace after classifying it (workers hold one rank at a time;
the parent never holds them all). Where the map ran in this process (one job, or one file)
and its last file is the one the replay asks for (always so for a single-trace study: an
inference trace, one GPU), the decode and classification are not repeated. The last trace
is dropped before the next file is decoded, and the replay takes it (the memo no longer holds
it), so memory stays bounded by one rank, plus ``HELD_BYTES``:

below that bound the map step keeps every trace it reads (a small study's: all of them
together no larger than one large rank), because the replay re-reads one rank per run, chosen
only once every rank is classified, and decoding those few again was a tenth of a small
pipeline study's projection stage. A trace past the bound is kept only as the last one read;
the analysis drops what no replay took.

What classification found in every rank the map step computed (its collective instances, a
small table the map's results hold anyway) is kept too, until the analysis ends: the replay's
representative rank is rarely the last file read, and its trace must then be decoded again,
but classifying it again would only find the same instances.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from tracescale.ingest.trace import RankTrace

#: (path, rank, rules digest, memory budget) -> (trace, what classification found in it)
Key = tuple[str, int, str, int]

#: Bytes of event columns and names that the traces kept besides the last one may hold.
HELD_BYTES = 64 * 2**20

_kept: dict[Key, tuple[RankTrace, Any]] = {}
#: Key -> (trace, found, bytes): every trace read while they fit in ``HELD_BYTES``
_held: dict[Key, tuple[RankTrace, Any, int]] = {}
#: Key -> what classification found, for every rank the current map step computed
_found: dict[Key, Any] = {}
_keeping = False


@contextmanager
def keeping_last_read() -> Iterator[None]:
    """While inside, :func:`remember` keeps the last trace (the map step in this process)."""
    global _keeping
    _keeping = True
    try:
        yield
    finally:
        _keeping = False


def forget() -> None:
    """Drop what is kept, traces and findings: when a map step starts and an analysis ends."""
    _kept.clear()
    _held.clear()
    _found.clear()


def drop_trace() -> None:
    """Drop the last trace kept (not the findings, nor the traces ``HELD_BYTES`` bounds):
    before another trace is decoded."""
    _kept.clear()


def note_found(key: Key, found: Any) -> None:
    """Keep what classifying the rank under ``key`` found (the map step's computed results,
    from this process or a worker: the same table the replay's classification would give)."""
    _found[key] = found


def found_for(key: Key) -> Any | None:
    """What the map step's classification found under ``key``; None where it computed none."""
    return _found.get(key)


def remember(key: Key, trace: RankTrace, found: Any) -> None:
    """Keep ``trace`` and ``found`` under ``key``, in place of anything kept before (only
    inside :func:`keeping_last_read`; a worker process keeps nothing)."""
    _kept.clear()
    if not _keeping:
        return
    _kept[key] = (trace, found)
    size = _held_bytes(trace)
    if size is not None and sum(v[2] for v in _held.values()) + size <= HELD_BYTES:
        _held[key] = (trace, found, size)


def _held_bytes(trace: RankTrace) -> int | None:
    """Bytes of ``trace``'s event columns and names (what keeping it holds, roughly); None
    where it has no such columns (not held: its size is unknown)."""
    events = getattr(trace, "events", None)
    if events is None or not hasattr(events, "__dict__"):
        return None
    arrays = sum(int(c.nbytes) for c in vars(events).values() if isinstance(c, np.ndarray))
    return arrays + sum(len(t) for t in getattr(trace, "strings", ()))


def take(key: Key) -> tuple[RankTrace, Any] | None:
    """What was kept under ``key`` (the last trace read, or one held under ``HELD_BYTES``), no
    longer kept; None where neither is that file."""
    hit = _kept.pop(key, None)
    _kept.clear()
    held = _held.pop(key, None)
    return hit if hit is not None else (held[:2] if held is not None else None)
