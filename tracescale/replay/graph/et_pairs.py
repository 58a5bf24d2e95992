"""Execution-trace dependencies -> (producer node, consumer node) pairs of a rank's graph.

Why a module of its own: the pairs are found at build, from the trace's events (which the
cached graph no longer has), and placed as edges after the rule-based waits
(:mod:`tracescale.replay.waits.et_edges`, which documents the edges). A dependency is kept
when both its ops are cpu_ops of this trace (matched by ``Record function id``) on two of the
graph's host threads; the producer's node is its last piece ending at or before the op's end,
the consumer's its first piece starting at or after the op's start. A thread without runtime
calls has no nodes (a CPU-only loop's side threads), so its dependencies are not placed.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from tracescale.ingest.execution_trace import EtDependencies
from tracescale.ingest.trace import RankTrace

I64 = npt.NDArray[np.int64]


def et_pairs(
    trace: RankTrace,
    deps: EtDependencies,
    threads: list[tuple[int, int]],
    offsets: I64,
    node_start: I64,
    node_end: I64,
) -> I64:
    """(producer node, consumer node) rows of ``deps`` in this graph: both ops found by their
    record-function id, on two different host threads of the graph (``threads``, whose nodes
    are ``offsets[r]:offsets[r + 1]`` in time order), each with a node inside its op."""
    none = np.zeros((0, 2), dtype=np.int64)
    ev = trace.events
    if len(deps) == 0 or len(ev) == 0:
        return none
    has = np.flatnonzero((ev.rf_id >= 0) & ~ev.is_device)
    rf = ev.rf_id[has]
    by = np.argsort(rf, kind="stable")
    rf_sorted, ev_sorted = rf[by], has[by]

    def find(ids: I64) -> I64:
        at = np.clip(np.searchsorted(rf_sorted, ids), 0, max(len(rf_sorted) - 1, 0))
        ok = len(rf_sorted) > 0
        hit = (rf_sorted[at] == ids) if ok else np.zeros(len(ids), dtype=np.bool_)
        return np.where(hit, ev_sorted[at] if ok else -1, -1)

    pe, ce = find(deps.producer), find(deps.consumer)
    thread_of = {t: r for r, t in enumerate(threads)}
    end = ev.start + ev.dur
    rows: list[tuple[int, int]] = []
    for p, q in zip(pe.tolist(), ce.tolist(), strict=True):
        if p < 0 or q < 0:
            continue
        rp = thread_of.get((int(ev.pid[p]), int(ev.tid[p])))
        rq = thread_of.get((int(ev.pid[q]), int(ev.tid[q])))
        if rp is None or rq is None or rp == rq:
            continue
        lo, hi = int(offsets[rp]), int(offsets[rp + 1])
        k = lo + int(np.searchsorted(node_end[lo:hi], end[p], side="right")) - 1
        if k < lo or node_end[k] <= ev.start[p]:
            continue
        lo, hi = int(offsets[rq]), int(offsets[rq + 1])
        j = lo + int(np.searchsorted(node_start[lo:hi], ev.start[q], side="left"))
        if j >= hi or node_start[j] >= end[q]:
            continue
        rows.append((k, j))
    return np.array(sorted(set(rows)), dtype=np.int64).reshape(-1, 2)
