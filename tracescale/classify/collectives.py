"""Collective instances of one rank: type, order, message size, time (matched across ranks later).

NCCL kernels often carry no args themselves; the sizes sit on the ``record_param_comms`` op that
launched them, reachable through the launch's ``External id``. gloo runs each collective on a
``pt_gloo_runloop`` thread as ``gloo:<op>``; its size comes from ``Input Dims`` x ``Input type``.
"""

from __future__ import annotations

import json
import re

import numpy as np

from tracescale.categories import COLLECTIVE_TYPES
from tracescale.classify.timeline import BOOL, I64
from tracescale.ingest.groups import group_table, parse_ranks, resolve_group
from tracescale.ingest.steps import StepWindows, launch_step
from tracescale.ingest.trace import RankTrace
from tracescale.table import Table

_DTYPE_BYTES = {
    "float": 4,
    "float32": 4,
    "f32": 4,
    "half": 2,
    "float16": 2,
    "f16": 2,
    "bfloat16": 2,
    "bf16": 2,
    "double": 8,
    "float64": 8,
    "int": 4,
    "int32": 4,
    "long": 8,
    "int64": 8,
    "byte": 1,
    "char": 1,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "short": 2,
    "int16": 2,
}
_STREAM_WAIT_CALLS = frozenset({"cudaStreamWaitEvent", "hipStreamWaitEvent"})
#: Host ranges of a backend that enqueues its collective as a device kernel.
_ENQUEUE_PREFIXES = ("nccl:", "xccl:")
_TYPE_PATTERNS = (
    ("allreduce", re.compile(r"all_?reduce|cross_device_reduce", re.I)),
    ("reducescatter", re.compile(r"reduce_?scatter", re.I)),
    ("allgather", re.compile(r"all_?gather", re.I)),
    # DeepEP's expert-parallel dispatch/combine (and their notify steps) are all-to-alls.
    ("alltoall", re.compile(r"all_?to_?all|deep_ep::\w+::\w*(?:dispatch|combine)", re.I)),
    ("broadcast", re.compile(r"broadcast|bcast", re.I)),
    ("barrier", re.compile(r"barrier", re.I)),
    ("sendrecv", re.compile(r"send|recv", re.I)),
)


def pipeline_transfers(kinds: np.ndarray, group_sizes: np.ndarray) -> np.ndarray:
    """Which collectives (their types and group sizes) are a pipeline's send/recv between two
    ranks: the transfers that are a stage's dependency on its neighbour, not a collective that
    waits for the slowest of its group."""
    kind = np.asarray(kinds).astype(str)
    size = np.asarray(group_sizes, dtype=np.float64)
    return np.asarray((kind == "sendrecv") & (size <= 2), dtype=np.bool_)


def collective_type(text: str) -> str:
    """Normalized collective type of a kernel/op name or `Collective name` arg."""
    for ctype, rx in _TYPE_PATTERNS:
        if rx.search(text):
            return ctype
    return "other"


def dtype_bytes(name: str) -> int:
    """Element size of a dtype spelling (``Float``, ``c10::BFloat16``, ``float``); 4 if unknown."""
    key = name.lower().split("::")[-1]
    return _DTYPE_BYTES.get(key, 4)


def _gloo_bytes(dims_text: str, types_text: str) -> int:
    """Bytes of the first tensor list of a gloo/c10d op from its recorded shapes."""
    try:
        dims = json.loads(dims_text) if dims_text else []
        types = json.loads(types_text) if types_text else []
    except ValueError:
        return -1
    total = 0
    for i, d in enumerate(dims):
        if isinstance(d, list) and d and all(isinstance(x, int) for x in d):
            size = dtype_bytes(str(types[i])) if i < len(types) else 4
            total += int(np.prod(d)) * size
        elif isinstance(d, list) and d and isinstance(d[0], list):
            for sub in d:
                if isinstance(sub, list) and all(isinstance(x, int) for x in sub):
                    total += int(np.prod(sub)) * 4
        if total:
            break
    return total if total else -1


def collective_instances(
    trace: RankTrace,
    dev_t: np.ndarray,
    host_t: np.ndarray,
    on_comm_thread: BOOL,
    win: StepWindows,
    kind: str,
    launched: I64,
) -> Table:
    """One row per collective instance: step, collective, seq, bytes, group_size, pg,
    start/end ns.

    ``pg`` names the process group instance as ``name:members``
    (:func:`tracescale.ingest.groups.group_key`): its ``Process Group Name`` and member ranks
    (``Process Group Ranks``, else the rank's ``pg_config``; without a name, the rank's only
    ``pg_config`` group of that size), so the k-th AllReduce of tensor parallel pair {0,1}
    and of pair {2,3}, both named "1", are two instances; '' when unknown. ``seq`` counts
    per process group when the trace has no ``Seq``.
    ``launched``: every event's launch time (:func:`~tracescale.ingest.steps.launch_times`).
    """
    ev = trace.events
    strings = trace.strings
    if kind == "gpu":
        idx = np.flatnonzero(ev.is_device & (dev_t == 2))
        idx = np.union1d(idx, _blocking_host_collectives(trace, dev_t, host_t, win))
    else:
        gloo = trace.string_mask(lambda s: s.startswith("gloo:"), steps_alike=True)
        idx = np.flatnonzero(~ev.is_device & on_comm_thread & gloo[ev.name])
    world = trace.meta.world_size or 1
    step_of = launch_step(trace, win.host_start, win.host_end, launched)
    # Sizes from record_param_comms (or the event itself), keyed by External id.
    by_ext: dict[int, int] = {}
    rpc = np.flatnonzero(~ev.is_device & (ev.coll_name >= 0) & (ev.external_id >= 0))
    for i in rpc.tolist():
        by_ext[int(ev.external_id[i])] = i
    corr_ext: dict[int, int] = {}
    launches = np.flatnonzero(~ev.is_device & (ev.correlation >= 0) & (ev.external_id >= 0))
    if kind == "gpu" and len(idx):
        wanted = set(ev.correlation[idx].tolist())
        for i in launches.tolist():
            c = int(ev.correlation[i])
            if c in wanted:
                corr_ext[c] = int(ev.external_id[i])
    groups = group_table(trace)
    keys = [g.key for g in groups.groups]
    rows = []
    per_pg: dict[str, int] = {}
    for i in idx.tolist():
        src = i
        if ev.coll_name[i] < 0:
            ext = int(ev.external_id[i])
            if ext not in by_ext:
                ext = corr_ext.get(int(ev.correlation[i]), -1)
            src = by_ext.get(ext, i)
        cname = strings[ev.coll_name[src]] if ev.coll_name[src] >= 0 else strings[ev.name[i]]
        ctype = collective_type(cname)
        nbytes = -1
        if ev.in_nelems[src] >= 0:
            dt = strings[ev.dtype[src]] if ev.dtype[src] >= 0 else "float"
            nbytes = int(ev.in_nelems[src]) * dtype_bytes(dt)
        elif ev.input_dims[i] >= 0:
            types = strings[ev.input_type[i]] if ev.input_type[i] >= 0 else ""
            nbytes = _gloo_bytes(strings[ev.input_dims[i]], types)
        if nbytes < 0 and ctype == "barrier":
            nbytes = 0  # a barrier moves no data: its cost is latency only, not "unknown"
        gid = int(groups.of_event[src])
        if gid >= 0:
            named = groups.groups[gid]
            group = named.size if named.size > 0 else world
            pg = keys[gid]
        else:
            group = int(ev.group_size[src]) if ev.group_size[src] > 0 else world
            pg = process_group(trace, "", group)
        order = per_pg.get(pg, 0)
        per_pg[pg] = order + 1
        seq = int(ev.seq[src]) if ev.seq[src] >= 0 else order
        k = int(step_of[i])
        step = int(win.numbers[k]) if k >= 0 else -1
        rows.append(
            (
                step,
                ctype,
                seq,
                order,
                nbytes,
                group,
                int(ev.start[i]),
                int(ev.start[i] + ev.dur[i]),
                int(launched[i]),
                bool(ev.is_device[i] or on_comm_thread[i]),
                pg,
            )
        )
    cols = ["step", "collective", "seq", "order", "bytes", "group_size", "start_ns", "end_ns"]
    cols += ["ready_ns", "async", "pg"]  # when it could start; True unless the main thread blocks
    out = Table.from_rows(rows, cols)
    if not rows:
        return out
    out["order"] = np.arange(len(out))  # the instance's order on the rank, over all groups
    return out


def process_group(trace: RankTrace, name: str, group: int, ranks_text: str = "") -> str:
    """``name:members`` of an instance's process group ('' when unknown).

    The members come from ``Process Group Ranks`` (``ranks_text``), else from the rank's
    ``pg_config`` group of that name; without a name, from its only ``pg_config`` group of
    ``group`` ranks. The members tell apart the disjoint groups every rank names alike (each
    tensor-parallel pair is group "1" on its members).
    """
    got = resolve_group(trace, name, group, parse_ranks(ranks_text) if ranks_text else (None, ()))
    return got.key


def _blocking_host_collectives(
    trace: RankTrace, dev_t: np.ndarray, host_t: np.ndarray, win: StepWindows
) -> np.ndarray:
    """Main-thread collective calls that launch no communication kernel (barrier, gloo, ...).

    The host blocks in them (e.g. ``c10d::barrier`` while rank 0 reduces), so they are waits to
    match across ranks like kernels; NCCL calls that enqueue a kernel are represented by it
    (and XCCL's alike: ``xccl:all_reduce``, PTI's ``xccl::allreduce`` records of the same op).
    A call that issues a stream wait (``cudaStreamWaitEvent``: DDP's end-of-backward join, an
    NCCL ``Work::wait``) makes the *device* wait and returns at once: it is not one of them,
    and counting it would hide that stream dependency from everything downstream.
    """
    ev = trace.events
    main = (~ev.is_device) & (ev.pid == win.main_pid) & (ev.tid == win.main_tid)
    skip = trace.string_mask(
        lambda s: s == "record_param_comms" or s.startswith(_ENQUEUE_PREFIXES), steps_alike=True
    )
    cand = np.flatnonzero(main & (host_t == 3) & ~skip[ev.name])
    if cand.size == 0:
        return cand
    comm_corr = ev.correlation[ev.is_device & (dev_t == 2) & (ev.correlation >= 0)]
    launch = ~ev.is_device & (ev.correlation >= 0) & np.isin(ev.correlation, comm_corr)
    launch_t = np.sort(ev.start[launch])
    s, e = ev.start[cand], ev.start[cand] + ev.dur[cand]
    has_kernel = np.searchsorted(launch_t, e, side="left") > np.searchsorted(launch_t, s, "left")
    waits = trace.string_mask(lambda name: name in _STREAM_WAIT_CALLS, steps_alike=True)
    wait_t = np.sort(ev.start[main & waits[ev.name]])
    has_wait = np.searchsorted(wait_t, e, side="left") > np.searchsorted(wait_t, s, "left")
    cand = cand[~has_kernel & ~has_wait]
    # Keep only outermost calls: a c10d op nested in another collective call is the same wait.
    keep: list[int] = []
    last_end: int | None = None  # times may be negative (a clock behind): no -1 sentinel
    for i in cand.tolist():
        if last_end is None or ev.start[i] >= last_end:
            keep.append(i)
            last_end = int(ev.start[i] + ev.dur[i])
    return np.array(keep, dtype=np.int64)


def type_layers(
    trace: RankTrace, coll: Table, host_comm: BOOL, lo: int, hi: int
) -> dict[str, tuple[I64, I64]]:
    """Intervals per collective type (device instances and host collective calls), clipped."""
    ev = trace.events
    out: dict[str, tuple[list[int], list[int]]] = {}
    for ctype, s, e in zip(coll["collective"], coll["start_ns"], coll["end_ns"], strict=True):
        a, b = out.setdefault(str(ctype), ([], []))
        a.append(max(int(s), lo))
        b.append(min(int(e), hi))
    for i in np.flatnonzero(host_comm).tolist():
        ctype = collective_type(trace.strings[ev.name[i]])
        if ctype == "other" and ev.coll_name[i] >= 0:
            ctype = collective_type(trace.strings[ev.coll_name[i]])
        a, b = out.setdefault(ctype, ([], []))
        a.append(max(int(ev.start[i]), lo))
        b.append(min(int(ev.start[i] + ev.dur[i]), hi))
    order = {t: n for n, t in enumerate(COLLECTIVE_TYPES)}
    return {
        t: (np.array(v[0], dtype=np.int64), np.array(v[1], dtype=np.int64))
        for t, v in sorted(out.items(), key=lambda kv: order.get(kv[0], 99))
    }
