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
    max(start + ``fixed``, that node's end + ``tail``)."""
    ev = trace.events
    if len(dev_idx) == 0:
        return
    d_launch = launched[dev_idx]
    d_end = ev.start[dev_idx] + ev.dur[dev_idx]
    for node, i in zip(sync_nodes.tolist(), sync_events.tolist(), strict=True):
        s, e = int(ev.start[i]), int(ev.start[i] + ev.dur[i])
        cand = np.flatnonzero((d_launch <= s) & (d_end <= e + QUEUED_NS))
        if cand.size == 0:
            continue
        j = int(cand[np.argmax(d_end[cand])])
        awaited_end = int(d_end[j])
        c["dep2"][node] = first + j
        if awaited_end > s:
            c["fixed"][node] = 0
            c["tail"][node] = max(e - awaited_end, 0)
        else:
            c["fixed"][node] = e - s


def _dep2_end(c: dict[str, I64]) -> I64:
    has = c["dep2"] >= 0
    d2 = np.clip(c["dep2"], 0, None)
    return np.where(has, (c["start"] + c["dur"])[d2], -(2**62))


def implicit_producers(c: dict[str, I64], dev: BOOL, late: BOOL, typical: int) -> None:
    """Kernels that started long after their launch, right when a kernel on another stream
    ended, waited for it (an event the trace did not record): that kernel becomes their
    producer, matched by stream and time."""
    cand = np.flatnonzero(late & (c["dep2"] < 0))
    if cand.size == 0:
        return
    ends = c["start"] + c["dur"]
    per_stream: dict[int, tuple[I64, I64]] = {}
    for r in np.unique(c["res"][dev]).tolist():
        nodes = np.flatnonzero(dev & (c["res"] == r))
        o = np.argsort(ends[nodes], kind="stable")
        per_stream[r] = (ends[nodes][o], nodes[o])
    window = max(2 * typical, 10 * QUEUED_NS)
    for i in cand.tolist():
        best, best_end = -1, -(2**62)
        for r, (e_sorted, nodes) in per_stream.items():
            if r == c["res"][i]:
                continue
            k = int(np.searchsorted(e_sorted, c["start"][i], side="right")) - 1
            if k >= 0 and e_sorted[k] > best_end:
                best, best_end = int(nodes[k]), int(e_sorted[k])
        if best >= 0 and c["start"][i] - best_end <= window:
            c["dep2"][i] = best


def launch_lags(c: dict[str, I64], dev: BOOL) -> I64:
    """Launch latencies to replay: a kernel that waited in its stream's queue (started within
    1 us of what it was queued behind) keeps only the typical latency, since the replay
    reproduces the queueing; kernels that started late without a recorded cause first get an
    implicit producer (:func:`implicit_producers`)."""
    n = len(dev)
    explained = np.full(n, -(2**62), dtype=np.int64)
    for r in np.unique(c["res"][dev]).tolist():
        nodes = np.flatnonzero(dev & (c["res"] == r))
        nodes = nodes[np.argsort(c["start"][nodes], kind="stable")]
        prev_end = np.concatenate([[-(2**62)], (c["start"] + c["dur"])[nodes][:-1]])
        explained[nodes] = prev_end
    has2 = c["dep2"] >= 0
    d2 = np.clip(c["dep2"], 0, None)
    explained = np.where(dev & has2, np.maximum(explained, (c["start"] + c["dur"])[d2]), explained)
    launched_dep = dev & (c["dep"] >= 0)
    idle = launched_dep & (c["start"] - explained > QUEUED_NS)
    typical = int(np.median(c["lag"][idle])) if idle.any() else 0
    implicit_producers(c, dev, idle & (c["lag"] > 2 * typical + QUEUED_NS * 10), typical)
    idle = launched_dep & (c["start"] - np.maximum(explained, _dep2_end(c)) > QUEUED_NS)
    lag = np.where(launched_dep & ~idle, np.minimum(c["lag"], typical), c["lag"])
    return np.maximum(lag, 0)
