"""Perfect attribution (docs/DESIGN.md's category rules) applied to the simulator's intervals.

This is the reference a classifier is judged against, so it follows the rules literally:
GPU compute > memcpy > communication kernel; else the main thread's state: dataloader, sync
call, single-rank reduction, host collective, then host time after a sync's return until the
next GPU activity (sync), other ops (host). Waits inside collectives take the category of the
last-arriving rank over the same interval (cross-rank cause).
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass

from tracescale.categories import CATEGORIES
from tracescale.simulate.schedule import StepRecord

WAIT = "wait"
Segment = tuple[int, int, str, int]  # start, end, category (or WAIT), late rank


@dataclass
class StepTruth:
    """One rank-step's exact seconds per category plus the communication extras (ns)."""

    rank: int
    step: int
    start: int
    duration: int
    categories: dict[str, int]
    overlapped: int  # communication kernel time under compute
    wait: int  # raw time waiting in collectives (before cause)
    transfer: int  # communication kernel transfer time


Payload = tuple[int, int, str]


class _Cursor:
    """Membership of sorted, disjoint intervals for monotonically advancing query points."""

    def __init__(self, items: list[tuple[int, int, Payload]]) -> None:
        self.items, self.i = items, 0

    def at(self, t: int) -> Payload | None:
        while self.i < len(self.items) and self.items[self.i][1] <= t:
            self.i += 1
        if self.i < len(self.items) and self.items[self.i][0] <= t:
            return self.items[self.i][2]
        return None


def base_partition(rec: StepRecord) -> tuple[list[Segment], int, int, int]:
    """The step window cut into categorized segments; waits left as WAIT with the late rank.

    Returns (segments, overlapped, raw wait, transfer) in ns.
    """
    lo, hi = rec.start, rec.end
    points = {lo, hi}
    for a, b in rec.compute:
        points.update((a, b))
    for a, b in rec.memcpy:
        points.update((a, b))
    for a, x, b, _ in rec.comm:
        points.update((a, x, b))
    for a, b, _, _, w in rec.labels:
        points.update((a, b))
        if w >= 0:
            points.add(w)
    cuts = sorted(t for t in points if lo <= t <= hi)
    none: Payload = (0, 0, "")
    compute = _Cursor([(a, b, none) for a, b in rec.compute])
    memcpy = _Cursor([(a, b, none) for a, b in rec.memcpy])
    comm = _Cursor([(a, b, (x, late, "")) for a, x, b, late in rec.comm])
    labels = _Cursor([(a, b, (late, w, lab)) for a, b, lab, late, w in rec.labels])
    segments: list[Segment] = []
    overlapped = 0
    for a, b in itertools.pairwise(cuts):
        if b <= a:
            continue
        cat, late = _classify(rec, a, compute, memcpy, comm, labels)
        if cat == "compute" and comm.at(a) is not None:
            overlapped += b - a
        if segments and segments[-1][2] == cat and segments[-1][3] == late and segments[-1][1] == a:
            segments[-1] = (segments[-1][0], b, cat, late)
        else:
            segments.append((a, b, cat, late))
    wait = sum(x - a for a, x, _, _ in rec.comm)
    wait += sum(w - a for a, _, lab, _, w in rec.labels if lab == "collective")
    transfer = sum(b - x for _, x, b, _ in rec.comm)
    return segments, overlapped, wait, transfer


def _classify(
    rec: StepRecord, t: int, compute: _Cursor, memcpy: _Cursor, comm: _Cursor, labels: _Cursor
) -> tuple[str, int]:
    if compute.at(t) is not None:
        return "compute", -1
    if memcpy.at(t) is not None:
        return "memcpy", -1
    kernel = comm.at(t)
    if kernel is not None:
        xfer, late, _ = kernel
        return (WAIT, late) if t < xfer and late != rec.rank else ("communication", -1)
    label = labels.at(t)
    if label is not None:
        late, wait_end, lab = label
        if lab == "collective":
            return (WAIT, late) if t < wait_end and late != rec.rank else ("communication", -1)
        return {"dataloader": "dataloader", "sync_call": "sync", "reduction": "reduction"}[lab], -1
    # Any other host time: after a sync's return until the next GPU activity -> sync. The
    # first step of a trace is treated like the others (the loop synced the step before).
    if t < rec.first_gpu or t >= rec.sync_return:
        return "sync", -1
    return "host", -1


def resolve(
    records: dict[int, list[StepRecord]],
) -> dict[int, list[StepTruth]]:
    """Attribute every rank-step, replacing waits by what the late rank was doing."""
    base: dict[int, list[tuple[list[Segment], int, int, int]]] = {
        r: [base_partition(rec) for rec in recs] for r, recs in records.items()
    }
    out: dict[int, list[StepTruth]] = {}
    for r, recs in records.items():
        rows = []
        for k, rec in enumerate(recs):
            segments, overlapped, wait, transfer = base[r][k]
            cats = dict.fromkeys(CATEGORIES, 0)
            for a, b, cat, late in segments:
                if cat != WAIT:
                    cats[cat] += b - a
                    continue
                for cause, length in _cause(base[late][k][0], a, b):
                    cats[cause] += length
            rows.append(
                StepTruth(
                    rank=r,
                    step=rec.step,
                    start=rec.start,
                    duration=rec.end - rec.start,
                    categories=cats,
                    overlapped=overlapped,
                    wait=wait,
                    transfer=transfer,
                )
            )
        out[r] = rows
    return out


def _cause(segments: list[Segment], a: int, b: int) -> list[tuple[str, int]]:
    """Categories of the late rank over ``[a, b]`` (a wait there falls back to communication)."""
    starts = [s[0] for s in segments]
    i = max(0, bisect.bisect_right(starts, a) - 1)
    out = []
    covered = 0
    while i < len(segments) and segments[i][0] < b:
        s, e, cat, _ = segments[i]
        length = min(e, b) - max(s, a)
        if length > 0:
            out.append((cat if cat != WAIT else "communication", length))
            covered += length
        i += 1
    if covered < b - a:
        out.append(("communication", b - a - covered))
    return out
