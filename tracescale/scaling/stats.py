"""Per-run arrays and their aggregation: step statistics, run-level means, bootstrap weights.

A run is held as a dense ``[rank, step, column]`` array so a bootstrap replicate is just a
pair of multinomial weight vectors (ranks, steps): no frame is copied per replicate.
Run-level value = mean over ranks of each rank's mean per step: every rank counts equally,
however many steps it recorded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from tracescale.categories import CATEGORIES
from tracescale.classify.result import CAUSED, RunBreakdown
from tracescale.groups import cumcount, factorize, group_codes, group_size
from tracescale.scaling.blocks import MAX_RESAMPLED, step_blocks
from tracescale.scaling.result import RankStats, StepStats
from tracescale.table import as_table, table_of

FloatArray = npt.NDArray[np.float64]

#: Columns held per (rank, step): the categories, then extras the models need.
VALUE_COLS: tuple[str, ...] = (
    *CATEGORIES,
    "duration",
    "overlap_window",
    "serial_compute",
    *(f"caused_{c}" for c in CAUSED),  # waits for a late rank, inside the category's time
    "xfer",  # sum of collective transfer times in the step (from the collectives frame)
)
_COL = {c: i for i, c in enumerate(VALUE_COLS)}


@dataclass(frozen=True)
class RunData:
    """One run as dense arrays (missing rank/step pairs masked out)."""

    world_size: int
    ranks: tuple[int, ...]
    values: FloatArray  # [R, S, len(VALUE_COLS)]
    #: [R, S], 1.0 where the rank has that step (``blocked``: how many steps of the block)
    mask: FloatArray
    coll_keys: tuple[tuple[str, int, int], ...]  # (collective, bytes, group_size)
    coll_sum: FloatArray  # [R, S, G] summed transfer seconds
    coll_cnt: FloatArray  # [R, S, G] instance counts
    schedule: tuple[ScheduleRow, ...] = ()


#: One collective of a typical step, in order: (type, bytes, group size, asynchronous,
#: mean compute that can hide it and everything after it, seconds).
ScheduleRow = tuple[str, int, int, bool, float]


def step_schedule(coll: Any) -> tuple[ScheduleRow, ...]:
    """The typical step's collectives in order, with the compute that can hide each.

    Steps whose count of instances differs from the most common count are left out (a
    profiler window cut mid-step); each position takes its most common key and mean hideable.
    """
    coll = as_table(coll)
    need = {"rank", "step", "collective", "bytes", "group_size", "start", "hideable", "async"}
    if coll.empty or not need <= set(coll.columns):
        return ()
    if np.isnan(coll.col("hideable").astype(np.float64)).all():
        return ()
    c = coll.take(np.lexsort((coll.col("start"), coll.col("step"), coll.col("rank"))))
    groups, _ = group_codes(c.col("rank"), c.col("step"))
    size = group_size(groups, int(groups.max()) + 1)[groups]
    sizes, seen = np.unique(size, return_counts=True)
    typical = int(sizes[np.argmax(seen)])  # the most common; the smallest of several
    c = c[size == typical]
    pos = cumcount(group_codes(c.col("rank"), c.col("step"))[0])
    # Codes of the (type, bytes, group, async) keys in sorted key order, so the first of the
    # most common keys at a position is the one a sorted groupby's idxmax would pick.
    keys = ("collective", "bytes", "group_size", "async")
    codes, uniq = group_codes(*(c.col(k) for k in keys))
    counts = np.zeros((typical, len(uniq[0])), dtype=np.int64)
    known = codes >= 0  # a key with a missing part is not counted, as groupby drops it
    np.add.at(counts, (pos[known], codes[known]), 1)
    best = np.argmax(counts, axis=1)
    hideable = np.nan_to_num(c.col("hideable").astype(np.float64))
    order = np.argsort(pos, kind="stable")
    by_pos = np.split(hideable[order], np.flatnonzero(np.diff(pos[order])) + 1)
    rows: list[ScheduleRow] = []
    for k, hides in enumerate(by_pos):
        ctype, nbytes, group, is_async = (u[best[k]] for u in uniq)
        rows.append((str(ctype), int(nbytes), int(group), bool(is_async), float(hides.mean())))
    return tuple(rows)


@dataclass(frozen=True)
class RunAgg:
    """Run-level means (per step) that the models are fitted to."""

    world_size: int
    cats: Mapping[str, float]
    total: float
    overlap_window: float
    serial_compute: float
    xfer: float
    coll_keys: tuple[tuple[str, int, int], ...]
    coll_transfer: FloatArray  # [G] mean transfer seconds per instance
    coll_weight: FloatArray  # [G] number of instances behind the mean
    coll_per_step: FloatArray  # [G] instances per rank and step
    caused: Mapping[str, float] = field(default_factory=dict)  # waits inside CAUSED categories
    schedule: tuple[ScheduleRow, ...] = ()  # the run's typical step of collectives
    #: Per CAUSED category, the median rank's own time (waits for late ranks removed): a
    #: straggler is one rank, so the median is the work the other ranks do.
    own_median: Mapping[str, float] = field(default_factory=dict)


def prepare(run: RunBreakdown) -> RunData:
    """Pivot a RunBreakdown's frames into dense arrays."""
    df = table_of(run, "steps")
    ranks = np.unique(df["rank"].to_numpy(dtype=np.int64))
    steps = np.unique(df["step"].to_numpy(dtype=np.int64))
    ri = np.searchsorted(ranks, df["rank"].to_numpy(dtype=np.int64))
    si = np.searchsorted(steps, df["step"].to_numpy(dtype=np.int64))
    vals = np.zeros((len(ranks), len(steps), len(VALUE_COLS)))
    mask = np.zeros((len(ranks), len(steps)))
    mask[ri, si] = 1.0
    for c in VALUE_COLS[:-1]:
        if c in df.columns:
            vals[ri, si, _COL[c]] = np.nan_to_num(df[c].to_numpy(dtype=np.float64))
    coll = table_of(run, "collectives")
    keys: list[tuple[str, int, int]] = []
    csum = np.zeros((len(ranks), len(steps), 0))
    ccnt = np.zeros_like(csum)
    if len(coll):
        cr = coll["rank"].to_numpy(dtype=np.int64)
        cs = coll["step"].to_numpy(dtype=np.int64)
        ok = np.isin(cr, ranks) & np.isin(cs, steps)
        coll = coll[ok]
        if len(coll):
            cri = np.searchsorted(ranks, cr[ok])
            csi = np.searchsorted(steps, cs[ok])
            grp = zip(
                coll["collective"].astype(str).tolist(),
                coll["bytes"].astype(np.int64).tolist(),
                coll["group_size"].astype(np.int64).tolist(),
                strict=True,
            )
            codes, uniq = factorize(list(grp))  # keys in order of first appearance
            keys = [(str(a), int(b), int(g)) for a, b, g in uniq]
            csum = np.zeros((len(ranks), len(steps), len(keys)))
            ccnt = np.zeros_like(csum)
            tr = np.clip(coll["transfer"].to_numpy(dtype=np.float64), 0.0, None)
            np.add.at(csum, (cri, csi, codes), tr)
            np.add.at(ccnt, (cri, csi, codes), 1.0)
            vals[:, :, _COL["xfer"]] = csum.sum(axis=2)
    return RunData(
        run.world_size,
        tuple(int(r) for r in ranks),
        vals,
        mask,
        tuple(keys),
        csum,
        ccnt,
        step_schedule(table_of(run, "collectives")),
    )


def blocked(d: RunData, cap: int = MAX_RESAMPLED) -> RunData:
    """``d`` with its steps merged into at most ``cap`` blocks of consecutive steps, for the
    bootstrap (``d`` itself when it has no more steps). Each block holds every per-step value
    as its rank's mean over the block's steps and ``mask`` as how many steps that is, so
    ``aggregate_many`` weighs a block as that many steps: all-ones block weights give the
    same run means as all-ones step weights."""
    n = d.mask.shape[1]
    if n <= cap:
        return d
    block = step_blocks(n, cap)
    edges = np.flatnonzero(np.diff(block, prepend=-1))
    counts = np.add.reduceat(d.mask, edges, axis=1)

    def mean(x: FloatArray) -> FloatArray:
        sums = np.add.reduceat(x * d.mask[:, :, None], edges, axis=1)
        return sums / np.maximum(counts, 1.0)[:, :, None]

    return RunData(
        d.world_size, d.ranks, mean(d.values), counts, d.coll_keys, mean(d.coll_sum),
        mean(d.coll_cnt), d.schedule,
    )  # fmt: skip


def aggregate(
    d: RunData,
    rank_w: FloatArray | None = None,
    step_w: FloatArray | None = None,
    scale: Mapping[str, float] | None = None,
) -> RunAgg:
    """Run-level means under bootstrap weights (None = all ones) and what-if scale factors.

    Scaling is applied to the means; since means are linear this equals scaling every step.
    ``communication`` scales its transfer times too, so the alpha-beta fit follows it.
    """
    r = np.ones(d.mask.shape[0]) if rank_w is None else rank_w
    s = np.ones(d.mask.shape[1]) if step_w is None else step_w
    return aggregate_many(d, r[None, :], s[None, :], scale)[0]


def aggregate_many(
    d: RunData,
    rank_w: FloatArray,
    step_w: FloatArray,
    scale: Mapping[str, float] | None = None,
) -> list[RunAgg]:
    """``aggregate`` for a batch of weight pairs (``[B, R]`` ranks, ``[B, S]`` steps).

    The bootstrap draws hundreds of replicates: the weighted sums over steps are matrix
    products over the whole batch, so no replicate walks the ``[R, S, C]`` array in Python.
    A rank's mean weighs its recorded steps only (values are zero where the mask is).
    """
    r = np.asarray(rank_w, dtype=np.float64)
    s = np.asarray(step_w, dtype=np.float64)
    masked = d.values * d.mask[:, :, None]
    den = s @ d.mask.T  # [B, R]
    live = den > 0
    rr = r * live
    dead = rr.sum(axis=1) == 0  # degenerate resample: fall back to all ranks
    rr[dead] = live[dead].astype(np.float64)
    safe = np.where(live, den, 1.0)
    rank_mean = np.tensordot(s, masked, axes=([1], [1])) / safe[:, :, None]
    rsum = rr.sum(axis=1)
    mean = np.einsum("br,brc->bc", rr, rank_mean) / rsum[:, None]
    cnt = np.tensordot(s, d.coll_cnt * d.mask[:, :, None], axes=([1], [1]))
    per_step = np.einsum("br,brg->bg", rr, cnt / safe[:, :, None]) / rsum[:, None]
    tsum = np.einsum(
        "br,brg->bg", rr, np.tensordot(s, d.coll_sum * d.mask[:, :, None], axes=([1], [1]))
    )
    tcnt = np.einsum("br,brg->bg", rr, cnt)
    transfer = np.where(tcnt > 0, tsum / np.where(tcnt > 0, tcnt, 1.0), 0.0)
    sc = dict(scale or {})
    fc = sc.get("communication", 1.0)
    own = {
        c: _median_rank(rank_mean[:, :, _COL[c]] - rank_mean[:, :, _COL[f"caused_{c}"]], rr)
        * sc.get(c, 1.0)
        for c in CAUSED
    }
    out = []
    for b in range(len(r)):
        m = mean[b]
        cats = {c: float(m[_COL[c]]) * sc.get(c, 1.0) for c in CATEGORIES}
        out.append(
            RunAgg(
                world_size=d.world_size,
                cats=cats,
                total=float(sum(cats.values())),
                overlap_window=float(m[_COL["overlap_window"]]),
                serial_compute=float(m[_COL["serial_compute"]]) * sc.get("compute", 1.0),
                xfer=float(m[_COL["xfer"]]) * fc,
                coll_keys=d.coll_keys,
                coll_transfer=transfer[b] * fc,
                coll_weight=tcnt[b],
                coll_per_step=per_step[b],
                caused={c: float(m[_COL[f"caused_{c}"]]) * sc.get(c, 1.0) for c in CAUSED},
                own_median={c: float(v[b]) for c, v in own.items()},
                schedule=d.schedule,
            )
        )
    return out


def _median_rank(values: FloatArray, weights: FloatArray) -> FloatArray:
    """Median over ranks (last axis), each counted by its (bootstrap) weight, per row.

    Equals ``np.median`` of each row's values repeated by their rounded weights (0 for an
    empty pool), without building the pools: the middle of the cumulative counts in sorted
    order picks the one or two middle values.
    """
    counts = np.rint(weights).astype(np.int64)
    empty = counts.sum(axis=1) <= 0
    counts[empty] = weights[empty] > 0
    counts = np.maximum(counts, 0)
    order = np.argsort(values, axis=1, kind="stable")
    ordered = np.take_along_axis(values, order, axis=1)
    cum = np.cumsum(np.take_along_axis(counts, order, axis=1), axis=1)
    size = cum[:, -1:]
    lo = np.minimum((cum <= (size - 1) // 2).sum(axis=1, keepdims=True), values.shape[1] - 1)
    hi = np.minimum((cum <= size // 2).sum(axis=1, keepdims=True), values.shape[1] - 1)
    mid = (np.take_along_axis(ordered, lo, axis=1) + np.take_along_axis(ordered, hi, axis=1)) / 2
    return np.where(size > 0, mid, 0.0)[:, 0]


def _q(x: FloatArray, p: float) -> float:
    return float(np.percentile(x, p)) if len(x) else 0.0


def step_stats(d: RunData) -> StepStats:
    """Step-time statistics: run level (mean over ranks, per step), per rank, slowest rank."""
    dur = d.values[:, :, _COL["duration"]]
    m = d.mask > 0
    per_rank = []
    for i, rank in enumerate(d.ranks):
        x = dur[i][m[i]]
        per_rank.append(
            RankStats(rank, float(x.mean()), float(np.median(x)), _q(x, 10), _q(x, 90), len(x))
        )
    counts = m.sum(axis=0)
    has = counts > 0
    level = (np.where(m, dur, 0.0).sum(axis=0)[has] / counts[has]).astype(np.float64)
    slowest_per_step = np.where(m, dur, -np.inf).max(axis=0)[has]
    run_mean = float(np.mean([p.mean for p in per_rank]))
    slow = max(per_rank, key=lambda p: p.mean)
    std = float(level.std(ddof=1)) if len(level) > 1 else 0.0
    return StepStats(
        world_size=d.world_size,
        n_ranks=len(d.ranks),
        n_steps=int(has.sum()),
        mean=run_mean,
        median=float(np.median(level)),
        p10=_q(level, 10),
        p90=_q(level, 90),
        cv=std / run_mean if run_mean > 0 else 0.0,
        slowest_rank=slow.rank,
        slowest_rank_mean=slow.mean,
        slowest_per_step_mean=float(slowest_per_step.mean()),
        per_rank=tuple(per_rank),
    )
