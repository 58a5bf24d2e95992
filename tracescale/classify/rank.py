"""Per-rank attribution: one trace -> a compact per-step result (the map side of map/reduce).

GPU traces: the device (all streams) is the critical resource; when it idles, the main host
thread says why. CPU-only traces: the main thread is the critical resource. The attribution
rules are the layers below, in priority order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from tracescale.categories import CATEGORIES
from tracescale.classify.blocking import blocking_copies, capture_note
from tracescale.classify.collectives import collective_instances, type_layers
from tracescale.classify.exposure import exposed, hideable
from tracescale.classify.gpu_metrics import add_gpu_columns
from tracescale.classify.recompute import recomputed
from tracescale.classify.rules import DEVICE_TARGETS, HOST_TARGETS, RuleSet, classify_events
from tracescale.classify.timeline import (
    BOOL,
    CAT,
    I64,
    Segments,
    coverage,
    last_at_or_before,
    merge_runs,
    overlap_window,
    sorted_unique,
)
from tracescale.classify.top_ops import rank_op_seconds
from tracescale.classify.work_size import rank_input_sizes
from tracescale.ingest.devices import device_kind
from tracescale.ingest.steps import StepWindows, find_steps, launch_times
from tracescale.ingest.trace import RankTrace
from tracescale.table import FrameField, Table

_HOST_T = (*HOST_TARGETS, "compute")
_OP_CATS = ("cpu_op", "Operator")
_STEP_PREFIX = "ProfilerStep#"
_REPLICATED_PREFIX = ("Optimizer.step", "Optimizer.zero_grad")


@dataclass(frozen=True)
class RankResult:
    """Compact result of one rank: per-step table, collective instances, categorized timeline."""

    path: str
    rank: int
    world_size: int | None
    kind: str  # "gpu" or "cpu": the resource attribution treated as critical
    #: classify.result.STEP_COLUMNS (communication_wait filled by the run), plus
    #: gpu_metrics.GPU_STEP_COLUMNS on GPU ranks (dropped when the run is built). Every frame
    #: field is stored as a table.Table; reading the attribute builds the pandas frame.
    if TYPE_CHECKING:  # required fields to the type checker (it reads a descriptor as a default)
        steps: Any
        collectives: Any  # start_ns/end_ns absolute
    else:
        steps: FrameField = FrameField(required=True)
        collectives: FrameField = FrameField(required=True)  # start_ns/end_ns absolute
    segments: Segments
    comm_by_type: dict[str, float]  # exposed seconds summed over steps, per collective type
    warnings: tuple[str, ...]
    #: Unruled main-thread annotations (name, step, start_ns, end_ns): the parent compares them
    #: across ranks to find single-rank work (a reduction only rank 0 does).
    annotations: FrameField = FrameField()  # noqa: RUF009 (a descriptor)
    #: Seconds per (step, name) of every such range, also the short ones not kept above, so
    #: "absent on the other ranks" means absent, not merely too short to keep.
    range_totals: FrameField = FrameField()  # noqa: RUF009 (a descriptor)
    #: Seconds per (step, category, name) of the ops/kernels owning each category's time
    #: (classify.top_ops.OP_COLUMNS): the top contributors, already summed per name.
    op_seconds: FrameField = FrameField()  # noqa: RUF009 (a descriptor)
    #: Median input elements per (op name, input position): tells strong from weak scaling.
    input_sizes: FrameField = FrameField()  # noqa: RUF009 (a descriptor)
    #: The accelerator family and what in the trace was not recognised (ingest.devices).
    device: str = "gpu"
    unknown_devices: tuple[str, ...] = ()


#: Device work that starts this long after it was queued waited for something other than the
#: host (another stream, another process): a sync's stall ends where it was queued.
QUEUED_LONG_NS = 1_000_000


def _mask_names(trace: RankTrace, pred: Callable[[str], bool]) -> BOOL:
    """Per event, whether its name satisfies ``pred``: a prefix test here, never one that tells
    ``ProfilerStep#N`` numbers apart, so the step names are asked once (``steps_alike``)."""
    table = trace.string_mask(pred, steps_alike=True)
    return table[trace.events.name] if table.shape[0] else np.zeros(0, dtype=np.bool_)


def classify_rank(trace: RankTrace, rules: RuleSet, *, rank: int | None = None) -> RankResult:
    """Attribute every instant of every step window of ``trace`` to one category."""
    ev = trace.events
    win = find_steps(trace, rules.step_marker)
    warnings = list(win.warnings)
    skipped = trace.meta.skipped
    for what, count in skipped.items():
        warnings.append(f"{count} {what} skipped")
    strings = trace.strings
    host = ~ev.is_device
    dev_t = classify_events(
        rules.device, DEVICE_TARGETS, strings, ev.name, ev.cat, step_names=trace.step_names
    )
    host_t = classify_events(
        rules.host, _HOST_T, strings, ev.name, ev.cat, step_names=trace.step_names
    )
    dev_t = np.where(ev.is_device, dev_t, -1).astype(np.int8)
    host_t = np.where(host, host_t, -1).astype(np.int8)
    lo, hi = int(win.start[0]), int(win.end[-1])
    captured = capture_note(trace, lo, hi)
    if captured is not None:
        warnings.append(captured)
    inside = (ev.start < hi) & (ev.start + ev.dur > lo)
    work = ev.is_device & inside & np.isin(dev_t, [0, 1, 2])
    kind = "gpu" if work.any() else "cpu"

    is_step = _mask_names(trace, lambda s: s.startswith(_STEP_PREFIX))
    main = host & (ev.pid == win.main_pid) & (ev.tid == win.main_tid) & ~is_step
    gloo_threads = _comm_threads(trace)
    on_comm_thread = np.isin(ev.tid, np.array(sorted(gloo_threads), dtype=np.int64)) & host
    # A gloo:* op recorded on the main thread itself must not make it a collective thread.
    on_comm_thread &= ~((ev.pid == win.main_pid) & (ev.tid == win.main_tid))
    cat_is_op = np.isin(ev.cat, np.array([trace.string_id(c) for c in _OP_CATS], dtype=np.int32))

    layers: dict[str, tuple[I64, I64]] = {}
    masks: dict[str, BOOL] = {}

    def add(name: str, mask: BOOL) -> None:
        m = masks[name] = mask & inside
        layers[name] = (np.maximum(ev.start[m], lo), np.minimum(ev.start[m] + ev.dur[m], hi))

    add("dl", main & (host_t == 0))
    add("sync", main & ((host_t == 1) | blocking_copies(trace)))
    add("red", main & (host_t == 2))
    add("hcomm", main & (host_t == 3))
    if kind == "gpu":
        add("compute", ev.is_device & (dev_t == 0))
        add("memcpy", ev.is_device & (dev_t == 1))
        add("comm", ev.is_device & (dev_t == 2))
        add("anyop", host & (ev.pid == win.main_pid) & ~on_comm_thread & ~is_step)
        replicated = _replicated_device(trace, main, dev_t)
        add("replicated", ev.is_device & (dev_t == 0) & replicated)
    else:
        add("anyop", main & cat_is_op)
        add("comm", host & on_comm_thread)
        replicated_host = _inside_annotation(trace, main, _REPLICATED_PREFIX)
        add("replicated", main & cat_is_op & replicated_host)
    launched = launch_times(trace)  # once: collectives and hideable compute both need it
    gpu_work = np.flatnonzero(ev.is_device & np.isin(dev_t, [0, 1, 2]) & (kind == "gpu"))
    coll = collective_instances(trace, dev_t, host_t, on_comm_thread, win, kind, launched)
    tl = type_layers(trace, coll, main & (host_t == 3), lo, hi)

    pts = [win.start, win.end] + [a for s, e in layers.values() for a in (s, e)]
    pts += [a for s, e in tl.values() for a in (s, e)]
    points = sorted_unique(np.concatenate(pts))
    cov = {k: coverage(points, s, e) for k, (s, e) in layers.items()}
    seg_s, seg_e = points[:-1], points[1:]
    if kind == "gpu":
        dev_starts = np.sort(np.concatenate([layers[k][0] for k in ("compute", "memcpy", "comm")]))
        sync_ends = np.sort(layers["sync"][1])
        # After a sync the device's idle time is the sync's until the next device work
        # starts: the sync drained the queue, so the next launch's latency is exposed too.
        # Work queued long before it starts (QUEUED_LONG: a copy 8 ms late in a vLLM decode
        # on ROCm, after a 2 us hipEventSynchronize) waits for something else: from its
        # queueing on, that idle time is not the sync's.
        late = gpu_work[ev.start[gpu_work] - launched[gpu_work] > QUEUED_LONG_NS]
        queued = np.sort(launched[late]) if len(late) else dev_starts
        since = np.maximum(last_at_or_before(dev_starts, seg_s), last_at_or_before(queued, seg_s))
        post_sync = last_at_or_before(sync_ends, seg_s) >= since
        post_sync &= last_at_or_before(sync_ends, seg_s) > np.iinfo(np.int64).min
        conds = [
            cov["compute"],
            cov["memcpy"],
            cov["comm"],
            cov["dl"],
            cov["sync"],
            cov["red"],
            cov["hcomm"],
            post_sync,
            cov["anyop"],
        ]
        cats = [
            "compute",
            "memcpy",
            "communication",
            "dataloader",
            "sync",
            "reduction",
            "communication",
            "sync",
            "host",
        ]
        default = "idle"
    else:
        # Untraced gaps on the main thread are Python the profiler does not record: `host`.
        # While a gloo collective runs on its own thread, such a gap is the wait for it.
        conds = [cov["dl"], cov["sync"], cov["red"], cov["hcomm"], cov["anyop"], cov["comm"]]
        cats = ["dataloader", "sync", "reduction", "communication", "compute", "communication"]
        default = "host"
    seg_cat = np.select(conds, [np.int8(CAT[c]) for c in cats], default=np.int8(CAT[default]))
    seg_cat = seg_cat.astype(np.int8)
    step_idx = np.searchsorted(win.start, seg_s, side="right") - 1
    in_step = (step_idx >= 0) & (seg_s < win.end[np.clip(step_idx, 0, None)])
    length = (seg_e - seg_s).astype(np.float64) / 1e9
    rank_id = rank if rank is not None else (trace.meta.rank if trace.meta.rank is not None else 0)
    steps = _step_table(win, seg_s, seg_e, seg_cat, step_idx, in_step, length, cov, kind, rank_id)
    if len(gpu_work):  # HTA-compatible GPU measures per step, beside the step table
        add_gpu_columns(steps, trace, win, launched, dev_t, gpu_work)
    segs = merge_runs(seg_s[in_step], seg_e[in_step], seg_cat[in_step])
    again = recomputed(trace, launched)
    ops = rank_op_seconds(
        trace, masks, kind, seg_s, seg_cat, length, step_idx, in_step, win.numbers, again
    )
    comm_by_type: dict[str, float] = {}
    comm_seg = in_step & (seg_cat == CAT["communication"])
    claimed = np.zeros(seg_s.shape[0], dtype=np.bool_)
    for ctype, (s, e) in tl.items():
        c = coverage(points, s, e) & comm_seg & ~claimed
        claimed |= c
        if c.any():
            comm_by_type[ctype] = float(length[c].sum())
    rest = comm_seg & ~claimed
    if rest.any():
        comm_by_type["other"] = comm_by_type.get("other", 0.0) + float(length[rest].sum())
    coll = exposed(coll, segs)
    work = (ev.is_device & (dev_t == 0)) if kind == "gpu" else (main & cat_is_op)
    coll = hideable(trace, coll, segs, work, launched)
    coll.insert(0, "rank", rank_id)
    ranges, totals = _annotations(trace, main & (host_t < 0), win)
    dk = device_kind(trace, win.main_pid)
    return RankResult(
        path=trace.meta.path,
        rank=rank_id,
        world_size=trace.meta.world_size,
        kind=kind,
        steps=steps,
        collectives=coll,
        segments=segs,
        comm_by_type=comm_by_type,
        warnings=tuple(warnings),
        annotations=ranges,
        range_totals=totals,
        op_seconds=ops,
        input_sizes=rank_input_sizes(trace, main & cat_is_op),
        device=dk.family,
        unknown_devices=dk.unknown,
    )


#: Host ranges a rank's single-rank work is searched in (user ranges and the ops themselves).
_RANGE_CATS = ("user_annotation", "cpu_op", "Operator")
#: Ranges kept with their times only when, per name and step, they add up to at least the
#: share the parent's test needs (single_rank._MIN_SHARE) in a few calls: a per-layer op called
#: hundreds of times a step is not a reduction, and keeping it would grow every rank's result.
_RANGE_MIN_SHARE = 0.005
_RANGE_MAX_CALLS = 32


def _annotations(trace: RankTrace, mask: BOOL, win: StepWindows) -> tuple[Table, Table]:
    """Main-thread ranges no rule claimed, with their step: the parent compares them across
    ranks to find work only one rank does (a rank-0 reduction, named or not)."""
    ev = trace.events
    cats = np.array([trace.string_id(c) for c in _RANGE_CATS], dtype=np.int32)
    idx = np.flatnonzero(mask & np.isin(ev.cat, cats[cats >= 0]))
    k = np.searchsorted(win.start, ev.start[idx], side="right") - 1
    ok = (k >= 0) & (ev.start[idx] < win.end[np.clip(k, 0, None)])
    idx, k = idx[ok], k[ok]
    if len(idx) == 0:
        empty = Table(columns=["name", "step", "start_ns", "end_ns", "is_op"])
        return empty, Table(columns=["step", "name", "seconds", "is_op"])
    # Per (step, name): summed in integer ns (exact in any order), so plain numpy over the
    # rows sorted by step then name gives what a pandas groupby would, at a tenth of its cost
    name_id = ev.name[idx]
    is_op = ev.cat[idx] != trace.string_id("user_annotation")
    start = ev.start[idx]
    end = start + ev.dur[idx]
    d = end - start
    order = np.lexsort((name_id, k))
    ks, ns = k[order], name_id[order]
    new = np.ones(len(order), dtype=np.bool_)
    new[1:] = (ks[1:] != ks[:-1]) | (ns[1:] != ns[:-1])
    first = np.flatnonzero(new)
    seconds = np.add.reduceat(d[order], first)
    all_op = np.logical_and.reduceat(is_op[order], first)
    group = np.empty(len(order), dtype=np.int64)
    group[order] = np.cumsum(new) - 1
    totals = Table(
        {
            "step": win.numbers[ks[first].astype(np.int64)],
            "name": trace.names(ns[first].astype(np.int32)),
            "seconds": seconds.astype(np.float64) / 1e9,
            "is_op": all_op.astype(np.bool_),
        }
    )
    total = seconds[group]
    calls = np.diff(np.append(first, len(order)))[group]
    step_len = (win.end - win.start)[k]
    keep = (total >= _RANGE_MIN_SHARE * step_len) & (calls <= _RANGE_MAX_CALLS)
    ranges = Table(
        {
            "name": trace.names(name_id[keep].astype(np.int32)),
            "step": win.numbers[k[keep].astype(np.int64)],
            "start_ns": start[keep],
            "end_ns": end[keep],
            "is_op": is_op[keep].astype(np.bool_),
        }
    )
    return ranges, totals


def _step_table(
    win: StepWindows,
    seg_s: I64,
    seg_e: I64,
    seg_cat: np.ndarray,
    step_idx: I64,
    in_step: BOOL,
    length: np.ndarray,
    cov: dict[str, BOOL],
    kind: str,
    rank: int,
) -> Table:
    n = len(win)
    k = step_idx[in_step]
    w = length[in_step]
    table = np.zeros((n, len(CATEGORIES)), dtype=np.float64)
    np.add.at(table, (k, seg_cat[in_step].astype(np.int64)), w)
    comm = cov["comm"][in_step]
    compute_cov = cov["compute"][in_step] if kind == "gpu" else cov["anyop"][in_step]
    overlapped = np.bincount(k[comm & compute_cov], weights=w[comm & compute_cov], minlength=n)
    transfer = np.bincount(k[comm], weights=w[comm], minlength=n)
    rep = cov["replicated"][in_step] & (seg_cat[in_step] == CAT["compute"])
    serial_compute = np.bincount(k[rep], weights=w[rep], minlength=n)
    window = overlap_window(k, seg_s[in_step], seg_e[in_step], w, comm, compute_cov, n)
    origin = int(win.start[0])
    data = {
        "rank": np.full(n, rank, dtype=np.int64),
        "step": win.numbers,
        "start": (win.start - origin) / 1e9,
        "duration": (win.end - win.start) / 1e9,
    }
    for i, c in enumerate(CATEGORIES):
        data[c] = table[:, i]
    data["overlapped_communication"] = overlapped
    data["communication_wait"] = np.zeros(n)
    data["comm_transfer"] = transfer
    data["overlap_window"] = window
    data["serial_compute"] = serial_compute
    df = Table(data, attrs={"origin_ns": origin})
    return df


def _comm_threads(trace: RankTrace) -> set[int]:
    """Threads that run collectives for the main thread (gloo's pt_gloo_runloop)."""
    ev = trace.events
    gloo = _mask_names(trace, lambda s: s.startswith("gloo:")) & ~ev.is_device
    named = {tid for (pid, tid), name in trace.meta.thread_names.items() if "gloo" in name}
    return set(np.unique(ev.tid[gloo]).tolist()) | named


def _inside_annotation(trace: RankTrace, main: BOOL, prefixes: tuple[str, ...]) -> BOOL:
    """Events (by start) inside a main-thread annotation whose name starts with a prefix."""
    ev = trace.events
    ann = main & _mask_names(trace, lambda s: s.startswith(prefixes))
    if not ann.any():
        return np.zeros(len(ev), dtype=np.bool_)
    s, e = ev.start[ann], ev.start[ann] + ev.dur[ann]
    pos = np.searchsorted(s, ev.start, side="right") - 1
    ok = pos >= 0
    out = np.zeros(len(ev), dtype=np.bool_)
    out[ok] = ev.start[ok] < e[pos[ok]]
    return out


def _replicated_device(trace: RankTrace, main: BOOL, dev_t: np.ndarray) -> BOOL:
    """Device events launched from inside Optimizer.* annotations (same work on every rank)."""
    ev = trace.events
    host_in = _inside_annotation(trace, main, _REPLICATED_PREFIX)
    launches = ~ev.is_device & (ev.correlation >= 0) & host_in
    if not launches.any():
        return np.zeros(len(ev), dtype=np.bool_)
    return ev.is_device & np.isin(ev.correlation, ev.correlation[launches])
