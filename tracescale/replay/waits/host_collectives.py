"""Host-side collectives (gloo) as graph edges: the collective on its runloop thread starts
after the main thread enqueued it, and the main thread's wait for it ends when it ends.

Why: a gloo collective runs on a ``pt_gloo_runloop`` thread, not on a stream, and the trace
records neither the enqueue -> run edge nor the main thread's wait (no ``cudaStreamSynchronize``
to read). Built as measured, the runloop thread is a chain of collectives separated by idle
gaps, and the main thread's wait is an ordinary gap of python time: a projection would keep
both at their measured length, so a faster collective would gain nothing and a slower one cost
nothing. Rewritten here:

- each idle gap of a runloop thread (no enclosing op) runs for no time: the thread is idle,
  not working;
- each collective there starts no earlier than the end of the main-thread node that ended last
  before it started, plus the measured distance (its enqueue lag); one that waited in the
  runloop's queue (the thread still busy with an earlier collective after that node ended)
  starts when the thread is free, after the measured hand-off gap;
- a main-thread gap outside any op (python time: the innermost op is the step annotation or
  none) that spans a collective's end waits for it: it starts at that end and keeps only its
  measured time after it.

With the measured durations the replay gives back the measured timeline (``replay_error``).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import numpy.typing as npt

from tracescale.replay.graph.build import DEV, GAP, HCOLL, Graph
from tracescale.replay.waits.order import after_waits

I64 = npt.NDArray[np.int64]

#: Law groups of main-thread python time outside any op: where a wait for a runloop shows.
_IDLE_GROUPS = frozenset({"gap:", "gap:ProfilerStep"})


def host_collective_edges(graph: Graph) -> tuple[Graph, int]:
    """``graph`` with its runloop threads' collectives tied to the main thread (see the module
    docstring); returns it and the number of main-thread waits inferred."""
    g = graph
    if len(g) == 0 or len(g.step_first) == 0 or g.step_first[0] < 0:
        return g, 0
    main = int(g.res[g.step_first[0]])
    host = g.kind < DEV
    runloops = np.unique(g.res[host & (g.kind == HCOLL) & (g.res != main)])
    if len(runloops) == 0:
        return g, 0
    end = g.start + g.dur
    dur = g.dur.copy()
    dep = g.dep.copy()
    lag = g.lag.copy()
    dep2 = g.dep2.copy()
    release = g.release.copy()
    on_loop = host & np.isin(g.res, runloops)
    idle_group = np.array([name == "gap:" for name in g.groups], dtype=np.bool_)
    idle = on_loop & (g.kind == GAP) & idle_group[g.group]
    dur[idle] = 0
    release[idle] = -(2**62)  # an idle gap first on its thread pins nothing
    colls = np.flatnonzero(on_loop & (g.kind == HCOLL))
    mains = np.flatnonzero(host & (g.res == main))
    mains = mains[np.argsort(end[mains], kind="stable")]
    at = np.searchsorted(end[mains], g.start[colls], side="right") - 1
    ok = at >= 0
    src = mains[at[ok]]
    dep[colls[ok]] = src
    lag[colls[ok]] = g.start[colls[ok]] - end[src]
    release[colls[ok]] = -(2**62)  # gated by its enqueue, not by its measured start
    _queued(g, colls[ok], src, idle, dur, lag)
    # main-thread python gaps that span a collective's end wait for it
    waits: dict[int, int] = {}
    by_start = mains[np.argsort(g.start[mains], kind="stable")]
    starts = g.start[by_start]
    wait_group = np.array([name in _IDLE_GROUPS for name in g.groups], dtype=np.bool_)
    for c in colls.tolist():
        ce = int(end[c])
        k = int(np.searchsorted(starts, ce, side="left")) - 1
        if k < 0:
            continue
        p = int(by_start[k])
        if not (g.kind[p] == GAP and wait_group[g.group[p]] and g.start[p] < ce <= end[p]):
            continue
        if dep2[p] >= 0 and end[dep2[p]] >= ce:  # a later collective's end already gates it
            continue
        dep2[p] = waits[p] = c
    order = settle_waits(g, waits, dur)
    out = dataclasses.replace(g, dur=dur, dep=dep, lag=lag, dep2=dep2, release=release, order=order)
    return out, len(waits)


def settle_waits(g: Graph, waits: dict[int, int], dur: I64) -> npt.NDArray[np.intp]:
    """Each waiting node ``p`` of ``waits`` (p -> the node it waits for) keeps only its
    measured time after that node's end (``dur``, in place); returns the processing order
    with every waiting node after what it waits for."""
    end = g.start + g.dur
    for p, c in waits.items():
        dur[p] = int(end[p]) - max(int(g.start[p]), int(end[c]))
    return after_waits(g.order, waits)


def _queued(
    g: Graph, colls: I64, src: I64, idle: npt.NDArray[np.bool_], dur: I64, lag: I64
) -> None:
    """Collectives that waited in their runloop's queue: the thread's previous busy node ended
    after the enqueue, so the thread, not the enqueue lag, gated the start. Their lag becomes 0
    and the idle gap before them (the hand-off) keeps its measured time (in place)."""
    end = g.start + g.dur
    enq = dict(zip(colls.tolist(), end[src].tolist(), strict=True))
    for r in np.unique(g.res[colls]).tolist():
        nodes = np.flatnonzero(g.res == r)
        nodes = nodes[np.argsort(g.start[nodes], kind="stable")]
        # per position: the last busy (not idle) node at or before it, -1 none
        busy_at = np.where(~idle[nodes], np.arange(len(nodes)), -1)
        last_busy = np.maximum.accumulate(busy_at)
        for k in range(1, len(nodes)):
            c = int(nodes[k])
            b = int(last_busy[k - 1])
            if c not in enq or b < 0 or end[nodes[b]] <= enq[c]:
                continue
            lag[c] = 0
            q = int(nodes[k - 1])
            if idle[q]:
                dur[q] = g.dur[q]
