"""Top contributors: a rank's categorized timeline + its events in, seconds per (step, category,
op name) out; per run, the mean seconds per step of each name; across runs, each name's law.

Every instant of a category is owned by at most one name, so the names of a category never sum
to more than the category. The owner of an instant is the innermost event covering it among the
events that explain that category (device kernels for compute, the data-loading rule's events
for data loading, any main-process host op for host overhead: its self time), so a reader sees
the op or kernel to act on rather than an enclosing annotation. Instants no such event covers
(idle, untraced Python) stay unnamed. Only the largest names per category are kept per rank,
the rest summed as :data:`OTHER`, so the map step's result stays compact.

Synchronization is named by the op that issued it, not by the runtime call: a blocking
``cudaMemcpy``/``hipMemcpyWithStream`` or ``cudaStreamSynchronize`` is owned by the innermost
``cpu_op`` around it (``aten::_local_scalar_dense`` of ``.item()``, ``aten::copy_`` of
``.cpu()``), which is what the user's code calls; the wait after a sync until the device
starts again belongs to that same sync, never to the op that happens to run next.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from tracescale.categories import CATEGORIES
from tracescale.classify.recompute import PREFIX
from tracescale.classify.timeline import BOOL, CAT, I64
from tracescale.groups import group_codes, group_sum, series_sum
from tracescale.ingest.trace import RankTrace
from tracescale.table import Table, as_table, concat

#: Name of the row that sums a category's names below the kept ones.
OTHER = "(other ops)"
#: Names kept per category and rank (the rest go into OTHER).
KEEP_PER_RANK = 24
#: Names reported per category and run.
KEEP_PER_RUN = 10
#: Columns of the per-rank table (``RankResult.op_seconds``).
OP_COLUMNS = ("step", "category", "name", "seconds")
#: A name whose time falls slower than N^-0.5 does not shrink (strong scaling), and one that
#: rises faster than N^0.2 grows (weak scaling, where per-rank work should stay flat).
SHRINK_EXPONENT = -0.5
GROW_EXPONENT = 0.2

#: Which layers of classify/rank.py explain each category, tried in order (GPU, CPU traces).
_OWNERS_GPU: dict[str, tuple[str, ...]] = {
    "compute": ("compute",),
    "memcpy": ("memcpy",),
    "communication": ("comm", "hcomm"),
    "dataloader": ("dl",),
    "sync": ("issuer", "anyop"),
    "reduction": ("red", "anyop"),
    "host": ("anyop",),
}
_OWNERS_CPU: dict[str, tuple[str, ...]] = {
    "compute": ("anyop",),
    "communication": ("hcomm", "comm"),
    "dataloader": ("dl",),
    "sync": ("issuer",),
    "reduction": ("red", "anyop"),
}
#: Host event categories of the ops user code calls (not runtime or driver calls).
_OP_CATS = ("cpu_op", "Operator")


def _sync_owner(trace: RankTrace, sync: BOOL, ops: BOOL, at: I64) -> npt.NDArray[np.int32]:
    """Per instant of synchronization, the name of the op that issued the sync in force.

    The sync in force is the latest-starting sync event at or before the instant (the one
    covering it, or the one whose wait it follows); it is named by the innermost op covering
    its middle (a blocking copy inside ``aten::_local_scalar_dense``), else by its own name.
    """
    ev = trace.events
    out = np.full(at.shape[0], -1, dtype=np.int32)
    sync = sync & (ev.dur > 0)
    if not sync.any() or at.shape[0] == 0:
        return out
    s, d, n = ev.start[sync], ev.dur[sync], ev.name[sync]
    issuer = np.full(s.shape[0], -1, dtype=np.int32)
    first = int(np.flatnonzero(sync)[0])  # sync events are the main thread's: so is the issuer
    ops = ops & (ev.dur > 0) & (ev.pid == ev.pid[first]) & (ev.tid == ev.tid[first])
    if ops.any():
        issuer = _innermost(ev.start[ops], ev.start[ops] + ev.dur[ops], ev.name[ops], s + d // 2)
    own = np.where(issuer >= 0, issuer, n).astype(np.int32)
    order = np.argsort(s, kind="stable")
    k = np.searchsorted(s[order], at, side="right") - 1
    hit = k >= 0
    out[hit] = own[order][k[hit]]
    return out


def _innermost(
    starts: I64, ends: I64, ids: npt.NDArray[np.int32], at: I64
) -> npt.NDArray[np.int32]:
    """Per query time, the name id of the innermost interval covering it (-1: none).

    Intervals of one thread nest, so the innermost at ``t`` is the latest-starting one at the
    depth ``t`` is at; intervals of different threads may overlap without nesting, so the answer
    is checked and, where wrong, replaced by the covering interval that ends last.
    """
    out = np.full(at.shape[0], -1, dtype=np.int32)
    if starts.shape[0] == 0 or at.shape[0] == 0:
        return out
    order = np.lexsort((-ends, starts))
    s, e, n = starts[order], ends[order], ids[order]
    sorted_ends = np.sort(e)
    depth = np.arange(s.shape[0]) - np.searchsorted(sorted_ends, s, side="right")
    at_depth = np.searchsorted(s, at, side="right") - np.searchsorted(sorted_ends, at, "right")
    span = int(max(int(e.max()), int(at.max())) - min(int(s.min()), int(at.min()))) + 2
    origin = min(int(s.min()), int(at.min()))
    key = depth.astype(np.int64) * span + (s - origin)
    korder = np.argsort(key, kind="stable")
    keys = key[korder]
    qkey = (at_depth - 1).astype(np.int64) * span + (at - origin)
    pos = np.searchsorted(keys, qkey, side="right") - 1
    ok = (pos >= 0) & (at_depth > 0)
    cand = korder[np.clip(pos, 0, None)]
    ok &= (s[cand] <= at) & (e[cand] > at)
    out[ok] = n[cand[ok]]
    # Fallback: among intervals started by t, the one that ends last covers t if any does.
    last = np.searchsorted(s, at, side="right") - 1
    run_max = np.maximum.accumulate(e)
    arg = np.zeros(e.shape[0], dtype=np.int64)
    better = np.concatenate([[True], e[1:] > run_max[:-1]])
    arg[better] = np.flatnonzero(better)
    arg = np.maximum.accumulate(arg)
    idx = arg[np.clip(last, 0, None)]
    fix = ~ok & (last >= 0) & (e[idx] > at)
    out[fix] = n[idx[fix]]
    return out


#: A recomputed owner's name id ``i`` is kept as ``_RECOMPUTED - i`` (below -1: never an id).
_RECOMPUTED = -2


def _names(trace: RankTrace, ids: npt.NDArray[np.int32]) -> list[str]:
    """Names of owner ids, a recomputed one's with :data:`recompute.PREFIX`."""
    again = ids <= _RECOMPUTED
    if not again.any():
        return trace.names(ids)
    plain = trace.names(np.where(again, _RECOMPUTED - ids, ids).astype(np.int32))
    return [PREFIX + n if a else n for n, a in zip(plain, again.tolist(), strict=True)]


def rank_op_seconds(
    trace: RankTrace,
    layer_masks: Mapping[str, BOOL],
    kind: str,
    seg_start: I64,
    seg_cat: npt.NDArray[np.int8],
    length: npt.NDArray[np.float64],
    step_idx: I64,
    in_step: BOOL,
    step_numbers: npt.NDArray[np.int64],
    recompute: BOOL | None = None,
) -> Table:
    """Seconds per (step, category, name) of one rank: :data:`OP_COLUMNS`.

    ``layer_masks`` are the event masks behind classify/rank.py's layers (by layer name); the
    elementary segments already start at every boundary of those events, so one owner per
    segment is exact. ``recompute``: per event, re-run by activation checkpointing
    (:mod:`tracescale.classify.recompute`); such compute is named ``recompute: NAME``.
    """
    ev = trace.events
    owners = _OWNERS_GPU if kind == "gpu" else _OWNERS_CPU
    frames = []
    cat_names = sorted(owners)
    cat_order = {c: i for i, c in enumerate(cat_names)}
    for cat, layers in owners.items():
        sel = in_step & (seg_cat == CAT[cat])
        if not sel.any():
            continue
        at = seg_start[sel]
        name = np.full(at.shape[0], -1, dtype=np.int32)
        if layers[0] == "issuer" and "sync" in layer_masks:
            ops = np.isin(ev.cat, np.array([trace.string_id(c) for c in _OP_CATS], np.int32))
            name = _sync_owner(trace, layer_masks["sync"], ops & ~ev.is_device, at)
            layers = layers[1:]
        for layer in layers:
            mask = layer_masks.get(layer)
            if mask is None:
                continue
            mask = mask & (ev.dur > 0)  # zero-length events own nothing and break nesting
            if not mask.any():
                continue
            todo = name == -1
            owner = np.flatnonzero(mask).astype(np.int32)
            found = _innermost(ev.start[mask], ev.start[mask] + ev.dur[mask], owner, at[todo])
            hit = found >= 0
            ids = np.where(hit, ev.name[np.clip(found, 0, None)], -1).astype(np.int32)
            if cat == "compute" and recompute is not None:
                again = hit & recompute[np.clip(found, 0, None)]
                ids[again] = _RECOMPUTED - ids[again]  # decoded by _names
            name[todo] = ids
        named = name != -1
        if not named.any():
            continue
        k = step_idx[sel][named]
        frames.append((k, np.full(len(k), cat_order[cat]), name[named], length[sel][named]))
    if not frames:
        return Table({c: np.zeros(0, dtype=t) for c, t in _DTYPES.items()})
    raw_k, raw_c, raw_n, raw_s = (np.concatenate(part) for part in zip(*frames, strict=True))
    # pandas' groupby sums (Kahan, rows in order), keys sorted: see tracescale.groups
    codes, (s_k, s_c, s_id) = group_codes(raw_k, raw_c, raw_n)
    s_sec = group_sum(codes, raw_s, len(s_k))
    s_cat = np.array(cat_names, dtype=object)[s_c]
    # Everything after this works on names, not string ids: ids depend on the file's string
    # order, and equal times must break ties the same way in any file holding the same events.
    s_name = np.empty(len(s_id), dtype=object)
    s_name[:] = _names(trace, s_id.astype(np.int32))
    t_codes, (t_cat, t_name) = group_codes(s_c, s_name)
    t_sec = group_sum(t_codes, s_sec, len(t_cat))
    # per category, the largest names first (ties by name): the first KEEP_PER_RANK are kept
    name_rank, _ = group_codes(t_name)
    order = np.lexsort((name_rank, -t_sec, t_cat))
    place = np.arange(len(order)) - np.searchsorted(t_cat[order], t_cat[order])
    kept_group = np.zeros(len(t_cat), dtype=np.bool_)
    kept_group[order] = place < KEEP_PER_RANK
    names = s_name.copy()
    dropped = ~kept_group[t_codes]
    again = s_id <= _RECOMPUTED
    names[dropped & ~again] = OTHER
    names[dropped & again] = PREFIX + OTHER  # so every recomputed second stays named so
    step = step_numbers[s_k.astype(np.int64)]
    o_codes, (o_step, o_cat, o_name) = group_codes(step, s_cat, names)
    o_sec = group_sum(o_codes, s_sec, len(o_step))
    return Table({"step": o_step, "category": o_cat, "name": o_name, "seconds": o_sec})


_DTYPES = {"step": "int64", "category": "object", "name": "object", "seconds": "float64"}


def run_op_table(
    tables: Sequence[Table], rank_steps: int, category_s: Mapping[str, float]
) -> Table:
    """Per run: mean seconds per step of each (category, name), with the spread over steps.

    Columns: category, name, seconds (mean per step over *all* ranks of the run, the same
    basis as the category's own figure, so an op never exceeds its category), ranks (how many
    ranks ran it), seconds_on_its_ranks (mean per step over the ranks that ran it: work only
    rank 0 does stays 4 ms at every N, which is what its scaling law is fitted on), category_s
    (the category's time per rank-step on the ranks' own timelines, before cross-rank cause
    attribution moved waits elsewhere: an op owns time on its own rank), share (seconds /
    category_s), step_sd (standard deviation over steps of the all-rank mean), steps.
    """
    cols = list(RUN_OP_COLUMNS)
    frames = [as_table(t).assign(rank_pos=i) for i, t in enumerate(tables) if len(t)]
    if not frames or rank_steps <= 0:
        return Table(columns=cols)
    allt = concat(frames)
    step = allt.col("step")
    nsteps = max(len(np.unique(step)), 1)
    nranks = max(len(tables), 1)
    steps_per_rank = rank_steps / nranks
    codes, (cat, name) = group_codes(allt.col("category"), allt.col("name"))
    n = len(cat)
    summed = group_sum(codes, allt.col("seconds"), n)
    pairs, _ = group_codes(codes, allt.col("rank_pos"))
    ranks = np.bincount(codes[np.unique(pairs, return_index=True)[1]], minlength=n)
    # the all-rank mean per step, absent steps 0, and its spread over steps (a frame's std)
    step_codes, (steps,) = group_codes(step)
    wide = group_sum(codes * len(steps) + step_codes, allt.col("seconds"), n * len(steps))
    wide = wide.reshape(n, len(steps)) / nranks
    if len(steps) > 1:
        avg = wide.sum(axis=1) / len(steps)
        sd = np.sqrt(((wide - avg[:, None]) ** 2).sum(axis=1) / (len(steps) - 1))
    else:
        sd = wide.sum(axis=1) * 0.0
    out = Table(
        {
            "category": cat,
            "name": name,
            "seconds": summed / rank_steps,
            "ranks": ranks.astype(np.int64),
            "seconds_on_its_ranks": summed / (ranks * steps_per_rank),
            "step_sd": np.where(np.isnan(sd), 0.0, sd),
        }
    )
    out["steps"] = np.full(n, nsteps, dtype=np.int64)
    whole = np.array([float(category_s.get(str(c), 0.0)) for c in cat.tolist()])
    out["category_s"] = whole
    share = np.where(whole > 0, out.col("seconds") / np.where(whole > 0, whole, 1.0), 0.0)
    out["share"] = np.clip(share, 0.0, 1.0)
    return out.select(cols)


#: Columns of :func:`run_op_table` (``RunBreakdown.ops``).
RUN_OP_COLUMNS = (
    "category",
    "name",
    "seconds",
    "ranks",
    "seconds_on_its_ranks",
    "category_s",
    "share",
    "step_sd",
    "steps",
)


def recompute_seconds(table: Table) -> float:
    """Seconds per step of compute that activation checkpointing ran again: every
    ``recompute: `` row of the run's table, kept names and the rest alike."""
    if table is None or not len(table):
        return 0.0
    table = as_table(table)
    names = table.col("name").tolist()
    again = (table.col("category") == "compute") & np.array(
        [str(n).startswith(PREFIX) for n in names], dtype=np.bool_
    )
    return series_sum(table.col("seconds")[again])


def run_top_ops(table: Table) -> dict[str, list[Any]]:
    """The run's ``top_ops`` entry: per category, its largest names with seconds and share."""
    out: dict[str, list[Any]] = {}
    if table is None or not len(table):
        return out
    table = as_table(table)
    for cat in CATEGORIES:
        rows = table[table.col("category") == cat]
        name_rank, _ = group_codes(rows.col("name"))
        rows = rows.take(np.lexsort((name_rank, -rows.col("seconds").astype(np.float64))))
        named = rows[rows.col("name") != OTHER]
        named = named.take(np.arange(min(KEEP_PER_RUN, len(named))))
        if named.empty:
            continue
        out[cat] = [
            {
                "name": str(r.name),
                "seconds": float(r.seconds),
                "ranks": int(r.ranks),
                "seconds_on_its_ranks": float(r.seconds_on_its_ranks),
                "category_s": float(r.category_s),
                "share": float(r.share),
                "step_sd_s": float(r.step_sd),
                "steps": int(r.steps),
            }
            for r in _records(named)
        ]
    return out


def _law(sizes: list[float], secs: list[float], mode: str) -> dict[str, Any]:
    """Power law t ~ N^p fitted on the runs a name appears in, and whether it is flagged."""
    pts = [(n, s) for n, s in zip(sizes, secs, strict=True) if s > 0]
    if len(pts) < 2 or len({n for n, _ in pts}) < 2:
        return {"form": "one run", "exponent": None, "flagged": False}
    x = np.log([n for n, _ in pts])
    y = np.log([s for _, s in pts])
    p = float(np.polyfit(x, y, 1)[0])
    if p <= -0.8:
        form = "shrinks ~1/N"
    elif p <= SHRINK_EXPONENT:
        form = f"shrinks ~N^{p:.2f}"
    elif p < GROW_EXPONENT:
        form = "flat"
    else:
        form = f"grows ~N^{p:.2f}"
    flagged = p >= GROW_EXPONENT if mode == "weak" else p > SHRINK_EXPONENT
    return {"form": form, "exponent": p, "flagged": bool(flagged)}


def attach_laws(runs: list[dict[str, Any]], mode: str) -> None:
    """Give every ``top_ops`` entry of every run its law across the runs (in place).

    A name absent from a run counts as absent (not zero) there: the law uses the runs it is in.
    The law is fitted on the seconds of the ranks that run the name, so work only rank 0 does
    is not seen to shrink as 1/N merely because the all-rank mean divides it by N.
    Strong scaling flags names that do not shrink; weak scaling flags names that grow.
    """
    seen: dict[tuple[str, str], dict[float, float]] = {}
    for run in runs:
        n = float(run.get("world_size") or 0)
        for cat, entries in (run.get("top_ops") or {}).items():
            for e in entries:
                own = e.get("seconds_on_its_ranks", e["seconds"])
                seen.setdefault((cat, e["name"]), {})[n] = float(own)
    for run in runs:
        for cat, entries in (run.get("top_ops") or {}).items():
            for e in entries:
                pts = seen[(cat, e["name"])]
                sizes = sorted(pts)
                e["law"] = _law(sizes, [pts[k] for k in sizes], mode)


def _records(table: Table) -> list[Any]:
    """The rows as named tuples (``itertuples(index=False)``)."""
    from collections import namedtuple

    row = namedtuple("row", table.columns, rename=True)  # type: ignore[misc]
    return [row(*values) for values in table.rows()]
