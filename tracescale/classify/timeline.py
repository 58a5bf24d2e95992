"""Interval arithmetic on one rank's timeline: every instant gets exactly one category.

All interval sets are cut at the union of their boundaries into elementary segments; within a
segment each layer is either on or off, so a priority ``np.select`` gives one category per
segment and the categories of a step sum to its window exactly (integer nanoseconds).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tracescale.categories import CATEGORIES

I64 = npt.NDArray[np.int64]
I8 = npt.NDArray[np.int8]
BOOL = npt.NDArray[np.bool_]

CAT = {name: i for i, name in enumerate(CATEGORIES)}


def coverage(points: I64, starts: I64, ends: I64) -> BOOL:
    """Which elementary segments ``[points[i], points[i+1])`` lie inside any interval."""
    nseg = max(points.shape[0] - 1, 0)
    if starts.shape[0] == 0 or nseg == 0:
        return np.zeros(nseg, dtype=np.bool_)
    delta = np.zeros(points.shape[0] + 1, dtype=np.int64)
    np.add.at(delta, np.searchsorted(points, starts, side="left"), 1)
    np.add.at(delta, np.searchsorted(points, ends, side="left"), -1)
    return np.cumsum(delta)[:nseg] > 0


@dataclass(frozen=True)
class Segments:
    """A rank's categorized timeline: merged runs of one category, ns, sorted, non-overlapping."""

    start: I64
    end: I64
    cat: I8

    def time_in(self, lo: int, hi: int) -> npt.NDArray[np.float64]:
        """Seconds of each category inside ``[lo, hi)``."""
        out = np.zeros(len(CATEGORIES), dtype=np.float64)
        if hi <= lo or self.start.shape[0] == 0:
            return out
        i0 = int(np.searchsorted(self.end, lo, side="right"))
        i1 = int(np.searchsorted(self.start, hi, side="left"))
        if i1 <= i0:
            return out
        s = np.maximum(self.start[i0:i1], lo)
        e = np.minimum(self.end[i0:i1], hi)
        np.add.at(out, self.cat[i0:i1], np.maximum(e - s, 0) / 1e9)
        return out


def merge_runs(seg_start: I64, seg_end: I64, cat: I8) -> Segments:
    """Merge adjacent segments of the same category (keeps parent-side memory small)."""
    if seg_start.shape[0] == 0:
        return Segments(seg_start, seg_end, cat)
    brk = np.ones(seg_start.shape[0], dtype=np.bool_)
    brk[1:] = (cat[1:] != cat[:-1]) | (seg_start[1:] != seg_end[:-1])
    idx = np.flatnonzero(brk)
    last = np.append(idx[1:] - 1, seg_start.shape[0] - 1)
    return Segments(seg_start[idx].copy(), seg_end[last].copy(), cat[idx].copy())


def last_at_or_before(times_sorted: I64, query: I64) -> I64:
    """For each query time, the latest time <= it (or int64 min when none)."""
    pos = np.searchsorted(times_sorted, query, side="right") - 1
    out = np.full(query.shape[0], np.iinfo(np.int64).min, dtype=np.int64)
    ok = pos >= 0
    out[ok] = times_sorted[pos[ok]]
    return out


def relabel(segs: Segments, lo: I64, hi: I64, source: I8, target: int) -> Segments:
    """Segments inside any ``[lo, hi)`` whose category is in ``source`` become ``target``."""
    if lo.shape[0] == 0 or segs.start.shape[0] == 0:
        return segs
    points = np.unique(np.concatenate([segs.start, segs.end, lo, hi]))
    piece_s, piece_e = points[:-1], points[1:]
    pos = np.searchsorted(segs.start, piece_s, side="right") - 1
    inside = (pos >= 0) & (piece_s < segs.end[np.clip(pos, 0, None)])
    cat = segs.cat[np.clip(pos, 0, None)]
    hit = coverage(points, lo, hi) & np.isin(cat, source)
    cat = np.where(hit, np.int8(target), cat).astype(np.int8)
    return merge_runs(piece_s[inside], piece_e[inside], cat[inside])
