"""The last rank trace the map step read in this process, handed to the replay once.

Why: the replay builds its graph from one rank's trace, and reads that file a second time
because the map step frees each trace after classifying it (workers hold one rank at a time;
the parent never holds them all). Where the map ran in this process (one job, or one file)
and its last file is the one the replay asks for (always so for a single-trace study: an
inference trace, one GPU), the decode and classification are not repeated. At most one
trace is kept, it is dropped before the next file is decoded, and the replay takes it (the
memo no longer holds it), so memory stays bounded by one rank.

What classification found in every rank the map step computed (its collective instances, a
small table the map's results hold anyway) is kept too, until the analysis ends: the replay's
representative rank is rarely the last file read, and its trace must then be decoded again,
but classifying it again would only find the same instances.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tracescale.ingest.trace import RankTrace

#: (path, rank, rules digest, memory budget) -> (trace, what classification found in it)
Key = tuple[str, int, str, int]

_kept: dict[Key, tuple[RankTrace, Any]] = {}
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
    _found.clear()


def drop_trace() -> None:
    """Drop the kept trace (not the findings): before another trace is decoded."""
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
    if _keeping:
        _kept[key] = (trace, found)


def take(key: Key) -> tuple[RankTrace, Any] | None:
    """What was kept under ``key``, no longer kept; None where another file was read last."""
    hit = _kept.pop(key, None)
    _kept.clear()
    return hit
