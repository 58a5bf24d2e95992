"""Replay a graph: each node starts when its resource and its predecessors allow, then runs
for its (possibly rescaled) duration. Linear in nodes, one pass in a precomputed order.

The same pass with the measured durations must give back the measured steps (``replay_error``);
with durations scaled to another world size it is the projection.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tracescale.replay.graph import DEV, SYNC, Graph

F64 = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Replayed:
    """Replayed node times and step windows, in seconds relative to the first node."""

    start: F64
    end: F64
    step_time: F64  # per step window, seconds


def replay(graph: Graph, dur: F64 | None = None) -> Replayed:
    """Replay ``graph`` with ``dur`` (seconds per node; the measured durations when None)."""
    n = len(graph)
    t0 = float(graph.start.min()) if n else 0.0
    d = (graph.dur / 1e9).tolist() if dur is None else dur.tolist()
    kind = graph.kind.tolist()
    res = graph.res.tolist()
    dep = graph.dep.tolist()
    dep2 = graph.dep2.tolist()
    lag = (graph.lag / 1e9).tolist()
    fixed = (graph.fixed / 1e9).tolist()
    tail = (graph.tail / 1e9).tolist()
    release = ((graph.release - t0) / 1e9).tolist()
    start = [0.0] * n
    end = [0.0] * n
    free: dict[int, float] = {}
    neg = -1e18
    for i in graph.order.tolist():
        s = free.get(res[i], neg)
        r = release[i]
        if r > s:
            s = r
        j = dep[i]
        if j >= 0:
            t = end[j] + lag[i]
            if t > s:
                s = t
        j2 = dep2[i]
        if kind[i] == SYNC:
            e = s + fixed[i] if j2 < 0 else max(s + fixed[i], end[j2] + tail[i])
            if j2 < 0:
                e = s + d[i]
        else:
            if j2 >= 0 and end[j2] > s:
                s = end[j2]
            e = s + d[i]
        start[i] = s
        end[i] = e
        free[res[i]] = e
    st = np.asarray(start)
    en = np.asarray(end)
    return Replayed(st, en, step_times(graph, st, en))


def step_times(graph: Graph, start: F64, end: F64) -> F64:
    """Step windows as ingest defines them: host ProfilerStep span extended to the end of the
    device work it launched, the next step starting no earlier than the previous one ends."""
    k = len(graph.step_first)
    out = np.zeros(k)
    dev = graph.kind >= DEV
    dev_end = np.full(k, -np.inf)
    steps = graph.step[dev]
    ok = steps >= 0
    np.maximum.at(dev_end, steps[ok], end[dev][ok])
    prev = -np.inf
    for i in range(k):
        s = max(float(start[graph.step_first[i]]), prev)
        e = max(float(end[graph.step_last[i]]), float(dev_end[i]), s)
        out[i] = e - s
        prev = e
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
