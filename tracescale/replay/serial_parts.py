"""The replayed step at infinite N, cut into categories: each category's serial fraction.

Why this and not the closed form's constants: the serial fraction is ``T_inf / T(1)``, where
``T_inf`` is the replayed step with the parallel work divided away and transfers free (the
launches, the serial work and the systematic waits kept). What each category contributes is
its time in that replayed step, so the parts come from the same replay as their total and sum
to it exactly; the closed form's ``a_c`` (fitted per category on measured step totals) put
time hidden under other work into the category it overlaps, and a launch floor into compute.

The replayed timeline is classified by the attribution rules the measured breakdown follows
(docs/attribution.md), applied to the replayed node times instead of the trace's: at each
instant a compute kernel, else a memcpy, else a communication kernel; otherwise the main host
thread's node says why (data loading, sync, single-rank reduction, host-side communication),
then the time after a sync returns until the next device work (sync), any other host node
(host); nothing running is idle. Every instant of a step window gets one category, so the
categories of a step sum to its replayed window.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tracescale.categories import CATEGORIES
from tracescale.classify.timeline import CAT, coverage, last_at_or_before, sorted_unique
from tracescale.replay.arrivals.variability import OffsetPool
from tracescale.replay.engine.schedule import Replayed, step_windows
from tracescale.replay.graph.build import DEV, SYNC, Graph

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

#: Device categories in the rules' priority; then the main thread's host categories.
_DEVICE = ("compute", "memcpy", "communication")
_HOST = ("dataloader", "sync", "reduction", "communication")


def systematic_wait(
    offsets: Mapping[int, OffsetPool], position: int, group: float, wait: float, own: float
) -> float:
    """A collective's wait at infinite N (its ``position`` in the step, ``group`` size, measured
    ``wait`` and this rank's own systematic offset ``own``): the wait for a rank that arrives
    late at it in every step, its systematic offset over this rank's (single-rank work such as
    rank 0's reduction, which does not shrink). Random lateness (device jitter, host delays) is
    an overhead that grows with N, reported at each projected N instead."""
    pool = offsets.get(position) if int(group) > 1 else None
    if pool is None:
        return wait if int(group) > 1 else 0.0
    _, first = np.unique(pool.rank, return_index=True)
    late = float(pool.systematic[first].max()) if len(first) else 0.0
    return max(late - own, 0.0)


def _ns(seconds: F64) -> I64:
    return np.rint(np.asarray(seconds, dtype=np.float64) * 1e9).astype(np.int64)


def step_categories(graph: Graph, rep: Replayed) -> F64:
    """Seconds per category (columns in ``CATEGORIES`` order) of each replayed step window."""
    k = len(graph.step_first)
    out = np.zeros((k, len(CATEGORIES)), dtype=np.float64)
    if k == 0 or len(graph) == 0:
        return out
    seg = _segments(graph, rep)
    np.add.at(out, (seg.step[seg.inside], seg.cat[seg.inside]), seg.length[seg.inside])
    return out


@dataclass(frozen=True)
class _Segments:
    """The replayed timeline cut at every node's start and end, each piece with its category
    by the attribution rules and the step window it lies in."""

    points: I64
    cat: I64
    step: I64
    inside: npt.NDArray[np.bool_]
    length: F64
    start: I64
    end: I64
    dev: npt.NDArray[np.bool_]
    node_cat: I64


def _segments(graph: Graph, rep: Replayed) -> _Segments:
    start, end = _ns(rep.start), _ns(rep.end)
    lo, hi = step_windows(graph, start, end)
    cat = graph.category if len(graph.category) == len(graph) else np.full(len(graph), -1)
    live = end > start
    dev = (graph.kind >= DEV) & live
    main = (graph.res == graph.res[graph.step_first[0]]) & (graph.kind < DEV) & live
    layers: list[tuple[I64, I64]] = []
    for name in _DEVICE:
        m = dev & (cat == CAT[name])
        layers.append((start[m], end[m]))
    for name in _HOST:
        m = main & (cat == CAT[name])
        if name == "sync":
            m |= main & (graph.kind == SYNC)
        layers.append((start[m], end[m]))
    other = main & (cat != CAT["idle"])  # untraced time of a GPU trace stays idle
    layers.append((start[other], end[other]))  # any other host node: host
    pts = [lo, hi] + [a for s, e in layers for a in (s, e)]
    points = sorted_unique(np.concatenate(pts))
    seg_s, seg_e = points[:-1], points[1:]
    covs = [coverage(points, s, e) for s, e in layers]
    dev_starts = np.sort(start[dev & (cat >= 0)])
    sync_ends = np.sort(end[main & (graph.kind == SYNC)])
    last_sync = last_at_or_before(sync_ends, seg_s)
    post_sync = (last_sync >= last_at_or_before(dev_starts, seg_s)) & (
        last_sync > np.iinfo(np.int64).min
    )
    conds = [*covs[:-1], post_sync, covs[-1]]
    cats = [*_DEVICE, *_HOST, "sync", "host"]
    seg_cat = np.select(conds, [CAT[c] for c in cats], default=CAT["idle"])
    idx = np.searchsorted(lo, seg_s, side="right") - 1
    inside = (idx >= 0) & (seg_s < hi[np.clip(idx, 0, None)])
    length = (seg_e - seg_s).astype(np.float64) / 1e9
    node_cat = np.asarray(cat, dtype=np.int64)
    return _Segments(points, seg_cat, idx, inside, length, start, end, dev, node_cat)


def step_comm_by_type(graph: Graph, rep: Replayed, kind: I64, kinds: int) -> F64:
    """Seconds per step window (rows) and collective type (columns ``0..kinds-1``; ``kind``
    per node, -1 for none) of the replayed communication the device exposes: the pieces the
    attribution rules call communication because a communication kernel runs and no compute
    or copy does, each shared equally by the types whose kernels cover it. What is left of
    the category (host-side collectives) is the caller's remainder."""
    k = len(graph.step_first)
    out = np.zeros((k, max(kinds, 0)), dtype=np.float64)
    if k == 0 or len(graph) == 0 or kinds <= 0:
        return out
    seg = _segments(graph, rep)
    comm = seg.inside & (seg.cat == CAT["communication"])
    if not comm.any():
        return out
    mine = seg.dev & (seg.node_cat == CAT["communication"]) & (kind >= 0)
    covers = np.zeros((int(comm.sum()), kinds), dtype=np.float64)
    for j in range(kinds):
        m = mine & (kind == j)
        if m.any():
            covers[:, j] = coverage(seg.points, seg.start[m], seg.end[m])[comm]
    count = covers.sum(axis=1)
    share = np.divide(covers, count[:, None], out=np.zeros_like(covers), where=count[:, None] > 0)
    np.add.at(out, seg.step[comm], share * seg.length[comm][:, None])
    return out


def replayed_breakdown(graph: Graph, rep: Replayed, kept: Any) -> dict[str, float]:
    """Seconds per category of the mean kept step of ``graph`` replayed as ``rep`` (a
    projection's, at its N): the projected breakdown, by the same rules that cut the measured
    steps, so it is the replay's own and not a second model's."""
    table = step_categories(graph, rep)[kept]
    means = table.mean(axis=0) if len(table) else np.zeros(len(CATEGORIES))
    return {c: float(v) for c, v in zip(CATEGORIES, means, strict=True)}


def step_sums(graph: Graph, nodes: npt.NDArray[np.int64], seconds: F64) -> F64:
    """Per step window, the sum of ``seconds`` over ``nodes`` (by the step that launched each)."""
    out = np.zeros(len(graph.step_first), dtype=np.float64)
    step = graph.step[nodes] if len(nodes) else np.zeros(0, dtype=np.int64)
    ok = step >= 0
    np.add.at(out, step[ok], np.asarray(seconds, dtype=np.float64)[ok])
    return out


def by_cause(parts: dict[str, float], waits: float, caused: F64) -> dict[str, float]:
    """``parts`` with the waits kept at infinite N (``waits`` seconds per step, classified as
    communication in the replayed timeline) moved to the categories the measured attribution
    gave this rank's waits (``caused``, seconds per step per category: cross-rank cause), in
    proportion; the measured breakdown and the truth name a wait for rank 0's reduction
    ``reduction``, not communication. The total is unchanged."""
    total = float(np.sum(caused))
    shift = min(waits, parts.get("communication", 0.0))
    if total <= 0 or shift <= 0:
        return parts
    out = dict(parts)
    out["communication"] -= shift
    for j, c in enumerate(CATEGORIES):
        out[c] += shift * float(caused[j]) / total
    return out


#: The serial fraction's part for a pipeline's fill and drain (not one of ``CATEGORIES``: the
#: measured attribution has no such category; the replay tells it apart by its p2p nodes).
BUBBLE = "pipeline_bubble"
#: The serial fraction's part for the wait at mixture-of-experts all-to-alls for the busiest
#: expert rank. At infinite N each rank's share of the tokens is gone, and with it the busiest
#: rank's excess (its load times a vanishing share: the slowest of N grows far slower than N
#: shrinks the share), so only a rank late at every all-to-all for a reason that does not
#: shrink keeps a wait there (``systematic_wait``); the line says how much, apart from
#: communication, as the projections' "expert load imbalance" overhead does at each N.
EXPERTS = "expert_imbalance"

#: The collective type of MoE's token dispatch and combine (``classify.collectives``).
ALL_TO_ALL = "alltoall"


def all_to_all_rows(coll: Any) -> npt.NDArray[np.bool_]:
    """Which rows of a run's ``coll`` table are all-to-all collectives (MoE's token exchange)."""
    if not len(coll) or "collective" not in coll:
        return np.zeros(len(coll), dtype=np.bool_)
    return np.asarray(coll["collective"].astype(str).to_numpy() == ALL_TO_ALL, dtype=np.bool_)


def step_bubble(graph: Graph, rep: Replayed, p2p: npt.NDArray[np.bool_]) -> F64:
    """Seconds per step window in which a node of ``p2p`` (a mask per node: a pipeline's p2p
    nodes, or the all-to-alls) runs and no other device work does: the stage waiting on the
    others. :func:`step_categories` counts that time as communication (they are
    communication kernels), so moving it to :data:`BUBBLE` (or :data:`EXPERTS`) keeps the
    parts' sum."""
    k = len(graph.step_first)
    out = np.zeros(k, dtype=np.float64)
    start, end = _ns(rep.start), _ns(rep.end)
    live = end > start
    cat = graph.category if len(graph.category) == len(graph) else np.full(len(graph), -1)
    mine = p2p & live & (graph.kind >= DEV)
    if k == 0 or not mine.any():
        return out
    other = (graph.kind >= DEV) & live & (cat >= 0) & ~p2p
    lo, hi = step_windows(graph, start, end)
    points = sorted_unique(np.concatenate([lo, hi, start[mine], end[mine], start[other],
                                           end[other]]))  # fmt: skip
    only = coverage(points, start[mine], end[mine]) & ~coverage(points, start[other], end[other])
    seg_s, seg_e = points[:-1], points[1:]
    idx = np.searchsorted(lo, seg_s, side="right") - 1
    inside = only & (idx >= 0) & (seg_s < hi[np.clip(idx, 0, None)])
    np.add.at(out, idx[inside], (seg_e - seg_s)[inside].astype(np.float64) / 1e9)
    return out
