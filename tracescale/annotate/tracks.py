"""One rank's attribution as trace-viewer slices: a category track and a step track (ns).

The category track is the map step's categorized timeline (the tiling each step's breakdown
is summed from) after the run-level corrections the breakdown also gets: single-rank work
relabelled, and each instant a rank spent waiting in a collective for a late rank given what
the late rank was doing at that instant (the cause). Slices are cut at step boundaries, so the
slices of a step tile it exactly: their durations sum to the step to the nanosecond.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from tracescale.categories import CATEGORIES
from tracescale.classify.rank import RankResult
from tracescale.classify.run import Wait
from tracescale.classify.timeline import CAT, I64

_COMM = CAT["communication"]


@dataclass(frozen=True, slots=True)
class Slice:
    """One complete event of an added track: [start_ns, end_ns) on the trace's own clock."""

    start_ns: int
    end_ns: int
    name: str
    args: dict[str, Any] = field(default_factory=dict)


def step_windows(result: RankResult) -> tuple[I64, I64, I64]:
    """(step numbers, start ns, end ns) of the rank's step windows, on the trace's clock.

    The step table keeps starts in seconds from the first window, whose start is the first
    segment of the tiling; both are exact in float64 at nanosecond resolution.
    """
    steps = result.steps
    origin = int(result.segments.start[0]) if result.segments.start.shape[0] else 0
    start = origin + np.round(steps["start"].to_numpy(dtype=np.float64) * 1e9).astype(np.int64)
    dur = np.round(steps["duration"].to_numpy(dtype=np.float64) * 1e9).astype(np.int64)
    return steps["step"].to_numpy(dtype=np.int64), start, start + dur


def _category_at(result: RankResult, times: I64) -> I64:
    """The rank's category at each instant (-1 outside its step windows)."""
    segs = result.segments
    if segs.start.shape[0] == 0:
        return np.full(times.shape[0], -1, dtype=np.int64)
    pos = np.searchsorted(segs.start, times, side="right") - 1
    cat = segs.cat[np.clip(pos, 0, None)].astype(np.int64)
    cat[(pos < 0) | (times >= segs.stop)] = -1
    return cat


def _split_in_proportion(
    s: I64,
    e: I64,
    cat: I64,
    wait_of: I64,
    untraced: list[tuple[int, npt.NDArray[np.float64]]],
) -> tuple[I64, I64, I64, I64, npt.NDArray[np.bool_]]:
    """Each listed segment cut into consecutive parts, one per category of its share."""
    split = np.zeros(s.shape[0], dtype=np.bool_)
    if not untraced:
        return s, e, cat, wait_of, split
    parts: list[tuple[int, int, int, int]] = []
    for i, share in untraced:
        a, length = int(s[i]), int(e[i] - s[i])
        bounds = a + np.round(np.cumsum(share) * length).astype(np.int64)
        bounds[-1] = a + length
        start = a
        for c, end in enumerate(bounds.tolist()):
            if end > start:
                parts.append((start, end, c, int(wait_of[i])))
            start = max(start, end)
    drop = np.zeros(s.shape[0], dtype=np.bool_)
    drop[[i for i, _ in untraced]] = True
    add = np.array(parts, dtype=np.int64).reshape(-1, 4)
    s = np.concatenate([s[~drop], add[:, 0]])
    order = np.argsort(s, kind="stable")
    e = np.concatenate([e[~drop], add[:, 1]])[order]
    cat = np.concatenate([cat[~drop], add[:, 2]])[order]
    wait_of = np.concatenate([wait_of[~drop], add[:, 3]])[order]
    split = np.concatenate([split[~drop], np.ones(add.shape[0], dtype=np.bool_)])[order]
    return s[order], e, cat, wait_of, split


def category_slices(
    me: RankResult, by_rank: Mapping[int, RankResult], waits: Sequence[Wait]
) -> Iterator[Slice]:
    """The category track of ``me`` (see the module doc); ``waits`` are this rank's. The
    slices come one at a time, made as the writer asks (a million steps' worth of slices
    and their ``args`` held together took gigabytes)."""
    numbers, w_start, w_end = step_windows(me)
    segs = me.segments
    if segs.start.shape[0] == 0 or numbers.shape[0] == 0:
        return iter(())
    pieces = sorted((a, b, w) for w in waits for a, b in w.pieces)
    pts = [segs.start, segs.end, w_start, w_end]
    for a, b, w in pieces:
        pts.append(np.array([a, b], dtype=np.int64))
        late = by_rank.get(w.late_rank)
        if late is not None and late.segments.start.shape[0]:
            there = np.append(late.segments.start, late.segments.stop) - w.shift_ns
            pts.append(there[(there > a) & (there < b)])
    points = np.unique(np.concatenate(pts))
    s, e = points[:-1], points[1:]
    cat = _category_at(me, s)
    wait_of = np.full(s.shape[0], -1, dtype=np.int64)
    untraced: list[tuple[int, npt.NDArray[np.float64]]] = []
    for k, (a, b, w) in enumerate(pieces):
        lo, hi = np.searchsorted(s, a, side="left"), np.searchsorted(s, b, side="left")
        wait_of[lo:hi] = k
        late = by_rank.get(w.late_rank)
        if late is None:
            continue
        theirs = _category_at(late, s[lo:hi] + w.shift_ns)
        # What the late rank did meanwhile; while it too communicated, this stays communication.
        take = (theirs >= 0) & (theirs != _COMM)
        cat[lo:hi] = np.where(take, theirs, cat[lo:hi])
        gap = theirs < 0
        if gap.any() and not gap.all():
            # Instants the late rank did not trace (outside its steps): like the breakdown, in
            # proportion to what it did during the rest of this wait.
            lengths = (e[lo:hi] - s[lo:hi]).astype(np.float64)
            share = np.bincount(theirs[~gap], weights=lengths[~gap], minlength=len(CATEGORIES))
            untraced += [(int(i), share / share.sum()) for i in np.flatnonzero(gap) + lo]
    s, e, cat, wait_of, split = _split_in_proportion(s, e, cat, wait_of, untraced)
    step_of = np.searchsorted(w_start, s, side="right") - 1
    keep = (cat >= 0) & (step_of >= 0) & (s < w_end[np.clip(step_of, 0, None)])
    s, e, cat, wait_of, step_of = s[keep], e[keep], cat[keep], wait_of[keep], step_of[keep]
    split = split[keep]
    if s.shape[0] == 0:
        return iter(())
    brk = np.ones(s.shape[0], dtype=np.bool_)
    brk[1:] = (
        (cat[1:] != cat[:-1])
        | (wait_of[1:] != wait_of[:-1])
        | (step_of[1:] != step_of[:-1])
        | (split[1:] != split[:-1])
        | (s[1:] != e[:-1])
    )
    first = np.flatnonzero(brk)
    last = np.append(first[1:] - 1, s.shape[0] - 1)
    return _category_track(s, e, cat, wait_of, step_of, split, first, last, numbers, pieces)


def _category_track(
    s: I64,
    e: I64,
    cat: I64,
    wait_of: I64,
    step_of: I64,
    split: npt.NDArray[np.bool_],
    first: I64,
    last: I64,
    numbers: I64,
    pieces: Sequence[tuple[int, int, Wait]],
) -> Iterator[Slice]:
    for i, j in zip(first.tolist(), last.tolist(), strict=True):
        name = CATEGORIES[int(cat[i])]
        args: dict[str, Any] = {"category": name, "step": int(numbers[step_of[i]])}
        if wait_of[i] >= 0:
            w = pieces[int(wait_of[i])][2]
            cause = name if name != "communication" else "communication (no cause found)"
            args.update(
                wait_for_rank=w.late_rank,
                collective=w.collective,
                collective_seq=w.seq,
                cause=cause,
                why=f"waiting in {w.collective} #{w.seq} for rank {w.late_rank}, "
                f"which was in {name} meanwhile",
            )
            if split[i]:
                args["why"] = (
                    f"waiting in {w.collective} #{w.seq} for rank {w.late_rank}, which has no "
                    "trace at these instants: split in proportion to what it did during the "
                    "rest of the wait"
                )
        yield Slice(int(s[i]), int(e[j]), name, args)


def step_slices(me: RankResult, steps: pd.DataFrame) -> tuple[int, Iterator[Slice]]:
    """How many step windows, and one slice per window made as the writer asks, its
    breakdown (the report's numbers) in ``args``.

    The rows are read as columns, each step's by its position (a row lookup per step took
    minutes on a trace of a million steps)."""
    numbers, w_start, w_end = step_windows(me)
    extras = ("communication_wait", "overlapped_communication")
    rows = steps[steps["rank"] == me.rank].drop_duplicates("step", keep="last")
    at = pd.Index(rows["step"]).get_indexer(numbers).tolist()
    cols = {c: rows[c].to_numpy(dtype=np.float64).tolist() for c in (*CATEGORIES, *extras)}

    def track() -> Iterator[Slice]:
        for n, a, b, p in zip(numbers.tolist(), w_start.tolist(), w_end.tolist(), at, strict=True):
            args: dict[str, Any] = {"step": n, "duration_s": (b - a) / 1e9}
            if p >= 0:
                args["breakdown_s"] = {c: cols[c][p] for c in CATEGORIES}
                for extra in extras:
                    args[f"{extra}_s"] = cols[extra][p]
            yield Slice(a, b, f"step {n}: {(b - a) / 1e6:.3f} ms", args)

    return len(numbers), track()
