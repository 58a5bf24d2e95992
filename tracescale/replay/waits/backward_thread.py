"""The autograd engine's backward thread as graph edges: it starts a backward when the main
thread hands it over, and the main thread's wait in ``backward()`` ends when it is done.

Why: PyTorch runs a CUDA backward on its own device thread (ops named
``autograd::engine::evaluate_function: ...``) while the main thread blocks in ``backward()``
with nothing recorded. Built as measured, that thread is a chain of busy stretches separated by
idle gaps (no enclosing op) and the main thread's wait is an ordinary gap: a replay keeps both
at their measured length, so the two threads run side by side instead of one after the other.
Data loading removed from the main thread would then gain nothing (the backward thread's idle
gap still holds the next backward back), and a faster backward would not end the wait sooner.
Rewritten here, as for gloo's runloop threads (:mod:`tracescale.replay.waits.host_collectives`):

- each idle gap of a backward thread (no enclosing op, and the main thread issued calls
  meanwhile: a pause between two backward functions is the engine's own time) runs for no
  time: the thread is waiting, not working;
- the first node of each busy stretch starts no earlier than the end of the main-thread node
  that ended last before it, plus the measured distance (the hand-off);
- a main-thread gap that spans a whole busy stretch waits for it: it starts at the stretch's
  end and keeps only its measured time after it.

With the measured durations the replay gives back the measured timeline (``replay_error``).
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import numpy.typing as npt

from tracescale.replay.graph.build import DEV, GAP, Graph
from tracescale.replay.waits.host_collectives import settle_waits

I64 = npt.NDArray[np.int64]

#: Law groups of host time inside the autograd engine's ops (``evaluate_function``, the
#: gradient accumulation, or the backward function itself: ``AddmmBackward0``, older PyTorch
#: ``CudnnConvolutionBackward``).
BACKWARD_OPS = re.compile(
    r"^gap:(autograd::engine::evaluate_function|torch::autograd::AccumulateGrad|\w+Backward\d*$)"
)


def _stretches(nodes: I64, idle: npt.NDArray[np.bool_]) -> list[tuple[int, int]]:
    """(first, last) busy node of each run of busy nodes in ``nodes`` (in time order)."""
    out: list[tuple[int, int]] = []
    first = -1
    prev = -1
    for i in nodes.tolist():
        if idle[i]:
            if first >= 0:
                out.append((first, prev))
            first = -1
            continue
        if first < 0:
            first = i
        prev = i
    if first >= 0:
        out.append((first, prev))
    return out


def backward_thread_edges(graph: Graph) -> tuple[Graph, int]:
    """``graph`` with its backward threads tied to the main thread (see the module docstring);
    returns it and the number of main-thread waits for a backward inferred."""
    g = graph
    if len(g) == 0 or len(g.step_first) == 0 or g.step_first[0] < 0:
        return g, 0
    main = int(g.res[g.step_first[0]])
    host = g.kind < DEV
    backward_group = np.array([bool(BACKWARD_OPS.match(n)) for n in g.groups], dtype=np.bool_)
    threads = np.unique(g.res[host & (g.res != main) & backward_group[g.group]])
    if len(threads) == 0:
        return g, 0
    end = g.start + g.dur
    dur, dep, lag = g.dur.copy(), g.dep.copy(), g.lag.copy()
    dep2, release = g.dep2.copy(), g.release.copy()
    idle_group = np.array([name == "gap:" for name in g.groups], dtype=np.bool_)
    outside = host & np.isin(g.res, threads) & (g.kind == GAP) & idle_group[g.group]
    # idle, not a pause between two backward functions: the main thread worked meanwhile
    acts = np.sort(g.start[host & (g.res == main) & (g.kind != GAP)])
    cand = np.flatnonzero(outside)
    busy_main = np.searchsorted(acts, end[cand], side="left") - np.searchsorted(
        acts, g.start[cand], side="right"
    )
    idle = np.zeros(len(g), dtype=np.bool_)
    idle[cand[busy_main > 0]] = True
    dur[idle] = 0
    release[idle] = -(2**62)  # an idle gap first on its thread pins nothing
    mains = np.flatnonzero(host & (g.res == main))
    by_end = mains[np.argsort(end[mains], kind="stable")]
    by_start = mains[np.argsort(g.start[mains], kind="stable")]
    starts = g.start[by_start]
    waits: dict[int, int] = {}
    for r in threads.tolist():
        nodes = np.flatnonzero(host & (g.res == r))
        nodes = nodes[np.argsort(g.start[nodes], kind="stable")]
        for first, last in _stretches(nodes, idle):
            k = int(np.searchsorted(end[by_end], g.start[first], side="right")) - 1
            if k >= 0 and dep[first] < 0:
                src = int(by_end[k])
                dep[first] = src
                lag[first] = g.start[first] - end[src]
                release[first] = -(2**62)  # gated by the hand-off, not its measured start
            j = int(np.searchsorted(starts, g.start[first], side="right")) - 1
            if j < 0:
                continue
            p = int(by_start[j])
            spans = g.start[p] <= g.start[first] and end[last] <= end[p]
            if g.kind[p] == GAP and spans and dep2[p] < 0:
                dep2[p] = waits[p] = last
    order = settle_waits(g, waits, dur)
    out = dataclasses.replace(g, dur=dur, dep=dep, lag=lag, dep2=dep2, release=release, order=order)
    return out, len(waits)
