"""Host-thread nodes of a rank's graph: each thread's runtime calls and host-blocking
collectives in time order, the time between them cut at op boundaries into ``gap`` nodes named
after the innermost enclosing op.

Why a module of its own: the host side is where the graph's size comes from (every call brings
a gap, every op boundary cuts one), so it is built as whole arrays per thread. Built one Python
tuple per piece, it was most of the graph's build time and several times the trace's memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tracescale.compiled import Compiled

I64 = npt.NDArray[np.int64]
BOOL = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class ThreadPieces:
    """One thread's pieces in time order: ``event`` is the leaf event of a call/collective piece,
    -1 for a gap; ``op`` is a gap's innermost enclosing op (event index), -1 when none or not a
    gap."""

    start: I64
    end: I64
    event: I64
    op: I64

    def __len__(self) -> int:
        return int(self.start.shape[0])


def _kept_leaves(s: I64, e: I64, cursor: int) -> BOOL:
    """Leaves not nested in the previous kept one: a leaf is kept when it starts at or after the
    end of the last kept leaf (``cursor`` before the first).

    The greedy rule is sequential; its answer is guessed with a running maximum of all earlier
    ends and checked (a mask that satisfies the rule at every leaf is the greedy one, by
    induction over leaves); only when the check fails, the leaves are walked one by one.
    """
    n = len(s)
    if n == 0:
        return np.zeros(0, dtype=np.bool_)
    before = np.maximum.accumulate(np.concatenate([np.array([cursor], np.int64), e[:-1]]))
    keep = s >= before
    last = np.maximum.accumulate(np.where(keep, np.arange(n), -1))
    prev = np.concatenate([np.array([-1]), last[:-1]])
    cur = np.where(prev >= 0, e[np.clip(prev, 0, None)], cursor)
    if np.array_equal(keep, s >= cur):
        return keep
    keep = np.zeros(n, dtype=np.bool_)
    c = cursor
    for k, (a, z) in enumerate(zip(s.tolist(), e.tolist(), strict=True)):
        if a >= c:
            keep[k] = True
            c = z
    return keep


def thread_pieces(
    leaf_start: I64,
    leaf_end: I64,
    leaf_event: I64,
    cursor: int,
    stop: int,
    op_start: I64,
    op_end: I64,
    op_event: I64,
    bounds: I64,
) -> ThreadPieces:
    """A thread's chain of pieces from its leaf events (sorted by start) and its ops.

    Before each kept leaf a gap from the previous leaf's end (``cursor`` before the first; the
    gap may be empty) and one after the last leaf up to ``stop`` when the thread runs on. Gaps
    are cut at every op start and end (and at ``bounds``, the step boundaries) strictly inside
    them, so each gap piece lies within one innermost op.
    """
    keep = _kept_leaves(leaf_start, leaf_end, cursor)
    ks, ke, ki = leaf_start[keep], leaf_end[keep], leaf_event[keep]
    n_leaf = len(ki)
    last = int(ke[-1]) if n_leaf else cursor
    tail = stop > last
    m = 2 * n_leaf + int(tail)
    ps = np.empty(m, dtype=np.int64)
    pe = np.empty(m, dtype=np.int64)
    pi = np.full(m, -1, dtype=np.int64)
    ps[0 : 2 * n_leaf : 2] = np.concatenate([np.array([cursor], np.int64), ke[:-1]])[:n_leaf]
    pe[0 : 2 * n_leaf : 2] = ks
    ps[1 : 2 * n_leaf : 2] = ks
    pe[1 : 2 * n_leaf : 2] = ke
    pi[1 : 2 * n_leaf : 2] = ki
    if tail:
        ps[-1], pe[-1] = last, stop
    del keep, ks, ke, ki  # each temporary goes as soon as it is used: the build's peak
    # Op ordered by start, the longer first at equal starts (the enclosing one).
    order = np.lexsort((-op_end, op_start))
    op_start, op_end, op_event = op_start[order], op_end[order], op_event[order]
    edges = np.unique(np.concatenate([op_start, op_end, bounds.astype(np.int64)]))
    gap = pi < 0
    a = np.searchsorted(edges, ps, side="right")
    z = np.searchsorted(edges, pe, side="left")
    cuts = np.where(gap, np.maximum(z - a, 0), 0)
    count = cuts + 1
    off = np.cumsum(count) - count
    total = int(count.sum())
    s_out = np.empty(total, dtype=np.int64)
    e_out = np.empty(total, dtype=np.int64)
    i_out = np.full(total, -1, dtype=np.int64)
    s_out[off] = ps
    i_out[off] = pi
    e_out[off + cuts] = pe
    del ps, pe, pi, gap, z, count
    n_cuts = int(cuts.sum())
    if n_cuts:
        piece = np.repeat(np.arange(m), cuts)
        j = np.arange(n_cuts) - np.repeat(np.cumsum(cuts) - cuts, cuts)
        at = edges[a[piece] + j]
        e_out[off[piece] + j] = at
        s_out[off[piece] + j + 1] = at
        del piece, j, at
    del a, off, cuts, edges
    op = np.full(total, -1, dtype=np.int64)
    gaps = np.flatnonzero(i_out < 0)
    mid = s_out[gaps]
    mid += e_out[gaps]
    mid //= 2
    inner = innermost(op_start, op_end, mid)
    del mid
    if len(op_event):
        op[gaps] = np.where(inner >= 0, op_event[np.clip(inner, 0, None)], -1)
    return ThreadPieces(s_out, e_out, i_out, op)


def _walk(starts: Any, ends: Any, query: Any, out: Any, stack: Any) -> None:
    """:func:`innermost`'s walk over arrays (compiled) or lists (plain Python)."""
    top = -1
    j, n = 0, len(starts)
    for q in range(len(query)):
        t = query[q]
        while j < n and starts[j] <= t:
            while top >= 0 and ends[stack[top]] <= starts[j]:
                top -= 1
            top += 1
            stack[top] = j
            j += 1
        while top >= 0 and ends[stack[top]] <= t:
            top -= 1
        out[q] = stack[top] if top >= 0 else -1


#: Compiled (numba's on-disk cache) where numba loads: a thread has as many gap pieces as
#: calls, and the plain walk costs a Python int object per op and per piece on top of time.
#: It measured 0.22 s per million elements (the replay pass: 0.5 s), hence its weight.
_compiled_walk: Compiled | None = Compiled(_walk, weight=0.4)


def innermost(op_start: I64, op_end: I64, query: I64) -> I64:
    """Position of the innermost op containing each (sorted) query time, -1 when none.

    Ops sorted by start (the longer first at equal starts): the innermost one containing ``t``
    is the last op starting at or before ``t`` that has not ended, found with a stack of open
    ops in one merge-like walk over ops and queries.
    """
    n = len(op_start)
    walk = _compiled_walk.get(n + len(query)) if _compiled_walk is not None else None
    if walk is not None:
        out = np.empty(len(query), dtype=np.int64)
        walk(
            np.ascontiguousarray(op_start, dtype=np.int64),
            np.ascontiguousarray(op_end, dtype=np.int64),
            np.ascontiguousarray(query, dtype=np.int64),
            out,
            np.empty(max(n, 1), dtype=np.int64),
        )
        return out
    res: list[int] = [0] * len(query)
    _walk(op_start.tolist(), op_end.tolist(), query.tolist(), res, [0] * max(n, 1))
    return np.array(res, dtype=np.int64)


def step_bounds(starts: I64, ends: I64, host_start: I64, host_end: I64) -> tuple[I64, I64]:
    """Per step, the main thread's piece starting at its host start (the first at or after it)
    and the one ending at its host end (the last ending at or before it), as piece positions."""
    m = len(starts)
    first = np.minimum(np.searchsorted(starts, host_start, side="left"), m - 1)
    last = np.maximum(np.searchsorted(ends, host_end, side="right") - 1, 0)
    return first.astype(np.int64), last.astype(np.int64)
