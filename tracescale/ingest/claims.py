"""Ceilings on the sizes a trace file (or a folder name, or ``tracescale.toml``) claims.

A trace states numbers that size things: ``distributedInfo.world_size`` and ``rank``, a process
group's ``Group size``, its ``Global rank start`` / ``stride``. They are words, not events: a
400 KB file may claim a world of 10^9 ranks. So nothing is allocated in proportion to such a
number (missing ranks are counted, not listed; a group's members are built from a progression
only up to a total ceiling), and a number beyond its ceiling is refused in one line naming the
file and the field (exit 3), since no job has it: the file is corrupt or hostile.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from tracescale.errors import InvalidTraceError
from tracescale.ingest.sniff import FileHead

#: Most ranks a world may have: the largest jobs have ~10^5; more is a corrupt number.
MAX_WORLD_SIZE = 1 << 20
#: Most process-group members one trace may describe as progressions (``Global rank start``
#: + k * ``stride``, k < ``Group size``), over all its distinct groups. A rank belongs to a
#: handful of groups, each at most the world, so real traces stay far below.
MAX_GROUP_MEMBERS = 1 << 21


def _shown(value: int) -> str:
    """A claimed number as an error line shows it: a 5,000-digit claim stays one short line."""
    return str(value) if value < 10**19 else "of 20 digits or more"


def check_world_size(value: int, *, path: str, field: str) -> int:
    """``value`` when it is a possible world size, else InvalidTraceError naming ``field``."""
    if value > MAX_WORLD_SIZE:
        raise InvalidTraceError(
            f"{field} {_shown(value)} is beyond the ceiling of {MAX_WORLD_SIZE} ranks "
            "(a corrupt number, not a job)",
            path=path,
        )
    return value


def check_rank(value: int, *, path: str, field: str) -> int:
    """``value`` when it is a possible rank (below :data:`MAX_WORLD_SIZE`), else an error."""
    if value >= MAX_WORLD_SIZE:
        raise InvalidTraceError(
            f"{field} {_shown(value)} is beyond the ceiling of {MAX_WORLD_SIZE} ranks "
            "(a corrupt number, not a rank)",
            path=path,
        )
    return value


#: Largest ProfilerStep number read: 18 digits (int64 holds them; more is no step count).
MAX_STEP_DIGITS = 18


def step_number(digits: str, *, path: str) -> int:
    """The number of a ``ProfilerStep#N`` name; beyond 18 digits an error naming the field
    (numpy's int64 step column cannot hold it, and int() refuses past 4,300 digits)."""
    if len(digits.lstrip("0")) > MAX_STEP_DIGITS:
        shown = digits if len(digits) <= 24 else digits[:20] + "..."
        raise InvalidTraceError(
            f"ProfilerStep#{shown} has a step number beyond {MAX_STEP_DIGITS} digits "
            "(a corrupt number, not a step)",
            path=path,
        )
    return int(digits)


def missing_ranks(present: Iterable[int], world: int, show: int = 10) -> tuple[int, list[int]]:
    """(how many of ranks 0..world-1 are absent, the first ``show`` of them).

    Work and memory grow with the ranks present, never with ``world``: the first absent ranks
    lie among the first ``len(present) + show`` numbers.
    """
    have = {r for r in present if 0 <= r < world}
    first: list[int] = []
    k = 0
    while len(first) < show and k < world:
        if k not in have:
            first.append(k)
        k += 1
    return world - len(have), first


def check_heads(heads: list[FileHead]) -> None:
    """Raise, naming the file and the field, when a head claims a world size or a rank beyond
    the ceiling. Always an error, never a skipped file: such a claim is no damaged file among
    good ones but a number that would size the whole run."""
    for h in heads:
        if h.world_size is not None:
            check_world_size(h.world_size, path=h.path, field="distributedInfo.world_size")
        if h.rank is not None:
            check_rank(h.rank, path=h.path, field="distributedInfo.rank")


def size_detail(heads: list[FileHead]) -> str:
    """Which world sizes the files of one folder claim: each with one file and a count (a
    folder of thousands of files stays a one-line error)."""
    by_size: dict[int | None, list[str]] = {}
    for h in heads:
        by_size.setdefault(h.world_size, []).append(os.path.basename(h.path))
    return ", ".join(
        f"{names[0]}{f' and {len(names) - 1} more' if len(names) > 1 else ''} "
        f"(world size {'unstated' if ws is None else ws})"
        for ws, names in sorted(by_size.items(), key=lambda p: (p[0] is None, p[0] or 0))
    )
