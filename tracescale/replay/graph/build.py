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

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from tracescale.classify.blocking import blocking_copies
from tracescale.classify.collectives import collective_type
from tracescale.classify.rules import RuleSet, load_rules
from tracescale.ingest.devices import XPU_RUNTIME_CATEGORIES, XPU_SYNC_CALLS
from tracescale.ingest.execution_trace import EtDependencies
from tracescale.ingest.steps import StepWindows, launch_times
from tracescale.ingest.trace import RankTrace
from tracescale.replay.graph.categories import node_categories
from tracescale.replay.graph.collective_nodes import algo_of as algo_of
from tracescale.replay.graph.collective_nodes import collective_events, message_bytes
from tracescale.replay.graph.cuda_graphs import chain_graph_nodes
from tracescale.replay.graph.device import CorrIndex, counted_launch_lags, device_columns, syncs
from tracescale.replay.graph.et_pairs import et_pairs
from tracescale.replay.graph.host import ThreadPieces, step_bounds, thread_pieces
from tracescale.replay.graph.labels import LawGroups, step_free_names
from tracescale.replay.waits.cross_stream import add_joins, cross_stream
from tracescale.replay.waits.order import forward_order
from tracescale.table import Table

I64 = npt.NDArray[np.int64]
I8 = npt.NDArray[np.int8]
I32 = npt.NDArray[np.int32]

GAP, CALL, SYNC, HCOLL, DEV, DCOLL = range(6)
KIND_NAMES = ("gap", "call", "sync", "host_collective", "device", "device_collective")

_RUNTIME_CATS = frozenset({"cuda_runtime", "Runtime", "cuda_driver", *XPU_RUNTIME_CATEGORIES})
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
        *XPU_SYNC_CALLS,
    }
)
_SKIP_DEVICE_CATS = frozenset({"cuda_sync", "gpu_user_annotation"})


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
    res: I32
    start: I64
    dur: I64
    dep: I32
    lag: I64
    dep2: I32
    fixed: I64
    tail: I64
    release: I64
    group: I32
    groups: tuple[str, ...]
    coll: I32
    step: I32
    order: npt.NDArray[np.intp]
    step_first: I64  # per step: host node starting at the step's host start
    step_last: I64  # per step: host node ending at the step's host end
    step_numbers: I64
    collectives: Table  # node, row, bytes, algo, name_type, pg (its process group instance)
    #: per node: index into ``CATEGORIES`` of the attribution category it runs in, -1 none
    #: (``graph_categories``); what-if scenarios rescale nodes by it
    category: I8 = field(default_factory=lambda: np.zeros(0, dtype=np.int8))
    #: join nodes of waits no record shows, inferred by rule (``graph_waits.optimizer_waits``:
    #: the optimizer step after the gradients' collectives); the assumptions name the rule
    inferred_waits: int = 0
    #: producers inferred for kernels a collective on another stream held without a record
    #: (``graph.device``: ready before its end, started 0-5 us after it); the assumptions name
    #: the rule with this count
    held_waits: int = 0
    #: (producer node, consumer node) per execution-trace dependency found in this trace
    #: (``graph.et_pairs``); placed as edges after the rule-based waits (``waits.et_edges``)
    et_pairs: I64 = field(default_factory=lambda: np.zeros((0, 2), dtype=np.int64))
    #: those edges placed (``waits.et_edges``); the assumptions name the count
    et_waits: int = 0

    def __len__(self) -> int:
        return int(self.kind.shape[0])


def _process_groups(coll: Any, rows: npt.NDArray[np.int64]) -> list[str]:
    """Each collective node's process group instance (classify's ``pg``; '' where unknown)."""
    if len(rows) == 0 or coll is None or "pg" not in coll:
        return [""] * len(rows)
    pgs = ["" if v is None else str(v) for v in np.asarray(coll["pg"], dtype=object).tolist()]
    return [pgs[r] if 0 <= r < len(pgs) else "" for r in rows.tolist()]


def build_graph(
    trace: RankTrace,
    win: StepWindows,
    coll: Any,
    rules: RuleSet | None = None,
    et: EtDependencies | None = None,
) -> Graph:
    """The execution graph of ``trace`` over its step windows.

    ``coll``: the rank's collective instances as classify found them (``start_ns``/``end_ns``
    absolute, ``collective``, ``seq``, ``group_size``, ``async``). ``rules``: the
    classification rules that give each node its category (the default rules when None).
    ``et``: the dependencies of the execution trace paired with this rank, kept as node pairs
    (``Graph.et_pairs``).
    """
    ev = trace.events
    strings = trace.strings
    lo, hi = int(win.start[0]), int(win.end[-1])
    launched = launch_times(trace)
    names, canon = step_free_names(trace)
    cat_runtime = np.array([s in _RUNTIME_CATS for s in strings], dtype=np.bool_)
    skip_dev = np.array([s in _SKIP_DEVICE_CATS for s in strings], dtype=np.bool_)
    is_sync = np.array([s in _SYNC_CALLS for s in strings], dtype=np.bool_)
    blocking = blocking_copies(trace)  # copies of pageable memory: they wait like a sync
    end = ev.start + ev.dur
    coll_event = collective_events(ev.start, end, coll)
    host = ~ev.is_device
    in_window = (launched >= lo) & (launched < hi)
    leaf = host & in_window & (cat_runtime[ev.cat] | (coll_event >= 0))
    pairs = np.unique(np.stack([ev.pid[leaf], ev.tid[leaf]], 1).astype(np.int64), axis=0)
    threads = [(int(p), int(t)) for p, t in pairs.tolist()]
    main = (win.main_pid, win.main_tid)
    if main not in threads:
        threads.insert(0, main)
    groups = LawGroups()
    chunks: list[dict[str, I64]] = []
    step_first = np.full(len(win), -1, dtype=np.int64)
    step_last = np.full(len(win), -1, dtype=np.int64)
    n_nodes = 0
    sizes: list[int] = []
    for pid, tid in threads:
        on = host & (ev.pid == pid) & (ev.tid == tid)
        idx = np.flatnonzero(on & leaf)
        ops = np.flatnonzero(on & ~leaf & (ev.start < hi) & (end > lo))
        is_main = (pid, tid) == main
        bounds = np.concatenate([win.host_start, win.host_end]) if is_main else np.zeros(0)
        cursor = int(win.host_start[0]) if is_main else (int(ev.start[idx[0]]) if len(idx) else hi)
        stop = (
            int(win.host_end[-1])
            if is_main
            else max(cursor, int(end[idx].max()) if len(idx) else hi)
        )
        p = thread_pieces(
            ev.start[idx], end[idx], idx.astype(np.int64), cursor, stop,
            ev.start[ops], end[ops], ops.astype(np.int64), bounds.astype(np.int64),
        )  # fmt: skip
        chunks.append(
            _host_columns(p, ev.name, is_sync, blocking, coll_event, groups, names, canon, strings)
        )
        if is_main and len(p):
            first, last = step_bounds(p.start, p.end, win.host_start, win.host_end)
            step_first[:] = n_nodes + first
            step_last[:] = n_nodes + last
        n_nodes += len(p)
        sizes.append(len(p))
    dev = ev.is_device & ~skip_dev[ev.cat] & in_window & (ev.stream >= 0)
    dev_idx = np.flatnonzero(dev).astype(np.int64)
    del dev, leaf, in_window, host
    # The columns are allocated once at their final size and filled in place, each chunk
    # freed as soon as it is copied: the graph, not twice the graph, sits beside the trace.
    n_host = n_nodes
    n = n_host + len(dev_idx)
    # Node references, resources, groups and collective rows fit in 32 bits (nodes < 2^31).
    c: dict[str, npt.NDArray[Any]] = {k: np.full(n, -1, dtype=np.int32) for k in ("dep", "dep2")}
    for k in ("res", "group", "coll"):
        c[k] = np.zeros(n, dtype=np.int32)
    for k in ("start", "dur", "lag", "fixed", "tail", "release"):
        c[k] = np.zeros(n, dtype=np.int64)
    c["kind"] = np.zeros(n, dtype=np.int8)
    c["event"] = np.zeros(n, dtype=np.int64)
    host_first = np.zeros(n_host, dtype=np.bool_)
    at = 0
    for res in range(len(chunks)):
        ch = chunks[res]
        chunks[res] = {}
        m = len(ch["kind"])
        for k, v in ch.items():
            c[k][at : at + m] = v
        c["res"][at : at + m] = res
        c["release"][at : at + m] = -(2**62)
        if m:
            c["release"][at] = ch["start"][0]
            host_first[at] = True
        at += m
        del ch
    del chunks
    call_nodes = np.flatnonzero(c["event"][:n_host] >= 0)
    call_events = c["event"][call_nodes]
    node_of_event = np.full(len(ev), -1, dtype=np.int64)
    node_of_event[call_events] = call_nodes
    corr = CorrIndex.of(trace, call_events)
    d = device_columns(trace, dev_idx, len(threads), coll_event, corr, node_of_event, host_first)
    del node_of_event, host_first
    graph_node = np.zeros(n, dtype=np.bool_)  # kernels after a node of their CUDA graph
    graph_node[n_host:] = chain_graph_nodes(trace, d, dev_idx, corr, n_host)
    d["kind"] = np.where(d["coll"] >= 0, DCOLL, DEV).astype(np.int8)
    d["group"] = groups.number(
        d["group"], lambda c: "collective" if c < 0 else "kernel:" + strings[c]
    )
    for k in list(d):
        c[k][n_host:] = d.pop(k)
    joins, inferred = cross_stream(trace, c, dev_idx, n_host, call_events, corr, launched)
    sync_nodes = call_nodes[c["kind"][call_nodes] == SYNC]
    syncs(trace, c, dev_idx, n_host, sync_nodes, c["event"][sync_nodes], launched)
    n_real = add_joins(c, joins, DEV)
    kinds = dict(zip(KIND_NAMES, range(6), strict=True))
    category = node_categories(
        trace, rules if rules is not None else load_rules(), c["kind"], c["event"], c["res"],
        c["start"], c["dur"], main, threads.index(main), kinds,
    )  # fmt: skip
    graph_node = np.concatenate([graph_node, np.zeros(len(c["kind"]) - n, dtype=np.bool_)])
    pairs = np.zeros((0, 2), dtype=np.int64)
    if et is not None:
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        hs = c["start"][:n_host]
        pairs = et_pairs(trace, et, threads, offsets, hs, hs + c["dur"][:n_host])
    graph = _freeze(
        trace, c, tuple(groups.ids), win, step_first, step_last, launched, n_real, graph_node
    )
    rows = np.asarray(graph.collectives["row"], dtype=np.int64)
    colls = graph.collectives.assign(pg=_process_groups(coll, rows))
    return dataclasses.replace(
        graph, category=category, inferred_waits=inferred, et_pairs=pairs, collectives=colls
    )


def _host_columns(
    p: ThreadPieces,
    event_name: npt.NDArray[np.int32],
    is_sync: npt.NDArray[np.bool_],
    blocking: npt.NDArray[np.bool_],
    coll_event: I64,
    groups: LawGroups,
    names: list[str],
    canon: I64,
    strings: Sequence[str],
) -> dict[str, I64]:
    """The columns that vary over one thread's pieces: gaps (law group: the innermost op, step
    numbers dropped), runtime calls (sync calls apart), host-blocking collectives. The thread's
    first piece releases it; nothing else gates a host piece but the one before it."""
    ev_i = np.clip(p.event, 0, None)
    is_gap = p.event < 0
    coll = np.where(is_gap, -1, coll_event[ev_i])
    name = event_name[ev_i].astype(np.int64)
    op_name = np.where(p.op >= 0, canon[event_name[np.clip(p.op, 0, None)]], -1)
    kind = np.where(
        is_gap,
        GAP,
        np.where(coll >= 0, HCOLL, np.where(is_sync[name] | blocking[ev_i], SYNC, CALL)),
    ).astype(np.int64)
    # Label codes: id * 4 + 0 gap (innermost op's name id, -1 none), + 1 call; 2 collective.
    code = np.where(is_gap, op_name * 4, np.where(coll >= 0, 2, name * 4 + 1))

    def label(c: int) -> str:
        if c == 2:
            return "collective"
        k, sort = divmod(c, 4)
        if sort == 1:
            return "call:" + strings[k]
        return "gap:" + (names[k] if k >= 0 else "")

    return {
        "kind": kind,
        "start": p.start,
        "dur": p.end - p.start,
        "group": groups.number(code, label),
        "coll": coll,
        "event": p.event,
    }


def _freeze(
    trace: RankTrace,
    c: dict[str, npt.NDArray[Any]],
    groups: tuple[str, ...],
    win: StepWindows,
    step_first: I64,
    step_last: I64,
    launched: I64,
    n_real: int,
    graph_node: npt.NDArray[np.bool_],
) -> Graph:
    """``n_real``: nodes from the trace; those after it are join nodes (no launch of their own,
    ordered before the consumer they share a start with). ``graph_node``: kernels whose lag is
    their gap after a node of their CUDA graph (``graph_launch``), kept as measured."""
    kind = c.pop("kind").astype(np.int8, copy=False)
    event = c.pop("event")
    n = len(kind)
    real = np.arange(n) < n_real
    # Launch step of every node: device nodes by their launch, host nodes by their start.
    when = np.where(event >= 0, launched[np.clip(event, 0, None)], c["start"])
    when = np.where(kind >= DEV, when, c["start"])
    k = np.searchsorted(win.host_start, when, side="right") - 1
    inside = (k >= 0) & (when < win.host_end[np.clip(k, 0, None)])
    step = np.where(inside, k, -1).astype(np.int32)
    del when, k, inside
    lag, held = counted_launch_lags(c, (kind >= DEV) & real, graph_node)
    # Processing order: every edge points forward in (measured) time, sync calls sort at the
    # end of what they wait for.
    has2 = c["dep2"] >= 0
    d2 = np.clip(c["dep2"], 0, None)
    key = np.where(
        kind == SYNC, np.maximum(c["start"], (c["start"] + c["dur"])[d2] * has2), c["start"]
    )
    order = forward_order(
        np.lexsort((np.arange(n), real, kind >= DEV, key)), c["res"], c["dep"], c["dep2"]
    )
    del key, has2, d2, real
    coll_nodes = np.flatnonzero(c["coll"] >= 0)
    coll_events = event[coll_nodes].tolist()
    nbytes = message_bytes(trace, coll_events)
    names = [trace.strings[trace.events.name[i]] for i in coll_events]
    collectives = Table(
        {
            "node": coll_nodes,
            "row": c["coll"][coll_nodes].astype(np.int64),
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
        groups=groups,
        coll=c["coll"],
        step=step,
        order=order,
        step_first=step_first,
        step_last=step_last,
        step_numbers=win.numbers.copy(),
        collectives=collectives,
        held_waits=held,
    )
