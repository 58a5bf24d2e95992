"""Kernels launched by a CUDA/HIP graph: one ``cudaGraphLaunch`` call (its correlation id on
every kernel of the graph) in, each graph node's edge to the node the device ran it after out.

Why apart from the per-kernel launch edge (``graph_device``): a graph node has no launch call
of its own. Read as one, every kernel of a graph keeps its whole offset from the graph launch
as its launch latency, so the graph stays pinned to its measured timing when its kernels
shrink (a 2 us device gap between graph kernels made a kernel look idle after its stream's
predecessor, and idle kernels keep their measured latency). The device runs a graph's nodes
in their captured order: a node starts a small, fixed device gap after the node it follows,
on its own stream or, for a fork or join in the graph, on another one (a collective after
the kernel that produced its gradient, compute after a collective it waits for). So the
first node of a launch on each stream keeps the launch edge (the graph launch's host cost
and latency); every later node depends on the graph node it followed, with the measured gap
as its lag. The captured edges are not in the trace; they are read from the times:

- a node whose stream predecessor in the same launch ended a typical gap (or less) before
  it started followed that node;
- else a node that started within :data:`FORK_WINDOW_NS` (or twice the typical gap) of the
  end of another stream's node of the same launch waited for it (the latest such end);
- else it follows its stream predecessor, with whatever gap was measured;
- the first node on the launch stream after the graph follows the graph's latest-ending node
  (a capture joins its forked streams before it ends).

A captured wait that never binds at the measured N leaves no mark in the times (a graph
replay records no ``cudaStreamWaitEvent``), so where it starts to bind at a projected N the
projection is optimistic (FSDP with gradient accumulation under a graph: +21% at 4x).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from tracescale.ingest.trace import RankTrace
from tracescale.replay.graph.device import QUEUED_NS, WAIT_GAP_NS, CorrIndex

I64 = npt.NDArray[np.int64]
BOOL = npt.NDArray[np.bool_]

#: The runtime calls that launch a whole graph (CUDA and HIP, with their per-thread variants).
GRAPH_LAUNCH_CALLS = frozenset(
    {"cudaGraphLaunch", "cudaGraphLaunch_ptsz", "hipGraphLaunch", "hipGraphLaunch_spt"}
)
#: Widest gap between another stream's node end and a graph node's start read as a fork/join.
FORK_WINDOW_NS = WAIT_GAP_NS


def graph_calls(trace: RankTrace) -> npt.NDArray[np.bool_]:
    """Per string id: whether it names a graph launch call."""
    return np.array([s in GRAPH_LAUNCH_CALLS for s in trace.strings], dtype=np.bool_)


def chain_graph_nodes(
    trace: RankTrace, d: dict[str, I64], dev_idx: I64, corr: CorrIndex, first: int
) -> BOOL:
    """Re-link the device columns ``d`` (from ``graph_device.device_columns``, node ``first +
    i`` for row i) of graph-launched kernels as the module docstring says; returns the rows
    whose lag is now their measured gap after a graph node (the launch-latency rules of
    ``graph_device.launch_lags`` must leave them as they are)."""
    m = len(dev_idx)
    inner = np.zeros(m, dtype=np.bool_)
    if m == 0:
        return inner
    ev = trace.events
    call = corr.find(ev.correlation[dev_idx].astype(np.int64))
    is_graph = graph_calls(trace)
    ok = call >= 0
    rows = np.flatnonzero(ok & is_graph[ev.name[np.clip(call, 0, None)]])
    if len(rows) == 0:
        return inner
    launch = call[rows]
    start = d["start"][rows]
    end = start + d["dur"][rows]
    res = d["res"][rows]
    same = _stream_predecessor(launch, res, start, rows)
    other = _latest_end_before(launch, start, end, rows)
    has_same = same >= 0
    s_end = np.where(has_same, end[np.clip(same, 0, None)], 0)
    gap_same = start - s_end
    typical = int(np.median(np.maximum(gap_same[has_same], 0))) if has_same.any() else 0
    explained = has_same & (gap_same <= typical + QUEUED_NS)
    has_other = (other >= 0) & (res[np.clip(other, 0, None)] != res)
    o_end = np.where(has_other, end[np.clip(other, 0, None)], 0)
    window = max(2 * typical + QUEUED_NS, FORK_WINDOW_NS)
    forked = ~explained & has_other & (start - o_end <= window) & (~has_same | (o_end > s_end))
    pred = np.where(forked, other, np.where(has_same, same, -1))
    linked = pred >= 0
    k = np.flatnonzero(linked)
    p = pred[k]
    at = rows[k]
    d["dep"][at] = first + rows[p]
    d["lag"][at] = np.maximum(start[k] - end[p], 0)
    d["release"][at] = -(2**62)
    inner[at] = True
    _join_after_launch(d, rows, launch, first)
    return inner


def _first_at_or_after(group: I64, t: I64, q_group: I64, q_t: I64) -> I64:
    """Per query: the index of the item of the same group with the earliest ``t`` >= ``q_t``
    (ties: the lowest index), -1 when none (groups and times packed into one sortable key)."""
    times, rank = np.unique(np.concatenate([t, q_t]), return_inverse=True)
    width = len(times) + 1
    key = group * width + rank[: len(t)].astype(np.int64)
    qkey = q_group * width + rank[len(t) :].astype(np.int64)
    order = np.lexsort((np.arange(len(t)), key))
    pos = np.searchsorted(key[order], qkey, side="left")
    pc = np.clip(pos, 0, max(len(order) - 1, 0))
    hit = (pos < len(order)) & (key[order][pc] // width == q_group)
    return np.where(hit, order[pc], -1)


def _join_after_launch(d: dict[str, I64], rows: I64, launch: I64, first: int) -> None:
    """A capture joins every forked stream back into the launch stream before it ends, so the
    first node on that stream after the graph (the earliest-starting node's stream) follows the
    graph's latest-ending node (``dep2``) when that one ran on another stream: the optimizer
    after a graph whose last node is a gradient collective. At the measured times the edge
    never delays a node; it binds when the collective grows."""
    if len(rows) == 0:
        return
    res = d["res"][rows].astype(np.int64)
    start = d["start"][rows]
    end = start + d["dur"][rows]
    _, lrank = np.unique(launch, return_inverse=True)
    lrank = lrank.reshape(-1).astype(np.int64)
    order = np.lexsort((-np.arange(len(rows)), end, lrank))
    last = order[np.r_[lrank[order][1:] != lrank[order][:-1], True]]
    head = np.lexsort((np.arange(len(rows)), start, lrank))
    head = head[np.r_[True, lrank[head][1:] != lrank[head][:-1]]]
    r0 = res[head]
    other = res[last] != r0
    last, r0 = last[other], r0[other]
    all_res = d["res"].astype(np.int64)
    nxt = _first_at_or_after(all_res, d["start"], r0, end[last])
    in_graph = np.zeros(len(all_res), dtype=np.bool_)
    in_graph[rows] = True
    ok = nxt >= 0
    nxt, last = nxt[ok], last[ok]
    take = ~in_graph[nxt] & (d["dep2"][nxt] < 0)
    d["dep2"][nxt[take]] = first + rows[last[take]]


def _stream_predecessor(launch: I64, res: I64, start: I64, rows: I64) -> I64:
    """Per graph node (position in the arrays): the position of the node before it on its
    stream in the same launch (start order, ties by row), -1 for the first."""
    order = np.lexsort((rows, start, res, launch))
    out = np.full(len(order), -1, dtype=np.int64)
    if len(order) < 2:
        return out
    same = (launch[order][1:] == launch[order][:-1]) & (res[order][1:] == res[order][:-1])
    out[order[1:][same]] = order[:-1][same]
    return out


def _latest_end_before(launch: I64, start: I64, end: I64, rows: I64) -> I64:
    """Per graph node: the node of the same launch with the latest end at or before its start
    that also started before it (ties: the later row), -1 when none. Times are ranked densely
    so that (launch, time) packs into one sortable key."""
    n = len(launch)
    _, lrank = np.unique(launch, return_inverse=True)
    times, trank = np.unique(np.concatenate([start, end]), return_inverse=True)
    s_rank, e_rank = trank[:n].astype(np.int64), trank[n:].astype(np.int64)
    width = len(times) + 1
    key_end = lrank.reshape(-1).astype(np.int64) * width + e_rank
    order = np.lexsort((rows, key_end))
    sorted_keys = key_end[order]
    query = lrank.reshape(-1).astype(np.int64) * width + s_rank
    pos = np.searchsorted(sorted_keys, query, side="right") - 1
    pc = np.clip(pos, 0, None)
    cand = order[pc]
    same_launch = (pos >= 0) & (sorted_keys[pc] // width == query // width)
    # The candidate must have started before the node (a zero-length node ends at its start).
    me = np.arange(n)
    earlier = (start[cand] < start) | ((start[cand] == start) & (rows[cand] < rows))
    step_back = same_launch & ((cand == me) | ~earlier) & (pos >= 1)
    pb = np.clip(pos - 1, 0, None)
    back = order[pb]
    back_ok = step_back & (sorted_keys[pb] // width == query // width)
    back_ok &= (start[back] < start) | ((start[back] == start) & (rows[back] < rows))
    found = np.where(same_launch & (cand != me) & earlier, cand, -1)
    return np.where(back_ok, back, found)
