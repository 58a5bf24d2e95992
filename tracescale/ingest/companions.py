"""Execution traces beside the rank files of a run folder: which rank each belongs to, and
whether its data dependencies can be read into that rank's replay graph.

Why a module of its own: pairing is discovery's business (one note per ET, the pair carried on
the rank file into the cache keys and the replay), while the ET's contents are read by
:mod:`tracescale.ingest.execution_trace` only when a pair is found (imported then: the rest of
discovery reads file heads alone).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from tracescale.ingest.sniff import ET_NOTE, FileHead, stamp

if TYPE_CHECKING:
    from tracescale.ingest.discover import RankFile, RunSpec

_NAME_RANK_RE = re.compile(r"(?:rank|worker)[-_]?(\d+)|(?:^|[^0-9])(\d+)(?=\D*$)", re.I)


def _name_rank(path: str) -> int | None:
    """The rank a file name states: ``rank3``/``worker3``, else its last number."""
    base = os.path.basename(path).split(".")[0]
    m = _NAME_RANK_RE.search(base)
    if m is None:
        return None
    return int(m.group(1) or m.group(2))


def pair_companion(et: FileHead, ranks: list[tuple[FileHead, int]]) -> tuple[FileHead, str] | None:
    """The rank file an execution trace belongs to and why: the same pid, else the same rank
    in the file name, else the only rank file of the folder; None when none qualifies."""
    if et.pids:
        same = [h for h, _ in ranks if et.pids[0] in h.pids]
        if len(same) == 1:
            return same[0], f"same pid {et.pids[0]}"
    want = _name_rank(et.path)
    if want is not None:
        same = [h for h, r in ranks if r == want]
        if len(same) == 1:
            return same[0], f"same rank {want}"
    if len(ranks) == 1:
        return ranks[0][0], "the only rank file beside it"
    return None


def companion_notes(
    companions: list[FileHead], heads: list[FileHead], files: Iterable[tuple[str, int]]
) -> list[str]:
    """The notes of :func:`pair_companions` alone."""
    return pair_companions(companions, heads, files)[0]


def pair_companions(
    companions: list[FileHead], heads: list[FileHead], files: Iterable[tuple[str, int]]
) -> tuple[list[str], dict[str, tuple[str, int]]]:
    """One line per execution trace of a run folder: which rank file it pairs with and how
    many data dependencies it gave, or why it is left out; and, per rank file whose ET is
    used, (ET path, dependencies read). ``heads``: the folder's Kineto heads; ``files``:
    (path, rank) of those the run kept.

    A paired ET is read whole (:mod:`tracescale.ingest.execution_trace`, bounded); its
    cross-thread dependencies go into the replay graph. One that does not read, names no
    record-function ids or comes from another process (its pid is not the rank file's) is
    named with the reason and not used.
    """
    rank_of = dict(files)
    ranks = [(h, rank_of[h.path]) for h in heads if h.path in rank_of]
    out = []
    used: dict[str, tuple[str, int]] = {}
    for et in companions:
        found = pair_companion(et, ranks)
        name = os.path.basename(et.path)
        what = f"{ET_NOTE} (schema {et.schema})"
        if found is None:
            out.append(
                f"{et.path}: {what} with no Kineto rank file of the same pid or rank beside "
                "it: not analyzed"
            )
            continue
        head, why = found
        rank = next(r for h, r in ranks if h is head)
        said = f"{et.path}: {what} paired with rank {rank} ({os.path.basename(head.path)}, {why})"
        reason, count = _usable(et, head, used)
        if reason:
            out.append(f"{said}; {name}'s data dependencies are not used: {reason}")
            continue
        used[head.path] = (et.path, count)
        out.append(
            f"{said}; {count} data dependencies across threads read from {name} into the "
            "replay graph"
        )
    return out, used


def _usable(et: FileHead, head: FileHead, used: dict[str, tuple[str, int]]) -> tuple[str, int]:
    """Why ``et`` cannot give ``head``'s rank its dependencies ("" it can), and how many."""
    from tracescale.ingest.execution_trace import ExecutionTraceError, read_dependencies

    if head.path in used:
        return f"{os.path.basename(used[head.path][0])} is already paired with that rank", 0
    if et.pids and head.pids and et.pids[0] not in head.pids:
        return (
            f"its pid {et.pids[0]} is not the rank file's ({head.pids[0]}): record-function "
            "ids match only within one process",
            0,
        )
    try:
        deps = read_dependencies(et.path)
    except ExecutionTraceError as exc:
        return str(exc), 0
    return "", len(deps)


def with_companions(run: RunSpec, paired: dict[str, tuple[str, int]]) -> RunSpec:
    """``run`` with each rank file's paired execution trace (path -> (ET, dependencies))."""
    if not paired:
        return run

    def one(f: RankFile) -> RankFile:
        if f.path not in paired:
            return f
        et, count = paired[f.path]
        return dataclasses.replace(
            f, execution_trace=et, execution_trace_stamp=stamp(et), et_dependencies=count
        )

    groups = tuple(dataclasses.replace(g, files=tuple(map(one, g.files))) for g in run.groups)
    return dataclasses.replace(run, groups=groups)
