"""Data dependencies from a PyTorch execution trace as graph edges between host threads.

Why: a host thread's ops are replayed in their measured order, and the only edges between
threads are those a rule infers (the backward thread's hand-off, gloo's runloop). Where an op
on one thread reads a tensor an op on another thread wrote, the ET says so
(:mod:`tracescale.ingest.execution_trace`): the consumer may not start before the producer
ends. Without that edge a projection that slows the producer's thread leaves the consumer at
its measured start, before its input exists, and one that speeds it up keeps the consumer's
wait at its measured length.

Two steps. At build (:mod:`tracescale.replay.graph.et_pairs`, cached with the graph) each
dependency whose two ops are cpu_ops of this trace on two of the graph's host threads becomes
a (producer node, consumer node) pair. After the rule-based waits (:func:`et_edges`, like
:mod:`.backward_thread`), each pair that the measured times allow (the producer ended by
the consumer's start) and that no edge already orders (the consumer or the gap before it
already waits for a node of the producer's thread that ends as late) is placed:

- the consumer's thread sat in a gap outside any op when the producer ended: that gap waits
  for the producer and keeps only its measured time after the producer's end (the thread
  was waiting for the tensor, as the main thread waits in ``backward()``);
- else the consumer's first piece starts no earlier than the producer's end.

With the measured durations the replay gives back the measured timeline; ``Graph.et_waits``
counts the edges placed, and the replay's assumptions name it.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import numpy.typing as npt

from tracescale.replay.graph.build import DEV, GAP, SYNC, Graph
from tracescale.replay.waits.order import after_waits

I64 = npt.NDArray[np.int64]

#: Law groups of host time outside any op (or only inside the step annotation).
_IDLE_GROUPS = frozenset({"gap:", "gap:ProfilerStep"})


def _measured_end(g: Graph) -> I64:
    """Each node's measured end: a host piece ends where the next piece of its thread starts
    (rules before this one may have shortened ``dur``), the last one at start + dur."""
    end = g.start + g.dur
    host = np.flatnonzero(g.kind < DEV)
    if len(host) > 1:
        same = g.res[host[1:]] == g.res[host[:-1]]
        end[host[:-1][same]] = g.start[host[1:][same]]
    return end


def et_edges(graph: Graph) -> tuple[Graph, int]:
    """``graph`` with its execution-trace pairs placed as edges (see the module docstring);
    returns it and the number placed (also ``Graph.et_waits``)."""
    g = graph
    pairs = g.et_pairs
    if len(pairs) == 0:
        return g, 0
    end = _measured_end(g)
    idle_group = np.array([name in _IDLE_GROUPS for name in g.groups], dtype=np.bool_)
    dur, dep2 = g.dur.copy(), g.dep2.copy()
    # the producer that ended last first: it is the one a consumer's single slot keeps
    pairs = pairs[np.argsort(-end[pairs[:, 0]], kind="stable")]
    waits: dict[int, int] = {}
    for src, q in pairs.tolist():
        ready = int(end[src])
        if ready > int(g.start[q]):  # the measured times contradict the dependency
            continue
        p = q - 1 if q > 0 and g.res[q - 1] == g.res[q] and g.kind[q - 1] < DEV else -1
        gates = [q] if p < 0 else [q, p]
        if any(
            d >= 0 and g.res[d] == g.res[src] and end[d] >= ready
            for n in gates
            for d in (int(g.dep[n]), int(dep2[n]))
        ):
            continue  # already ordered by an edge of the trace or of a rule
        if (
            p >= 0
            and g.kind[p] == GAP
            and idle_group[g.group[p]]
            and dep2[p] < 0
            and int(g.start[p]) < ready
        ):
            dep2[p] = waits[p] = src
            dur[p] = min(int(dur[p]), int(g.start[q]) - ready)
        elif dep2[q] < 0 and g.kind[q] != SYNC:
            dep2[q] = waits[q] = src
    order = after_waits(g.order, waits)  # each waiting node after what it waits for
    out = dataclasses.replace(g, dur=dur, dep2=dep2, order=order, et_waits=len(waits))
    return out, len(waits)
