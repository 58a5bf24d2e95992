"""Replay a graph: each node starts when its resource and its predecessors allow, then runs
for its (possibly rescaled) duration. Linear in nodes, one pass in a precomputed order.

The same pass with the measured durations must give back the measured steps (``replay_error``);
with durations scaled to another world size it is the projection.
"""

from __future__ import annotations

import array
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tracescale.compiled import Compiled
from tracescale.replay.graph.build import DCOLL, DEV, SYNC, Graph

F64 = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Replayed:
    """Replayed node times and step windows, in seconds relative to the first node."""

    start: F64
    end: F64
    step_time: F64  # per step window, seconds


def _pass(
    order: Any,
    kind: Any,
    res: Any,
    dep: Any,
    dep2: Any,
    d: Any,
    lag: Any,
    fixed: Any,
    tail: Any,
    release: Any,
    pre: Any,
    anchor: Any,
    off: Any,
    ready: Any,
    start: Any,
    end: Any,
    free: Any,
    absorb: Any,
) -> None:
    """The replay pass proper, over arrays (compiled) or lists (plain Python): ``free`` holds
    each resource's end so far, -1e18 before its first node; ``absorb`` (per node, from
    :func:`absorbing`) whether the node follows, on its stream, a device collective of its own
    process group. ``pre``: a wait after the node's own predecessors are done, which only such
    a collective ending later absorbs (the ranks queued behind it leave it together, so they
    arrive together); behind any other node it is waited once the stream is free, as the
    measured wait was, from the kernel's start.
    ``anchor``/``off``: besides its own ``pre``, a node starts no earlier than ``off`` after
    its anchor node was ready (its predecessors done, before its ``pre``), -1 for none
    (``engine.late``); ``ready`` receives each node's ready time."""
    for i in order:
        r = res[i]
        s = release[i]
        if not absorb[i] and free[r] > s:
            s = free[r]
        j = dep[i]
        if j >= 0:
            t = end[j] + lag[i]
            if t > s:
                s = t
        j2 = dep2[i]
        if kind[i] != SYNC and j2 >= 0 and end[j2] > s:
            s = end[j2]
        ready[i] = s
        s += pre[i]
        a = anchor[i]
        if a >= 0:
            t = ready[a] + off[i]
            if t > s:
                s = t
        if free[r] > s:
            s = free[r]
        if kind[i] == SYNC:
            if j2 < 0:
                e = s + d[i]
            else:
                e = s + fixed[i]
                t2 = end[j2] + tail[i]
                if t2 > e:
                    e = t2
        else:
            e = s + d[i]
        start[i] = s
        end[i] = e
        free[r] = e


#: Compiled once per machine (numba's on-disk cache); projections replay the same graph dozens
#: of times, and the pass is inherently sequential, so plain Python here dominated the stage.
_compiled: Compiled | None = Compiled(_pass)


def replay(
    graph: Graph,
    dur: F64 | None = None,
    pre: F64 | None = None,
    anchor: npt.NDArray[np.int64] | None = None,
    off: F64 | None = None,
) -> Replayed:
    """Replay ``graph`` with ``dur`` (seconds per node; the measured durations when None),
    ``pre`` (seconds per node waited before it unless its resource is busy longer; none when
    None), and ``anchor``/``off`` (each node no earlier than ``off`` seconds after its anchor
    node was ready; none when None)."""
    n = len(graph)
    t0 = float(graph.start.min()) if n else 0.0
    d = graph.dur / 1e9 if dur is None else np.asarray(dur, dtype=np.float64)
    lag = graph.lag / 1e9
    fixed = graph.fixed / 1e9
    tail = graph.tail / 1e9
    release = (graph.release - t0) / 1e9
    wait = np.zeros(n) if pre is None else np.asarray(pre, dtype=np.float64)
    anchors = np.full(n, -1, np.int64) if anchor is None else np.asarray(anchor, np.int64)
    offs = np.zeros(n) if off is None else np.asarray(off, dtype=np.float64)
    ready = np.zeros(n)
    n_res = int(graph.res.max()) + 1 if n else 0
    kernel = _compiled.get(n) if _compiled is not None else None
    if kernel is not None and n:
        start = np.zeros(n)
        end = np.zeros(n)
        free = np.full(n_res, -1e18)
        kernel(
            graph.order.astype(np.int64, copy=False), graph.kind, graph.res, graph.dep, graph.dep2,
            d, lag, fixed, tail, release, wait, anchors, offs, ready, start, end, free,
            absorbing(graph),
        )  # fmt: skip
        return Replayed(start, end, step_times(graph, start, end))
    if n <= LIST_NODES:
        order = graph.order
        # the per-call columns in pass order, read as Python numbers while the loop walks them
        d_o, w_o = _view(d[order]), _view(wait[order])
        if anchor is None:
            sl, el = _plain_pass(_program(graph, lag, fixed, tail, release), d_o, w_o, n, n_res)
        else:
            late = (_view(anchors[order]), _view(offs[order]))
            sl, el = _anchored_pass(_program(graph, lag, fixed, tail, release), d_o, w_o, *late,
                                    n, n_res)  # fmt: skip
        sa = np.frombuffer(sl, dtype=np.float64).copy()  # writable, as the arrays replay returns
        ea = np.fromiter(el, dtype=np.float64, count=n)
        return Replayed(sa, ea, step_times(graph, sa, ea))
    o, k, r, j, j2, lg, fx, tl, rel = _static_columns(graph, lag, fixed, tail, release)
    out = (_view(np.zeros(n)), _view(np.zeros(n)))
    _pass(
        o, k, r, j, j2, _view(d), lg, fx, tl, rel, _view(wait), _view(anchors), _view(offs),
        _view(ready), out[0], out[1], [-1e18] * n_res, _view(absorbing(graph)),
    )  # fmt: skip
    sa, ea = (np.asarray(v, dtype=np.float64) for v in out)
    return Replayed(sa, ea, step_times(graph, sa, ea))


#: Nodes up to which the plain passes walk the graph's program (:func:`_program`: a tuple of
#: Python numbers per node), beyond which :func:`_pass` reads memoryviews of the arrays.
#: Python objects per node cost some hundred bytes against 8 a column, and on a graph of a
#: million nodes such per-node lists were the peak of a one-job analyze; there the compiled
#: pass takes over anyway.
LIST_NODES = 200_000

#: graph id -> (graph's weak reference, its fixed pass columns): a projection replays one graph
#: dozens of times, and converting the columns that never change (order, kinds, resources,
#: dependencies, lags, releases) cost more than the pass itself.
_STATIC: dict[int, tuple[Any, Any]] = {}


def _cached(graph: Graph, tag: str, make: Any) -> Any:
    """``make()`` once per graph object and ``tag``, dropped with the graph."""
    key = id(graph)
    hit = _STATIC.get(key)
    if hit is None or hit[0]() is not graph:
        hit = _STATIC[key] = (weakref.ref(graph, lambda _: _STATIC.pop(key, None)), {})
    got = hit[1].get(tag)
    if got is None:
        got = hit[1][tag] = make()
    return got


def _program(graph: Graph, *times: npt.NDArray[Any]) -> list[tuple[Any, ...]]:
    """``graph``'s fixed pass columns in pass order, one tuple per node (node, resource,
    release, dependency, its lag, second dependency, kind, a sync's fixed time and its tail):
    the plain pass unpacks one tuple a node instead of indexing nine lists."""

    def make() -> list[tuple[Any, ...]]:
        o = graph.order
        lag, fixed, tail, release = times
        cols = (graph.res, release, graph.dep, lag, graph.dep2, graph.kind, fixed, tail,
                absorbing(graph))  # fmt: skip
        return list(zip(o.tolist(), *(c[o].tolist() for c in cols), strict=True))

    out: list[tuple[Any, ...]] = _cached(graph, "program", make)
    return out


def _plain_pass(
    prog: list[tuple[Any, ...]], d: Iterable[float], pre: Iterable[float], n: int, n_res: int
) -> tuple[array.array[float], list[float]]:
    """:func:`_pass` without anchors, in plain Python over :func:`_program` (``d``/``pre`` in
    pass order): the same comparisons and sums in the same order, so the same numbers (tested
    against :func:`_pass`). A node's resource is read once: nothing before its own end moves
    it."""
    start = array.array("d", bytes(8 * n))  # written once a node, read by no node
    end = [0.0] * n
    free = [-1e18] * n_res
    for (i, r, s, j, lg, j2, k, fx, tl, ab), di, p in zip(prog, d, pre, strict=True):
        fr = free[r]
        if not ab and fr > s:
            s = fr
        if j >= 0:
            t = end[j] + lg
            if t > s:
                s = t
        if k != SYNC:
            if j2 >= 0 and end[j2] > s:
                s = end[j2]
            s += p
            if fr > s:
                s = fr
            e = s + di
        else:
            s += p
            if fr > s:
                s = fr
            if j2 < 0:
                e = s + di
            else:
                e = s + fx
                t2 = end[j2] + tl
                if t2 > e:
                    e = t2
        start[i] = s
        end[i] = e
        free[r] = e
    return start, end


def _anchored_pass(
    prog: list[tuple[Any, ...]],
    d: Iterable[float],
    pre: Iterable[float],
    anchor: Iterable[int],
    off: Iterable[float],
    n: int,
    n_res: int,
) -> tuple[array.array[float], list[float]]:
    """:func:`_plain_pass` with each node no earlier than ``off`` after its anchor was ready
    (``anchor``/``off`` in pass order, -1: none), as :func:`_pass` places them. Kept apart from
    :func:`_plain_pass` on purpose: most replays have no anchors, and the per-node ready list
    and the two extra columns this loop walks make it a third slower (3.4 against 2.6 ms on a
    4.9k-node pipeline graph, best of 30)."""
    start = array.array("d", bytes(8 * n))  # written once a node, read by no node
    end = [0.0] * n
    ready = [0.0] * n
    free = [-1e18] * n_res
    for (i, r, s, j, lg, j2, k, fx, tl, ab), di, p, a, of in zip(
        prog, d, pre, anchor, off, strict=True
    ):
        fr = free[r]
        if not ab and fr > s:
            s = fr
        if j >= 0:
            t = end[j] + lg
            if t > s:
                s = t
        if k != SYNC and j2 >= 0 and end[j2] > s:
            s = end[j2]
        ready[i] = s
        s += p
        if a >= 0:
            t = ready[a] + of
            if t > s:
                s = t
        if fr > s:
            s = fr
        if k == SYNC and j2 >= 0:
            e = s + fx
            t2 = end[j2] + tl
            if t2 > e:
                e = t2
        else:
            e = s + di
        start[i] = s
        end[i] = e
        free[r] = e
    return start, end


def _static_columns(graph: Graph, *times: npt.NDArray[Any]) -> tuple[Any, ...]:
    """``graph``'s unchanging pass columns (order, kind, res, dep, dep2, lag, fixed, tail,
    release) as memoryviews for :func:`_pass`, converted once per graph object."""
    cols: tuple[npt.NDArray[Any], ...] = (
        graph.order,
        graph.kind,
        graph.res,
        graph.dep,
        graph.dep2,
        *times,
    )
    out: tuple[Any, ...] = _cached(graph, "views", lambda: tuple(_view(c) for c in cols))
    return out


def absorbing(graph: Graph) -> npt.NDArray[np.bool_]:
    """Per node, whether its ``pre`` wait may overlap the node before it on its stream: that
    node is a device collective and this one is not a collective of another process group.

    Ranks queued behind a collective leave it together, so the members of that collective's
    group arrive together at the next one on the stream, and a wait measured there is short.
    A collective of another group (HSDP's cross-node replicate AllReduce behind the in-node
    ReduceScatter, the next step's first AllGather behind it) meets ranks that left other
    collectives at other times: its wait runs from its own start, once the stream is free,
    as it was measured. Overlapping it there lost 4.0 ms of a 63.6 ms HSDP step replayed with
    its own measured waits. Collectives whose group is unknown count as one group."""

    def make() -> npt.NDArray[np.bool_]:
        n = len(graph)
        order = np.asarray(graph.order, dtype=np.int64)
        by_res = order[np.argsort(graph.res[order], kind="stable")]  # pass order per stream
        same = graph.res[by_res[1:]] == graph.res[by_res[:-1]]
        prev = np.full(n, -1, dtype=np.int64)
        prev[by_res[1:][same]] = by_res[:-1][same]
        group = np.full(n, -1, dtype=np.int64)
        c = graph.collectives
        if len(c):
            pgs = c["pg"].astype(str).tolist() if "pg" in c else [""] * len(c)
            codes = {name: k for k, name in enumerate(dict.fromkeys(pgs))}
            group[np.asarray(c["node"], dtype=np.int64)] = [codes[x] for x in pgs]
        has = prev >= 0
        behind = np.zeros(n, dtype=np.bool_)
        behind[has] = graph.kind[prev[has]] == DCOLL
        other = np.zeros(n, dtype=np.bool_)
        other[has] = (group[has] >= 0) & (group[has] != group[prev[has]])
        out: npt.NDArray[np.bool_] = behind & ~other
        return out

    got: npt.NDArray[np.bool_] = _cached(graph, "absorb", make)
    return got


def _view(values: npt.NDArray[Any]) -> memoryview:
    """A flat memoryview of ``values`` (indexing it gives Python numbers, as a list would)."""
    return np.ascontiguousarray(values).data


def step_windows(
    graph: Graph, start: npt.NDArray[Any], end: npt.NDArray[Any]
) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """Each step's window (first, last) in the units of ``start``/``end`` (float seconds or
    integer ns): the host ProfilerStep span extended to the end of the device work it
    launched, the next step starting no earlier than the previous one ends (as ingest does)."""
    k = len(graph.step_first)
    floor = -np.inf if np.issubdtype(end.dtype, np.floating) else np.iinfo(end.dtype).min
    dev = graph.kind >= DEV
    dev_end = np.full(k, floor, dtype=end.dtype)
    steps = graph.step[dev]
    ok = steps >= 0
    np.maximum.at(dev_end, steps[ok], end[dev][ok])
    if k == 0:
        return np.zeros(0, dtype=end.dtype), np.zeros(0, dtype=end.dtype)
    # s_i = max(a_i, e_(i-1)), e_i = max(b_i, s_i): e is the running maximum of max(a, b), a
    # column operation instead of a loop over steps (a trace may hold a million of them)
    a = np.asarray(start[graph.step_first], dtype=end.dtype)
    b = np.maximum(np.asarray(end[graph.step_last], dtype=end.dtype), dev_end)
    hi = np.maximum.accumulate(np.maximum(a, b))
    prev = np.concatenate([np.array([floor], dtype=end.dtype), hi[:-1]])
    lo = np.maximum(a, prev)
    return lo, hi


def step_times(graph: Graph, start: F64, end: F64) -> F64:
    """Step times (the windows of :func:`step_windows`) from replayed or measured times."""
    lo, hi = step_windows(graph, start, end)
    out: F64 = (hi - lo).astype(np.float64)
    return out


def measured_step_times(graph: Graph) -> F64:
    """The same windows from the measured node times (a check on the graph itself)."""
    t0 = float(graph.start.min()) if len(graph) else 0.0
    st = ((graph.start - t0) / 1e9).astype(np.float64)
    en = (st + graph.dur / 1e9).astype(np.float64)
    return step_times(graph, st, en)


def replay_steps(graph: Graph) -> F64:
    """Replayed step times (seconds) with the measured durations."""
    return replay(graph).step_time
