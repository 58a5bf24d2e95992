"""A rank's execution graph: nodes with measured durations and the edges a replay must honour.

Why a graph: a step's time is not a sum of categories but the longest chain through host
threads, GPU streams and the waits between them. Replaying that chain with each node's
duration scaled to a new world size is what makes overlap, launch-bound steps and compute
that waits for communication come out right (Lumos, dPRO).

Nodes (one row each, integer ns as measured):
- host threads: runtime calls (``cudaLaunchKernel``...), host-blocking collectives, and the
  untraced/host-op time between them (``gap`` nodes named after the innermost enclosing op);
- device streams: kernels, memcpys, memsets, collective kernels.

Edges: host-thread order; stream order; launch -> kernel (the kernel starts no earlier than its
launch call plus the measured launch latency); cross-stream waits (``cuda_sync`` events'
``wait_on_stream``/``wait_on_cuda_event_record_corr_id``, else a ``cudaStreamWaitEvent`` call
makes the next kernel wait for the last kernel launched on another stream); device -> host
syncs (``cudaStreamSynchronize``, ``cudaDeviceSynchronize``, ``cudaEventSynchronize``, blocking
``cudaMemcpy``: the call returns when the latest device work launched before it ends, plus the
measured return latency).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

from tracescale.classify.collectives import collective_type, dtype_bytes
from tracescale.ingest.steps import StepWindows, launch_times
from tracescale.ingest.trace import RankTrace

I64 = npt.NDArray[np.int64]
I8 = npt.NDArray[np.int8]

GAP, CALL, SYNC, HCOLL, DEV, DCOLL = range(6)
KIND_NAMES = ("gap", "call", "sync", "host_collective", "device", "device_collective")

_RUNTIME_CATS = frozenset({"cuda_runtime", "Runtime", "cuda_driver"})
_SYNC_CALLS = frozenset(
    {
        "cudaStreamSynchronize",
        "cudaDeviceSynchronize",
        "cudaEventSynchronize",
        "cudaMemcpy",
        "cudaMemcpy2D",
        "hipStreamSynchronize",
        "hipDeviceSynchronize",
        "hipEventSynchronize",
        "hipMemcpy",
    }
)
_WAIT_CALLS = frozenset({"cudaStreamWaitEvent", "hipStreamWaitEvent"})
_RECORD_CALLS = frozenset({"cudaEventRecord", "hipEventRecord"})
_SKIP_DEVICE_CATS = frozenset({"cuda_sync", "gpu_user_annotation"})
_QUEUED_NS = 1_000  # a kernel starting within 1 us of its stream's previous end was queued
#: NCCL spells algorithm and protocol as upper-case tokens between underscores (or before the
#: argument list): anchored and case-sensitive, so the "ll" of "AllReduce" is no protocol.
_ALGO = re.compile(
    r"_(RING|TREE|COLLNET_DIRECT|COLLNET_CHAIN|COLLNET|NVLS_TREE|NVLS|PAT)(?=_|\(|$)"
)
_PROTO = re.compile(r"_(LL128|LL|SIMPLE)(?=_|\(|$)")
_STEP_SUFFIX = re.compile(r"#\d+$")


@dataclass(frozen=True)
class Graph:
    """Columns per node (see the module docstring); all times integer ns, measured.

    ``dep``: node whose end (plus ``lag``) gates the start (the host node before a launch);
    ``dep2``: node whose end gates the start (cross-stream producer) or, for ``SYNC`` nodes, the
    awaited device node (end = max(start + ``fixed``, awaited end + ``tail``)). ``release``: the
    earliest start of a resource's first node. ``group``: law key (kernel name, enclosing op of a
    gap, collective). ``coll``: row in ``collectives`` for collective nodes, else -1.
    ``step``: the step index whose host window launched the node, -1 outside.
    """

    kind: I8
    res: I64
    start: I64
    dur: I64
    dep: I64
    lag: I64
    dep2: I64
    fixed: I64
    tail: I64
    release: I64
    group: I64
    groups: tuple[str, ...]
    coll: I64
    step: I64
    order: npt.NDArray[np.intp]
    step_first: I64  # per step: host node starting at the step's host start
    step_last: I64  # per step: host node ending at the step's host end
    step_numbers: I64
    collectives: pd.DataFrame  # collective, seq, algo, group_size, bytes, node

    def __len__(self) -> int:
        return int(self.kind.shape[0])


def algo_of(kernel_name: str) -> str:
    """``RING_LL`` style label from an NCCL kernel name ('' when it carries none)."""
    a, p = _ALGO.search(kernel_name), _PROTO.search(kernel_name)
    return "_".join(x.group(1) for x in (a, p) if x is not None)


def _innermost(op_start: I64, op_end: I64, op_name: list[str], query: I64) -> list[str]:
    """Name of the innermost op containing each (sorted) query time, '' when none."""
    out: list[str] = []
    stack: list[int] = []
    j, n = 0, len(op_name)
    starts, ends = op_start.tolist(), op_end.tolist()
    for t in query.tolist():
        while j < n and starts[j] <= t:
            while stack and ends[stack[-1]] <= starts[j]:
                stack.pop()
            stack.append(j)
            j += 1
        while stack and ends[stack[-1]] <= t:
            stack.pop()
        out.append(op_name[stack[-1]] if stack else "")
    return out


class _Builder:
    """Accumulates nodes as Python lists (one pass per thread/stream), then freezes them."""

    def __init__(self) -> None:
        self.cols: dict[str, list[int]] = {
            k: []
            for k in (
                "kind", "res", "start", "dur", "dep", "lag", "dep2",
                "fixed", "tail", "release", "group", "coll", "event",
            )
        }  # fmt: skip
        self.groups: dict[str, int] = {}


def _host_nodes(
    b: _Builder,
    res: int,
    split: list[tuple[int, int, int]],
    gap_names: Iterator[str],
    trace: RankTrace,
    coll_event: I64,
    call_node: dict[int, int],
    host_prev: dict[int, int],
) -> None:
    """Append one thread's chain of host nodes (gaps and calls, in time order) column by
    column: the per-node appends of thirteen columns were most of the graph's build time."""
    m = len(split)
    if m == 0:
        return
    strings, names = trace.strings, trace.events.name
    first = len(b.cols["kind"])
    kinds: list[int] = []
    labels: list[str] = []
    colls: list[int] = []
    for _s, _e, i in split:
        if i < 0:
            kinds.append(GAP)
            labels.append("gap:" + next(gap_names))
            colls.append(-1)
        elif coll_event[i] >= 0:
            kinds.append(HCOLL)
            labels.append("collective")
            colls.append(int(coll_event[i]))
        else:
            nm = strings[names[i]]
            kinds.append(SYNC if nm in _SYNC_CALLS else CALL)
            labels.append("call:" + nm)
            colls.append(-1)
    groups = b.groups
    cols = b.cols
    cols["kind"].extend(kinds)
    cols["res"].extend([res] * m)
    cols["start"].extend([s for s, _, _ in split])
    cols["dur"].extend([e - s for s, e, _ in split])
    cols["dep"].extend([-1] * m)
    cols["dep2"].extend([-1] * m)
    cols["coll"].extend(colls)
    cols["lag"].extend([0] * m)
    cols["fixed"].extend([0] * m)
    cols["tail"].extend([0] * m)
    cols["release"].extend([split[0][0]] + [-(2**62)] * (m - 1))
    cols["group"].extend([groups.setdefault(lb, len(groups)) for lb in labels])
    cols["event"].extend([i if i >= 0 else -1 for _, _, i in split])
    for k, (_s, _e, i) in enumerate(split):
        if i >= 0:
            call_node[i] = first + k
        host_prev[first + k] = first + k - 1 if k else -1


def _coll_rows(trace: RankTrace, coll: pd.DataFrame) -> dict[tuple[int, int], int]:
    """(start_ns, end_ns) -> row of the rank's collective instances."""
    return {
        (int(s), int(e)): i
        for i, (s, e) in enumerate(zip(coll["start_ns"], coll["end_ns"], strict=True))
    }


def _message_bytes(trace: RankTrace, events: list[int]) -> list[int]:
    """Bytes per collective event from max(In, Out) nelems of its record_param_comms source.

    AllGather records the shard as In and the full tensor as Out; ReduceScatter the reverse:
    the ring moves (g-1)/g of the larger one, so the larger one is the message.
    """
    ev = trace.events
    by_ext: dict[int, int] = {}
    for i in np.flatnonzero(~ev.is_device & (ev.coll_name >= 0) & (ev.external_id >= 0)).tolist():
        by_ext[int(ev.external_id[i])] = i
    corr_ext: dict[int, int] = {}
    launches = np.flatnonzero(~ev.is_device & (ev.correlation >= 0) & (ev.external_id >= 0))
    for i in launches.tolist():
        corr_ext[int(ev.correlation[i])] = int(ev.external_id[i])
    out: list[int] = []
    for i in events:
        src = i
        if ev.coll_name[i] < 0 or max(ev.in_nelems[i], ev.out_nelems[i]) < 0:
            ext = int(ev.external_id[i])
            if ext not in by_ext:
                ext = corr_ext.get(int(ev.correlation[i]), -1)
            src = by_ext.get(ext, i)
        nel = max(int(ev.in_nelems[src]), int(ev.out_nelems[src]))
        dt = trace.strings[ev.dtype[src]] if ev.dtype[src] >= 0 else "float"
        out.append(nel * dtype_bytes(dt) if nel >= 0 else -1)
    return out


def build_graph(trace: RankTrace, win: StepWindows, coll: pd.DataFrame) -> Graph:
    """The execution graph of ``trace`` over its step windows.

    ``coll``: the rank's collective instances as classify found them (``start_ns``/``end_ns``
    absolute, ``collective``, ``seq``, ``group_size``, ``async``).
    """
    ev = trace.events
    strings = trace.strings
    lo, hi = int(win.start[0]), int(win.end[-1])
    launched = launch_times(trace)
    names = [_STEP_SUFFIX.sub("", s) for s in strings]
    cat_runtime = np.array([s in _RUNTIME_CATS for s in strings], dtype=np.bool_)
    skip_dev = np.array([s in _SKIP_DEVICE_CATS for s in strings], dtype=np.bool_)
    rows = _coll_rows(trace, coll)
    end = ev.start + ev.dur
    coll_event = (
        np.array(
            [rows.get((int(s), int(e)), -1) for s, e in zip(ev.start, end, strict=True)],
            dtype=np.int64,
        )
        if len(rows)
        else np.full(len(ev), -1, dtype=np.int64)
    )
    b = _Builder()
    host = ~ev.is_device
    in_window = (launched >= lo) & (launched < hi)
    leaf = host & in_window & (cat_runtime[ev.cat] | (coll_event >= 0))
    threads = sorted({(int(p), int(t)) for p, t in zip(ev.pid[leaf], ev.tid[leaf], strict=True)})
    main = (win.main_pid, win.main_tid)
    if main not in threads:
        threads.insert(0, main)
    call_node: dict[int, int] = {}  # event index -> node
    host_prev: dict[int, int] = {}  # node -> previous node on its thread
    step_first = np.full(len(win), -1, dtype=np.int64)
    step_last = np.full(len(win), -1, dtype=np.int64)
    for res, (pid, tid) in enumerate(threads):
        on = host & (ev.pid == pid) & (ev.tid == tid)
        idx = np.flatnonzero(on & leaf)
        ops = np.flatnonzero(on & ~leaf & (ev.start < hi) & (end > lo))
        is_main = (pid, tid) == main
        bounds = sorted(
            set(win.host_start.tolist()) | set(win.host_end.tolist()) if is_main else set()
        )
        cursor = int(win.host_start[0]) if is_main else (int(ev.start[idx[0]]) if len(idx) else hi)
        stop = (
            int(win.host_end[-1])
            if is_main
            else max(cursor, int(end[idx].max()) if len(idx) else hi)
        )
        pieces: list[tuple[int, int, int]] = []  # (start, end, event or -1 for a gap)
        for i in idx.tolist():
            s, e = int(ev.start[i]), int(end[i])
            if s < cursor:
                continue  # nested in the previous leaf
            pieces.append((cursor, s, -1))
            pieces.append((s, e, i))
            cursor = e
        if stop > cursor:
            pieces.append((cursor, stop, -1))
        op_order = np.lexsort((-end[ops], ev.start[ops]))
        ops = ops[op_order]
        edges = np.unique(np.concatenate([ev.start[ops], end[ops], np.asarray(bounds, np.int64)]))
        split: list[tuple[int, int, int]] = []
        # Where each gap's op boundaries lie, for all gaps in one search.
        gap_bounds = np.array([(s, e) for s, e, i in pieces if i < 0], dtype=np.int64).reshape(
            -1, 2
        )
        lo_at = iter(np.searchsorted(edges, gap_bounds[:, 0], side="right").tolist())
        hi_at = iter(np.searchsorted(edges, gap_bounds[:, 1], side="right").tolist())
        edge_list = edges.tolist()
        for s, e, i in pieces:
            if i < 0:
                a, z = next(lo_at), next(hi_at)
                cuts = [x for x in edge_list[a:z] if s < x < e]
                for a, z in zip([s, *cuts], [*cuts, e], strict=True):
                    split.append((a, z, -1))
            else:
                split.append((s, e, i))
        gap_mid = np.array([(s + e) // 2 for s, e, i in split if i < 0], dtype=np.int64)
        gap_names = iter(
            _innermost(ev.start[ops], end[ops], [names[n] for n in ev.name[ops].tolist()], gap_mid)
        )
        _host_nodes(b, res, split, gap_names, trace, coll_event, call_node, host_prev)
        if is_main:
            # One search for every step (a list searched per step was quadratic in steps).
            starts = np.fromiter((s for s, _, _ in split), np.int64, len(split))
            ends_ = np.fromiter((e for _, e, _ in split), np.int64, len(split))
            first_node = len(b.cols["kind"]) - len(split)
            host_start = np.asarray(win.host_start, np.int64)
            host_end = np.asarray(win.host_end, np.int64)
            j_first = np.minimum(np.searchsorted(starts, host_start, side="left"), len(split) - 1)
            j_last = np.maximum(np.searchsorted(ends_, host_end, side="right") - 1, 0)
            step_first[:] = first_node + j_first
            step_last[:] = first_node + j_last
    n_host = len(threads)
    # Device nodes, stream by stream.
    dev = ev.is_device & ~skip_dev[ev.cat] & in_window & (ev.stream >= 0)
    dev_idx = np.flatnonzero(dev)
    corr_call = {int(ev.correlation[i]): i for i in call_node if ev.correlation[i] >= 0}
    dev_node = _device_nodes(trace, b, dev_idx, n_host, coll_event, corr_call, call_node, host_prev)
    _cross_stream(trace, b, dev_node, call_node, corr_call, launched)
    _syncs(trace, b, dev_node, call_node, launched)
    return _freeze(trace, b, win, step_first, step_last, launched)


def _device_nodes(
    trace: RankTrace,
    b: _Builder,
    dev_idx: I64,
    n_host: int,
    coll_event: I64,
    corr_call: dict[int, int],
    call_node: dict[int, int],
    host_prev: dict[int, int],
) -> dict[int, int]:
    """Append one node per device event in ``dev_idx`` (in that order), whole arrays at once:
    a rank has millions of kernels, and per-event Python here dominated building the graph."""
    ev, strings = trace.events, trace.strings
    m = len(dev_idx)
    first = len(b.cols["kind"])
    if m == 0:
        return {}
    # Streams in sorted (device, stream) order, after the host threads.
    pairs = np.stack([ev.device[dev_idx].astype(np.int64), ev.stream[dev_idx].astype(np.int64)], 1)
    _, stream_of = np.unique(pairs, axis=0, return_inverse=True)
    res = n_host + stream_of.reshape(-1).astype(np.int64)
    coll = coll_event[dev_idx]
    is_coll = coll >= 0
    start = ev.start[dev_idx].astype(np.int64)
    # Law groups numbered in order of first appearance, as one node at a time would number them.
    code = np.where(is_coll, -1, ev.name[dev_idx].astype(np.int64))
    uniq, first_at, inverse = np.unique(code, return_index=True, return_inverse=True)
    gid = np.empty(len(uniq), dtype=np.int64)
    for u in np.argsort(first_at, kind="stable").tolist():
        c = int(uniq[u])
        label = "collective" if c < 0 else "kernel:" + strings[c]
        gid[u] = b.groups.setdefault(label, len(b.groups))
    # Launch edges: the host node before the launching call, with the measured latency.
    keys = np.fromiter(corr_call.keys(), dtype=np.int64, count=len(corr_call))
    calls = np.fromiter(corr_call.values(), dtype=np.int64, count=len(corr_call))
    prev_of_call = np.array(
        [host_prev.get(call_node[c], -1) for c in calls.tolist()], dtype=np.int64
    )
    by_key = np.argsort(keys, kind="stable")
    keys, calls, prev_of_call = keys[by_key], calls[by_key], prev_of_call[by_key]
    corr = ev.correlation[dev_idx].astype(np.int64)
    pos = np.clip(np.searchsorted(keys, corr), 0, max(len(keys) - 1, 0))
    found = (corr >= 0) & (len(keys) > 0)
    if len(keys):
        found &= keys[pos] == corr
    prev = np.where(found, prev_of_call[pos] if len(keys) else -1, -1)
    linked = prev >= 0
    call_start = ev.start[calls[pos]] if len(keys) else np.zeros(m, dtype=np.int64)
    cols = b.cols
    cols["kind"].extend(np.where(is_coll, DCOLL, DEV).tolist())
    cols["res"].extend(res.tolist())
    cols["start"].extend(start.tolist())
    cols["dur"].extend(ev.dur[dev_idx].astype(np.int64).tolist())
    cols["dep"].extend(np.where(linked, prev, -1).tolist())
    cols["lag"].extend(np.where(linked, start - call_start, 0).tolist())
    cols["dep2"].extend([-1] * m)
    cols["fixed"].extend([0] * m)
    cols["tail"].extend([0] * m)
    cols["release"].extend(np.where(linked, -(2**62), start).tolist())
    cols["group"].extend(gid[inverse.reshape(-1)].tolist())
    cols["coll"].extend(np.where(is_coll, coll, -1).tolist())
    cols["event"].extend(dev_idx.tolist())
    return dict(zip(dev_idx.tolist(), range(first, first + m), strict=True))


def _cross_stream(
    trace: RankTrace,
    b: _Builder,
    dev_node: dict[int, int],
    call_node: dict[int, int],
    corr_call: dict[int, int],
    launched: I64,
) -> None:
    """Producer edges: a kernel after a stream wait starts after the awaited kernel ends."""
    ev, strings = trace.events, trace.strings
    if not dev_node:
        return
    d_idx = np.array(sorted(dev_node), dtype=np.int64)
    d_launch = launched[d_idx]
    order = np.argsort(d_launch, kind="stable")
    d_idx, d_launch = d_idx[order], d_launch[order]
    d_stream = ev.stream[d_idx]
    ix = _StreamIndex.of(d_stream)
    covered: set[int] = set()
    sync_cat = trace.string_id("cuda_sync")
    waits: list[int] = []
    if sync_cat >= 0:
        waits = np.flatnonzero((ev.cat == sync_cat) & (ev.wait_on_stream >= 0)).tolist()
    for w in waits:
        if strings[ev.name[w]] != "Stream Wait Event":
            continue
        call = corr_call.get(int(ev.correlation[w]), -1)
        if call < 0:
            continue
        covered.add(call)
        limit = int(ev.start[call])
        rec = corr_call.get(int(ev.wait_on_corr[w]), -1) if ev.wait_on_corr[w] >= 0 else -1
        if rec >= 0:
            limit = int(ev.start[rec])
        _link(b, dev_node, d_idx, d_launch, ix, int(ev.start[call]), limit,
              int(ev.stream[w]), int(ev.wait_on_stream[w]))  # fmt: skip
    wait_calls = [i for i in call_node if strings[ev.name[i]] in _WAIT_CALLS and i not in covered]
    if not wait_calls:
        return
    records = sorted(i for i in call_node if strings[ev.name[i]] in _RECORD_CALLS)
    rec_start = np.array([ev.start[i] for i in records], dtype=np.int64)
    for c in wait_calls:
        t = int(ev.start[c])
        j = int(np.searchsorted(d_launch, t, side="left"))
        if j >= len(d_idx):
            continue
        target_stream = int(d_stream[j])
        k = int(np.searchsorted(rec_start, t, side="left")) - 1
        limit = int(rec_start[k]) if k >= 0 else t
        _link(b, dev_node, d_idx, d_launch, ix, t, limit, target_stream, -1)


@dataclass(frozen=True)
class _StreamIndex:
    """Device nodes in launch order, indexed per stream, so each stream-wait edge is found by
    binary search instead of a scan of every kernel (waits x kernels was quadratic)."""

    stream: I64
    positions: dict[int, I64]
    #: per position x: the last position <= x on another stream than x's, -1 when none.
    other_before: I64

    @classmethod
    def of(cls, d_stream: I64) -> _StreamIndex:
        n = len(d_stream)
        order = np.argsort(d_stream, kind="stable")
        cuts = np.flatnonzero(np.diff(d_stream[order])) + 1
        positions = {int(d_stream[c[0]]): c for c in np.split(order, cuts) if len(c)}
        change = np.ones(n, dtype=np.bool_)
        change[1:] = d_stream[1:] != d_stream[:-1]
        run_start = np.maximum.accumulate(np.where(change, np.arange(n), 0))
        return cls(d_stream, positions, (run_start - 1).astype(np.int64))

    def first_from(self, stream: int, j: int) -> int:
        """First position >= ``j`` on ``stream``, -1 when none."""
        p = self.positions.get(stream)
        if p is None:
            return -1
        q = int(np.searchsorted(p, j, side="left"))
        return int(p[q]) if q < len(p) else -1

    def last_before(self, k: int, stream: int, other: bool) -> int:
        """Last position < ``k`` on ``stream`` (on any other stream when ``other``), -1."""
        if other:
            x = min(k, len(self.stream)) - 1
            if x < 0:
                return -1
            return x if int(self.stream[x]) != stream else int(self.other_before[x])
        p = self.positions.get(stream)
        if p is None:
            return -1
        q = int(np.searchsorted(p, k, side="left")) - 1
        return int(p[q]) if q >= 0 else -1


def _link(
    b: _Builder,
    dev_node: dict[int, int],
    d_idx: I64,
    d_launch: I64,
    ix: _StreamIndex,
    wait_t: int,
    limit: int,
    stream: int,
    producer_stream: int,
) -> None:
    """First kernel on ``stream`` launched after ``wait_t`` waits for the last kernel launched
    before ``limit`` on ``producer_stream`` (any other stream when -1)."""
    j = int(np.searchsorted(d_launch, wait_t, side="left"))
    first = ix.first_from(stream, j)
    if first < 0:
        return
    consumer = dev_node[int(d_idx[first])]
    k = int(np.searchsorted(d_launch, limit, side="left"))
    if producer_stream >= 0:
        last = ix.last_before(k, producer_stream, other=False)
    else:
        last = ix.last_before(k, stream, other=True)
    if last < 0:
        return
    producer = dev_node[int(d_idx[last])]
    old = b.cols["dep2"][consumer]
    if old < 0 or b.cols["start"][producer] + b.cols["dur"][producer] > (
        b.cols["start"][old] + b.cols["dur"][old]
    ):
        b.cols["dep2"][consumer] = producer


def _syncs(
    trace: RankTrace,
    b: _Builder,
    dev_node: dict[int, int],
    call_node: dict[int, int],
    launched: I64,
) -> None:
    """Sync calls wait for the latest-ending device node launched before them."""
    ev = trace.events
    if not dev_node:
        return
    d_idx = np.array(sorted(dev_node), dtype=np.int64)
    d_launch = launched[d_idx]
    d_end = ev.start[d_idx] + ev.dur[d_idx]
    for i, node in call_node.items():
        if b.cols["kind"][node] != SYNC:
            continue
        s, e = int(ev.start[i]), int(ev.start[i] + ev.dur[i])
        cand = np.flatnonzero((d_launch <= s) & (d_end <= e + _QUEUED_NS))
        if cand.size == 0:
            continue
        j = int(cand[np.argmax(d_end[cand])])
        awaited_end = int(d_end[j])
        b.cols["dep2"][node] = dev_node[int(d_idx[j])]
        if awaited_end > s:
            b.cols["fixed"][node] = 0
            b.cols["tail"][node] = max(e - awaited_end, 0)
        else:
            b.cols["fixed"][node] = e - s


def _dep2_end(c: dict[str, I64]) -> I64:
    has = c["dep2"] >= 0
    d2 = np.clip(c["dep2"], 0, None)
    return np.where(has, (c["start"] + c["dur"])[d2], -(2**62))


def _implicit_producers(
    c: dict[str, I64], dev: npt.NDArray[np.bool_], late: npt.NDArray[np.bool_], typical: int
) -> None:
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
    window = max(2 * typical, 10 * _QUEUED_NS)
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


def _freeze(
    trace: RankTrace,
    b: _Builder,
    win: StepWindows,
    step_first: I64,
    step_last: I64,
    launched: I64,
) -> Graph:
    c = {k: np.asarray(v, dtype=np.int64) for k, v in b.cols.items()}
    kind = c["kind"].astype(np.int8)
    event = c["event"]
    n = len(kind)
    # Launch step of every node: device nodes by their launch, host nodes by their start.
    when = np.where(event >= 0, launched[np.clip(event, 0, None)], c["start"])
    when = np.where(kind >= DEV, when, c["start"])
    k = np.searchsorted(win.host_start, when, side="right") - 1
    inside = (k >= 0) & (when < win.host_end[np.clip(k, 0, None)])
    step = np.where(inside, k, -1).astype(np.int64)
    # Queued kernels keep only the typical launch latency (the queueing is replayed).
    dev = kind >= DEV
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
    idle = launched_dep & (c["start"] - explained > _QUEUED_NS)
    typical = int(np.median(c["lag"][idle])) if idle.any() else 0
    _implicit_producers(c, dev, idle & (c["lag"] > 2 * typical + _QUEUED_NS * 10), typical)
    idle = launched_dep & (c["start"] - np.maximum(explained, _dep2_end(c)) > _QUEUED_NS)
    lag = np.where(launched_dep & ~idle, np.minimum(c["lag"], typical), c["lag"])
    lag = np.maximum(lag, 0)
    # Processing order: every edge points forward in (measured) time, sync calls sort at the
    # end of what they wait for.
    key = c["start"].copy()
    key = np.where(kind == SYNC, np.maximum(key, (c["start"] + c["dur"])[d2] * has2), key)
    order = np.lexsort((np.arange(n), kind >= DEV, key))
    coll_nodes = np.flatnonzero(c["coll"] >= 0)
    coll_events = event[coll_nodes].tolist()
    nbytes = _message_bytes(trace, coll_events)
    names = [trace.strings[trace.events.name[i]] for i in coll_events]
    collectives = pd.DataFrame(
        {
            "node": coll_nodes,
            "row": c["coll"][coll_nodes],
            "bytes": np.asarray(nbytes, dtype=np.int64),
            "algo": [algo_of(nm) for nm in names],
            "name_type": [collective_type(nm) for nm in names],
        }
    )
    return Graph(
        kind=kind,
        res=c["res"],
        start=c["start"],
        dur=c["dur"],
        dep=c["dep"],
        lag=lag,
        dep2=c["dep2"],
        fixed=c["fixed"],
        tail=c["tail"],
        release=c["release"],
        group=c["group"],
        groups=tuple(b.groups),
        coll=c["coll"],
        step=step,
        order=order,
        step_first=step_first,
        step_last=step_last,
        step_numbers=win.numbers.copy(),
        collectives=collectives,
    )
