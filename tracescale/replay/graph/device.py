"""Device nodes of a rank's graph and the edges that reach them or leave them: launch -> kernel,
implicit cross-stream waits, device -> host syncs (recorded waits: ``graph_waits``).

Why apart from the host side: these edges are lookups between the host calls and the device
work (by correlation id, by stream and launch time), not a walk along one thread, and a rank
has millions of kernels, so each lookup is a binary search over whole arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tracescale.ingest.trace import RankTrace

I64 = npt.NDArray[np.int64]
BOOL = npt.NDArray[np.bool_]

#: A kernel starting within 1 us of its stream's previous end was queued.
QUEUED_NS = 1_000


@dataclass(frozen=True)
class CorrIndex:
    """Host calls by correlation id (the last call in node order wins a repeated id), so device
    events and ``cuda_sync`` records find their launching call by binary search."""

    keys: I64
    events: I64

    @classmethod
    def of(cls, trace: RankTrace, call_events: I64) -> CorrIndex:
        corr = trace.events.correlation[call_events].astype(np.int64)
        ok = corr >= 0
        keys, events = corr[ok], call_events[ok]
        order = np.argsort(keys, kind="stable")
        return cls(keys[order], events[order])

    def find(self, corr: I64) -> I64:
        """The calling event per correlation id, -1 when none."""
        if len(self.keys) == 0:
            return np.full(len(corr), -1, dtype=np.int64)
        pos = np.searchsorted(self.keys, corr, side="right") - 1
        p = np.clip(pos, 0, None)
        hit = (pos >= 0) & (corr >= 0) & (self.keys[p] == corr)
        return np.where(hit, self.events[p], -1)


def device_columns(
    trace: RankTrace,
    dev_idx: I64,
    n_host: int,
    coll_event: I64,
    corr: CorrIndex,
    node_of_event: I64,
    host_first: BOOL,
) -> dict[str, I64]:
    """Columns of one node per device event in ``dev_idx`` (in that order): its stream
    resource and its launch edge (the host node before the launching call, with the measured
    launch latency). ``group`` holds the event's name id (-1: collective) for the caller to
    number into law groups; ``kind`` is the caller's too (``coll`` >= 0: a collective)."""
    ev = trace.events
    m = len(dev_idx)
    # Streams in sorted (device, stream) order, after the host threads.
    pairs = np.stack([ev.device[dev_idx].astype(np.int64), ev.stream[dev_idx].astype(np.int64)], 1)
    if m:
        _, stream_of = np.unique(pairs, axis=0, return_inverse=True)
    else:
        stream_of = np.zeros(0, dtype=np.int64)
    res = n_host + stream_of.reshape(-1).astype(np.int64)
    coll = coll_event[dev_idx]
    is_coll = coll >= 0
    start = ev.start[dev_idx].astype(np.int64)
    call = corr.find(ev.correlation[dev_idx].astype(np.int64))
    call_node = np.where(call >= 0, node_of_event[np.clip(call, 0, None)], -1)
    has_prev = (call_node >= 0) & ~host_first[np.clip(call_node, 0, None)]
    prev = np.where(has_prev, call_node - 1, -1)
    linked = prev >= 0
    call_start = ev.start[np.clip(call, 0, None)]
    return {
        "res": res,
        "start": start,
        "dur": ev.dur[dev_idx].astype(np.int64),
        "dep": prev,
        "lag": np.where(linked, start - call_start, 0),
        "dep2": np.full(m, -1, dtype=np.int64),
        "fixed": np.zeros(m, dtype=np.int64),
        "tail": np.zeros(m, dtype=np.int64),
        "release": np.where(linked, -(2**62), start),
        "group": np.where(is_coll, -1, ev.name[dev_idx].astype(np.int64)),
        "coll": np.where(is_coll, coll, -1),
        "event": dev_idx.astype(np.int64),
    }


def syncs(
    trace: RankTrace, c: dict[str, I64], dev_idx: I64, first: int, sync_nodes: I64,
    sync_events: I64, launched: I64,
) -> None:  # fmt: skip
    """Sync calls wait for the latest-ending device node launched before them: the call ends at
    max(start + ``fixed``, that node's end + ``tail``).

    "Latest-ending" admits nodes ending by the call's end plus ``QUEUED_NS``; among equal ends
    the first device node wins. All calls are answered together (:func:`_latest_launched`), so
    a rank that syncs every step costs a sort, not one scan of every kernel per sync."""
    ev = trace.events
    if len(dev_idx) == 0 or len(sync_events) == 0:
        return
    d_launch = launched[dev_idx].astype(np.int64)
    d_end = (ev.start[dev_idx] + ev.dur[dev_idx]).astype(np.int64)
    s = ev.start[sync_events].astype(np.int64)
    e = s + ev.dur[sync_events].astype(np.int64)
    j = _latest_launched(d_launch, d_end, s, e + QUEUED_NS)
    hit = j >= 0
    node, j, s, e = sync_nodes[hit], j[hit], s[hit], e[hit]
    awaited_end = d_end[j]
    c["dep2"][node] = first + j
    waits = awaited_end > s
    c["fixed"][node] = np.where(waits, 0, e - s)
    c["tail"][node[waits]] = np.maximum(e[waits] - awaited_end[waits], 0)


def _latest_launched(launch: I64, end: I64, at: I64, by: I64) -> I64:
    """Per query q: the item with the largest ``end`` <= ``by[q]`` among those with ``launch``
    <= ``at[q]`` (the first item among equal ends), -1 when none.

    In end order the answer is the rightmost admissible position before the end bound: found
    at once where the latest-ending item was launched in time (the usual case), else by a walk
    of a min-tree over launch times, vectorized over the queries: O((n + q) log n)."""
    n = len(end)
    # End order, ties by descending index: the rightmost of equal ends is the first item.
    order = np.lexsort((-np.arange(n), end))
    e_sorted, l_sorted = end[order], launch[order]
    p = np.searchsorted(e_sorted, by, side="right") - 1
    pc = np.clip(p, 0, None)
    found = np.where((p >= 0) & (l_sorted[pc] <= at), p, -1)
    rest = np.flatnonzero((p >= 0) & (found < 0))
    if len(rest):
        found[rest] = _rightmost_at_most(l_sorted, p[rest], at[rest])
    return np.where(found >= 0, order[np.clip(found, 0, None)], -1)


def _rightmost_at_most(values: I64, upto: I64, bound: I64) -> I64:
    """Per query: the largest index i <= ``upto`` with ``values[i] <= bound``, -1 when none
    (a bottom-up min-tree: up from the leaf to the first left sibling holding one, then down
    along the rightmost such child)."""
    size = 1 << max(int(len(values) - 1).bit_length(), 0)
    tree = np.full(2 * size, np.iinfo(np.int64).max, dtype=np.int64)
    tree[size : size + len(values)] = values
    for lvl in range(size.bit_length() - 2, -1, -1):
        lo = 1 << lvl
        tree[lo : 2 * lo] = np.minimum(tree[2 * lo : 4 * lo : 2], tree[2 * lo + 1 : 4 * lo : 2])
    x = upto.astype(np.int64) + size
    done = tree[x] <= bound  # the leaf itself
    while True:
        climb = ~done & (x > 1)
        if not climb.any():
            break
        left = climb & (x % 2 == 1) & (tree[np.maximum(x - 1, 1)] <= bound)
        x = np.where(left, x - 1, np.where(climb, x // 2, x))
        done |= left
    while True:
        down = done & (x < size)
        if not down.any():
            break
        right = 2 * x + 1
        go = np.where(tree[np.where(down, right, 1)] <= bound, right, 2 * x)
        x = np.where(down, go, x)
    return np.where(done, x - size, -1)


def _dep2_end(c: dict[str, I64]) -> I64:
    has = c["dep2"] >= 0
    d2 = np.clip(c["dep2"], 0, None)
    return np.where(has, (c["start"] + c["dur"])[d2], -(2**62))


#: A kernel that started within this of another stream's kernel end may have waited for it.
WAIT_GAP_NS = 10 * QUEUED_NS


def _other_stream_end(c: dict[str, I64], dev: BOOL) -> tuple[I64, I64]:
    """Per node: the latest end at or before its start of a device node on another stream, and
    that node (-2^62 and -1 for nodes that are not device nodes or have none). Among equal ends
    the lowest stream wins, and on one stream the last node.

    One sort of every device node by (end, stream descending, node): the best node of a prefix
    is its last, and the best on another stream than that one's is the last before its run of
    equal streams, so each node's answer is one binary search, however many streams there are
    (a search per stream over every other stream's nodes was quadratic in streams)."""
    n = len(dev)
    best_end = np.full(n, -(2**62), dtype=np.int64)
    best = np.full(n, -1, dtype=np.int64)
    nodes = np.flatnonzero(dev)
    if len(nodes) == 0:
        return best_end, best
    ends = (c["start"] + c["dur"])[nodes]
    res = c["res"][nodes].astype(np.int64)
    o = np.lexsort((nodes, -res, ends))
    e_sorted, r_sorted, by_end = ends[o], res[o], nodes[o]
    change = np.ones(len(o), dtype=np.bool_)
    change[1:] = r_sorted[1:] != r_sorted[:-1]
    run_start = np.maximum.accumulate(np.where(change, np.arange(len(o)), 0))
    k = np.searchsorted(e_sorted, c["start"][nodes], side="right") - 1
    kc = np.clip(k, 0, None)
    k = np.where((k >= 0) & (r_sorted[kc] == res), run_start[kc] - 1, k)
    hit = k >= 0
    kc = np.clip(k, 0, None)
    best_end[nodes[hit]] = e_sorted[kc][hit]
    best[nodes[hit]] = by_end[kc][hit]
    return best_end, best


#: A stream a wait held resumes within this of the awaited end (GPUs take 1-4 us).
RESUME_NS = 5 * QUEUED_NS


def _held_by_collective(
    c: dict[str, I64], candidate: BOOL, typical: int, other_end: I64, other: I64
) -> BOOL:
    """Kernels that waited for a collective although their launch lag alone does not show it:
    started within ``RESUME_NS`` after a collective on another stream ended, and after their
    own launch plus the typical latency (``lag`` over ``typical + RESUME_NS``) while that launch
    plus the typical latency came before the collective's end: nothing but the collective
    held them. Why beside the ``2 typical + 10 us`` rule of :func:`launch_lags`: a host that
    launches just before the collective ends (MoE's expert GEMMs after the host's token
    permutation) leaves lags of 10-20 us; unlinked, each kept its wait as a launch latency,
    serial at every N (the serial fraction doubled)."""
    hit = candidate & (other >= 0)
    oc = np.clip(other, 0, None)
    gap = c["start"] - other_end
    launch_ready = c["start"] - c["lag"] + typical
    return (
        hit
        & (c["coll"][oc] >= 0)
        & (gap >= 0)
        & (gap <= RESUME_NS)
        & (c["lag"] > typical + RESUME_NS)
        & (launch_ready <= other_end + QUEUED_NS)
    )


def launch_lags(c: dict[str, I64], dev: BOOL, own: BOOL | None = None) -> I64:
    """:func:`counted_launch_lags`' latencies alone."""
    return counted_launch_lags(c, dev, own)[0]


def counted_launch_lags(c: dict[str, I64], dev: BOOL, own: BOOL | None = None) -> tuple[I64, int]:
    """Launch latencies to replay: a kernel that waited in its stream's queue (started within
    1 us of what it was queued behind) keeps only the typical latency, since the replay
    reproduces the queueing. Kernels that started long after their launch, right when a kernel
    on another stream ended, waited for it (an event the trace did not record): that kernel
    becomes their producer (``dep2``), matched by stream and time; so do kernels a collective
    visibly held (:func:`_held_by_collective`). A kernel that started within ``RESUME_NS`` of
    its producer's end was held by it: it keeps only the typical latency, not its wait.

    The typical latency is the median over kernels that started idle (nothing on their own
    stream or a recorded producer explains their start) and not right after another stream's
    kernel: where no wait is recorded at all, most idle kernels are such waits, and their
    median would be a wait, not a launch latency (FSDP without stream-wait records: a typical
    "latency" of 11 ms hid every implicit wait).

    ``own``: nodes whose lag is their device gap after the CUDA graph node they followed
    (``graph_launch``): no launch latency, so left out of the typical one and kept.

    Also returns how many producers :func:`_held_by_collective` inferred: a wait no record
    shows, named in the projection's assumptions with its count."""
    n = len(dev)
    explained = np.full(n, -(2**62), dtype=np.int64)
    # Each device node's predecessor on its own stream, in start order (one sort for all).
    nodes = np.flatnonzero(dev)
    nodes = nodes[np.lexsort((c["start"][nodes], c["res"][nodes]))]
    prev_end = np.concatenate([[-(2**62)], (c["start"] + c["dur"])[nodes][:-1]])
    same = np.concatenate([[False], c["res"][nodes][1:] == c["res"][nodes][:-1]])
    explained[nodes] = np.where(same, prev_end, -(2**62))
    has2 = c["dep2"] >= 0
    d2 = np.clip(c["dep2"], 0, None)
    explained = np.where(dev & has2, np.maximum(explained, (c["start"] + c["dur"])[d2]), explained)
    launched_dep = dev & (c["dep"] >= 0) & (~own if own is not None else True)
    idle = launched_dep & (c["start"] - explained > QUEUED_NS)
    other_end, other = _other_stream_end(c, dev)
    after_other = (other >= 0) & (c["start"] - other_end <= WAIT_GAP_NS)
    free = idle & ~after_other
    basis = free if free.any() else idle
    typical = int(np.median(c["lag"][basis])) if basis.any() else 0
    late = idle & (c["dep2"] < 0) & (c["lag"] > 2 * typical + WAIT_GAP_NS)
    window = max(2 * typical, WAIT_GAP_NS)
    waited = late & (other >= 0) & (c["start"] - other_end <= window)
    held_by = _held_by_collective(c, idle & ~waited & (c["dep2"] < 0), typical, other_end, other)
    waited |= held_by
    c["dep2"][waited] = other[waited]
    # A stream held by a wait resumes a little after the awaited end (the GPU's wait
    # resolution): a kernel starting within RESUME_NS of its producer's end is explained by it.
    after = c["start"] - _dep2_end(c)
    held = (c["dep2"] >= 0) & (after > QUEUED_NS) & (after <= RESUME_NS)
    idle = launched_dep & (c["start"] - np.maximum(explained, _dep2_end(c)) > QUEUED_NS) & ~held
    lag = np.where(launched_dep & ~idle, np.minimum(c["lag"], typical), c["lag"])
    return np.maximum(lag, 0), int(held_by.sum())
