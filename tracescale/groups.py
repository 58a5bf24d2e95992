"""Group-by over numpy columns, with the arithmetic pandas' groupby uses.

Why not plain ``np.add.reduceat``: pandas sums and means each group with Kahan compensation in
row order (its ``group_sum``/``group_mean``), and its ``std`` with Welford's update, and the
analyze output has always been computed that way. The same update is done here, vectorised
over groups (one numpy step per position within a group), so the numbers stay bit-identical
to the pandas version while the analyze path does not import pandas.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from tracescale.compiled import Compiled

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
#: Positions within a group past which the few groups still open are summed in a Python loop
#: (one numpy step per position would cost more than the loop for a handful of long groups).
_FEW = 4


def group_codes(*keys: npt.ArrayLike) -> tuple[I64, list[np.ndarray[Any, Any]]]:
    """Per row its group's number, groups numbered in sorted key order (``sort=True``), and
    each key column's value per group. Rows with a NaN key belong to no group (code -1)."""
    cols = [np.asarray(k) for k in keys]
    n = len(cols[0]) if cols else 0
    ok = np.ones(n, dtype=np.bool_)
    for c in cols:
        if c.dtype.kind == "f":
            ok &= ~np.isnan(c)
    codes = np.full(n, -1, dtype=np.int64)
    if not ok.any():
        return codes, [c[:0] for c in cols]
    inv = []
    uniq = []
    for c in cols:
        u, i = np.unique(c[ok], return_inverse=True)
        uniq.append(u)
        inv.append(i.reshape(-1).astype(np.int64))
    if len(cols) == 1:
        codes[ok] = inv[0]
        return codes, uniq
    combined = np.ravel_multi_index(inv, [len(u) for u in uniq]) if uniq else inv[0]
    present, sub = np.unique(combined, return_inverse=True)
    codes[ok] = sub.reshape(-1)
    parts = np.unravel_index(present, [len(u) for u in uniq])
    return codes, [u[p] for u, p in zip(uniq, parts, strict=True)]


def _order(codes: I64, ngroups: int) -> tuple[I64, I64, I64]:
    """Rows of the groups in row order within each group, each row's position in its group,
    and the rows per group."""
    valid = np.flatnonzero(codes >= 0)
    order = valid[np.argsort(codes[valid], kind="stable")]
    counts = np.bincount(codes[valid], minlength=ngroups).astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    pos = np.arange(len(order), dtype=np.int64) - np.repeat(starts, counts)
    return order, pos, counts


def kahan_sum(codes: I64, values: npt.ArrayLike, ngroups: int) -> tuple[F64, I64]:
    """Per group the Kahan-compensated sum of the non-NaN values in row order (pandas'
    ``groupby().sum()``) and the number of them."""
    vals = np.asarray(values, dtype=np.float64)
    codes = np.where(np.isnan(vals), -1, codes)
    total = np.zeros(ngroups)
    comp = np.zeros(ngroups)
    kernel = _kahan_compiled.get(len(vals))
    if kernel is not None and len(vals):
        kernel(codes.astype(np.int64, copy=False), vals, total, comp)
        counts = np.bincount(codes[codes >= 0], minlength=ngroups).astype(np.int64)
        return total, counts
    order, pos, counts = _order(codes, ngroups)
    rows, bounds = _by_position(pos)
    gcode = codes[order][rows]
    gval = vals[order][rows]
    with np.errstate(invalid="ignore"):
        for p in range(len(bounds) - 1):
            lo, hi = int(bounds[p]), int(bounds[p + 1])
            if hi - lo <= _FEW and p > 0:
                _finish(total, comp, gcode[lo:], gval[lo:])
                break
            g, v = gcode[lo:hi], gval[lo:hi]
            y = v - comp[g]
            t = total[g] + y
            c = (t - total[g]) - y
            comp[g] = np.where(np.isnan(c), 0.0, c)
            total[g] = t
    return total, counts


def _kahan_rows(codes: I64, vals: F64, total: F64, comp: F64) -> None:
    """:func:`kahan_sum`'s update one row at a time, rows in order (``codes`` -1: skipped):
    each group sees its rows in the order the vectorised update gives them, with the same
    operations, so the same sums to the bit (tested). Compiled where numba is already loaded
    (``tracescale.compiled``): the top-ops tables of a 64-rank study held a few long groups,
    and their sums were 2.1 s of a 30 s cold analyze in the plain loop."""
    for i in range(len(codes)):
        g = codes[i]
        if g < 0:
            continue
        y = vals[i] - comp[g]
        t = total[g] + y
        c = (t - total[g]) - y
        comp[g] = 0.0 if c != c else c
        total[g] = t


#: Compiled only once numba is loaded for another reason (the trace scanner): the vectorised
#: plain path is fast enough that importing numba for it alone never pays.
_kahan_compiled = Compiled(_kahan_rows, imports_numba=False)


def _by_position(pos: I64) -> tuple[I64, I64]:
    """The rows of :func:`_order` regrouped position by position (each group's first row,
    then each group's second, ...; groups in order within a position) and where each
    position's rows begin: one slice per step of a vectorised update over groups.

    Why: selecting a position's rows with ``pos == p`` scans every row once per position, so
    one long group among many short ones made the update quadratic in the rows. The updates
    themselves, and so the numbers, are unchanged: each group still sees its rows in order.
    """
    rows = np.argsort(pos, kind="stable")
    per_position = np.bincount(pos) if len(pos) else np.zeros(0, dtype=np.int64)
    bounds = np.concatenate([[0], np.cumsum(per_position)]).astype(np.int64)
    return rows, bounds


def _finish(total: F64, comp: F64, codes: I64, vals: F64) -> None:
    """The Kahan update of a few long groups' remaining rows, one row at a time."""
    tot, cmp_ = total.tolist(), comp.tolist()
    for g, v in zip(codes.tolist(), vals.tolist(), strict=True):
        y = v - cmp_[g]
        t = tot[g] + y
        c = (t - tot[g]) - y
        cmp_[g] = 0.0 if c != c else c
        tot[g] = t
    total[:] = tot
    comp[:] = cmp_


def group_sum(codes: I64, values: npt.ArrayLike, ngroups: int) -> F64:
    """pandas' ``groupby().sum()`` of a float column (0 for a group without values)."""
    vals = np.asarray(values)
    if vals.dtype.kind in "iub":  # integers sum exactly in any order
        ok = codes >= 0
        out = np.zeros(ngroups, dtype=np.int64)
        np.add.at(out, codes[ok], vals[ok].astype(np.int64))
        return out.astype(np.float64)
    return kahan_sum(codes, vals, ngroups)[0]


def group_mean(codes: I64, values: npt.ArrayLike, ngroups: int) -> F64:
    """pandas' ``groupby().mean()``: the compensated sum over the count (NaN when empty)."""
    total, counts = kahan_sum(codes, values, ngroups)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, total / np.maximum(counts, 1), np.nan)


def group_std(codes: I64, values: npt.ArrayLike, ngroups: int, ddof: int = 1) -> F64:
    """pandas' ``groupby().std(ddof)``: Welford's running mean and sum of squares per group."""
    vals = np.asarray(values, dtype=np.float64)
    codes = np.where(np.isnan(vals), -1, codes)
    order, pos, counts = _order(codes, ngroups)
    mean = np.zeros(ngroups)
    m2 = np.zeros(ngroups)
    seen = np.zeros(ngroups)
    rows, bounds = _by_position(pos)
    gcode, gval = codes[order][rows], vals[order][rows]
    for p in range(len(bounds) - 1):
        g, v = gcode[bounds[p] : bounds[p + 1]], gval[bounds[p] : bounds[p + 1]]
        seen[g] += 1
        old = mean[g]
        delta = v - old
        mean[g] = old + delta / seen[g]
        m2[g] += delta * (v - mean[g])
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > ddof, np.sqrt(m2 / (counts - ddof)), np.nan)


def group_median(codes: I64, values: npt.ArrayLike, ngroups: int) -> F64:
    """Per group the median of its non-NaN values (NaN when none)."""
    vals = np.asarray(values, dtype=np.float64)
    codes = np.asarray(np.where(np.isnan(vals), -1, codes), dtype=np.int64)
    out = np.full(ngroups, np.nan)
    keep = np.flatnonzero(codes >= 0)
    if not len(keep):
        return out
    # one sort by (group, value) for all groups; each median is its group's middle one or
    # the mean of its middle two, as np.median takes them (a np.median per group was a
    # Python loop over groups: thousands of collective instances per run)
    order = keep[np.lexsort((vals[keep], codes[keep]))]
    sorted_vals = vals[order]
    counts = np.bincount(codes[order], minlength=ngroups)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    has = counts > 0
    lo = sorted_vals[(starts + (counts - 1) // 2)[has]]
    hi = sorted_vals[(starts + counts // 2)[has]]
    out[has] = (lo + hi) / 2.0
    return out


def group_size(codes: I64, ngroups: int) -> I64:
    """Rows per group."""
    return np.bincount(codes[codes >= 0], minlength=ngroups).astype(np.int64)


def cumcount(codes: I64) -> I64:
    """Each row's position among the earlier rows of its group (``cumcount``); -1 ungrouped."""
    ngroups = int(codes.max()) + 1 if len(codes) else 0
    order, pos, _ = _order(codes, ngroups)
    out = np.full(len(codes), -1, dtype=np.int64)
    out[order] = pos
    return out


def factorize(values: list[Any]) -> tuple[I64, list[Any]]:
    """Codes in order of first appearance and the distinct values (``pandas.factorize``)."""
    seen: dict[Any, int] = {}
    codes = np.fromiter((seen.setdefault(v, len(seen)) for v in values), np.int64, len(values))
    return codes, list(seen)


def series_sum(values: npt.ArrayLike) -> float:
    """pandas' ``Series.sum()`` of a float column: NaN read as 0, numpy's pairwise sum."""
    vals = np.asarray(values, dtype=np.float64)
    return float(np.where(np.isnan(vals), 0.0, vals).sum())


def series_mean(values: npt.ArrayLike) -> float:
    """pandas' ``Series.mean()``: the sum with NaN read as 0 over the non-NaN count."""
    vals = np.asarray(values, dtype=np.float64)
    count = int(np.count_nonzero(~np.isnan(vals)))
    return float(np.where(np.isnan(vals), 0.0, vals).sum() / count) if count else float("nan")
