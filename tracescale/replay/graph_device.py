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


#: A kernel that started within this of another stream's kernel end may have waited for it.
WAIT_GAP_NS = 10 * QUEUED_NS


def _other_stream_end(c: dict[str, I64], dev: BOOL) -> tuple[I64, I64]:
    """Per node: the latest end at or before its start of a device node on another stream, and
    that node (-2^62 and -1 for nodes that are not device nodes or have none)."""
    n = len(dev)
    best_end = np.full(n, -(2**62), dtype=np.int64)
    best = np.full(n, -1, dtype=np.int64)
    ends = c["start"] + c["dur"]
    nodes_dev = np.flatnonzero(dev)
    for r in np.unique(c["res"][dev]).tolist():
        on = nodes_dev[c["res"][nodes_dev] == r]
        o = np.argsort(ends[on], kind="stable")
        e_sorted, by_end = ends[on][o], on[o]
        others = nodes_dev[c["res"][nodes_dev] != r]
        k = np.searchsorted(e_sorted, c["start"][others], side="right") - 1
        hit = k >= 0
        cand_end = np.where(hit, e_sorted[np.clip(k, 0, None)], -(2**62))
        better = hit & (cand_end > best_end[others])
        best_end[others[better]] = cand_end[better]
        best[others[better]] = by_end[np.clip(k, 0, None)][better]
    return best_end, best


def launch_lags(c: dict[str, I64], dev: BOOL) -> I64:
    """Launch latencies to replay: a kernel that waited in its stream's queue (started within
    1 us of what it was queued behind) keeps only the typical latency, since the replay
    reproduces the queueing. Kernels that started long after their launch, right when a kernel
    on another stream ended, waited for it (an event the trace did not record): that kernel
    becomes their producer (``dep2``), matched by stream and time.

    The typical latency is the median over kernels that started idle (nothing on their own
    stream or a recorded producer explains their start) and not right after another stream's
    kernel: where no wait is recorded at all, most idle kernels are such waits, and their
    median would be a wait, not a launch latency (FSDP without stream-wait records: a typical
    "latency" of 11 ms hid every implicit wait)."""
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
    other_end, other = _other_stream_end(c, dev)
    after_other = (other >= 0) & (c["start"] - other_end <= WAIT_GAP_NS)
    free = idle & ~after_other
    basis = free if free.any() else idle
    typical = int(np.median(c["lag"][basis])) if basis.any() else 0
    late = idle & (c["dep2"] < 0) & (c["lag"] > 2 * typical + WAIT_GAP_NS)
    window = max(2 * typical, WAIT_GAP_NS)
    waited = late & (other >= 0) & (c["start"] - other_end <= window)
    c["dep2"][waited] = other[waited]
    idle = launched_dep & (c["start"] - np.maximum(explained, _dep2_end(c)) > QUEUED_NS)
    lag = np.where(launched_dep & ~idle, np.minimum(c["lag"], typical), c["lag"])
    return np.maximum(lag, 0)
