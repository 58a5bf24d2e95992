"""A graph's processing order (node ids) + its edges in -> the same order, with every edge forward.

The replay runs nodes once each, in one order: each resource's nodes in their measured order,
and every node after what it depends on (its launch, what a sync waits for). The order is a
sort by measured time, which satisfies both on a trace of nanosecond timestamps. Rounded
timestamps break ties the sort cannot see: HTA's frames hold whole microseconds, so a kernel
shorter than one rounds to zero length and its end ties with the sync that waits for it, which
then sorted first and returned before the kernel ran (a replayed step 20% short). Such an
order is repaired by a topological sort that keeps the measured order wherever it is free to.
"""

from __future__ import annotations

import heapq

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]


def backward_edges(order: I64, *deps: npt.NDArray[np.integer]) -> int:
    """How many edges ``j -> i`` (``dep[i] == j``) point backward in ``order``."""
    pos = np.empty(len(order), dtype=np.int64)
    pos[order] = np.arange(len(order))
    bad = 0
    for dep in deps:
        has = dep >= 0
        bad += int(np.count_nonzero(has & (pos[np.clip(dep, 0, None)] > pos)))
    return bad


def forward_order(order: I64, res: npt.NDArray[np.integer], *deps: npt.NDArray[np.integer]) -> I64:
    """``order`` where every edge points forward, each resource keeping its nodes' sequence.

    Unchanged when it already does (the common case: one vectorized check). Otherwise Kahn's
    algorithm over the resource chains and the edges, taking the ready node earliest in
    ``order`` first; a cycle (edges that contradict a resource's sequence) leaves its nodes in
    ``order``'s sequence after the rest.
    """
    order = np.asarray(order, dtype=np.int64)
    if backward_edges(order, *deps) == 0:
        return order
    n = len(order)
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)
    preds: list[list[int]] = [[] for _ in range(n)]
    last: dict[int, int] = {}
    for i, r in zip(order.tolist(), np.asarray(res)[order].tolist(), strict=True):
        if r in last:
            preds[i].append(last[r])
        last[r] = i
    for dep in deps:
        for i, j in zip(np.flatnonzero(dep >= 0).tolist(), dep[dep >= 0].tolist(), strict=True):
            if j != i:
                preds[i].append(int(j))
    waiting = [len(p) for p in preds]
    succ: list[list[int]] = [[] for _ in range(n)]
    for i, p in enumerate(preds):
        for j in p:
            succ[j].append(i)
    ready = [(int(pos[i]), i) for i in range(n) if waiting[i] == 0]
    heapq.heapify(ready)
    out: list[int] = []
    while ready:
        _, i = heapq.heappop(ready)
        out.append(i)
        for k in succ[i]:
            waiting[k] -= 1
            if waiting[k] == 0:
                heapq.heappush(ready, (int(pos[k]), k))
    if len(out) < n:  # a cycle: the rest as measured
        done = np.zeros(n, dtype=np.bool_)
        done[out] = True
        out.extend(i for i in order.tolist() if not done[i])
    return np.asarray(out, dtype=np.int64)


def after_waits(order: I64, waits: dict[int, int]) -> I64:
    """``order`` with each waiting node (``waits``: node -> the node it waits for) moved just
    after what it waits for where it came before it; the rest keep their places."""
    if not waits:
        return order
    pos = np.empty(len(order), dtype=np.float64)
    pos[order] = np.arange(len(order), dtype=np.float64)
    for p, c in waits.items():
        if pos[p] < pos[c]:
            pos[p] = pos[c] + 0.5
    out: I64 = np.argsort(pos, kind="stable").astype(order.dtype)
    return out
