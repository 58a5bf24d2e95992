"""Single-rank work found by comparing ranks: the serial 'final reduction on one node'.

A user range (``record_function``) that runs on one rank of a step and is absent, or much
smaller, on the others is work the other ranks will wait for (e.g. rank 0 aggregating metrics).
Rules catch the usual names; this catches the rest without the user naming them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from tracescale.categories import CATEGORIES
from tracescale.classify.rank import RankResult
from tracescale.classify.timeline import CAT, relabel
from tracescale.groups import group_codes, group_median, group_sum
from tracescale.table import Table, concat, replace_tables, table_of

if TYPE_CHECKING:
    import pandas as pd

#: Categories single-rank work is taken from; waits, data loading and syncs keep their names.
_SOURCE = np.array([CAT[c] for c in ("compute", "memcpy", "host", "idle")], dtype=np.int8)
_MIN_SHARE = 0.005  # of the step: shorter ranges are noise, not a serial part worth naming
_MUCH_SMALLER = 0.1  # others' time below this fraction of the one rank's counts as absent


def single_rank_ranges(group: Sequence[RankResult]) -> dict[int, pd.DataFrame]:
    """:func:`single_rank_rows` as pandas frames indexed by the row's place among all the
    ranks' annotation rows (for notebooks and tests; pandas is imported here)."""
    out = {}
    for rank, (rows, index) in single_rank_rows(group).items():
        frame = rows.to_pandas().copy()
        frame.index = index
        out[rank] = frame
    return out


def single_rank_rows(group: Sequence[RankResult]) -> dict[int, tuple[Table, np.ndarray]]:
    """Per rank, the range rows that are single-rank work (empty when < 2 ranks), and their
    places among all the ranks' annotation rows.

    A name counts when, in most of the steps it appears in, one rank spends over 0.5% of the
    step in it and every other rank spends under 10% of that (for plain ops: nothing at all).
    Requiring it step after step keeps preemption noise (one rank's op slowed once on an
    oversubscribed machine) from passing for a reduction.
    """
    frames = [
        table_of(r, "annotations").assign(rank=r.rank)
        for r in group
        if len(table_of(r, "annotations"))
    ]
    if len(group) < 2 or not frames:
        return {}
    ann = concat(frames)
    totals = concat(
        [
            table_of(r, "range_totals").assign(rank=r.rank)
            for r in group
            if len(table_of(r, "range_totals"))
        ]
    )
    # Seconds per (step, name) and rank (ranks as columns, absent: 0), as pandas' unstack.
    rank_list = np.array(sorted(r.rank for r in group), dtype=np.int64)
    sn, (u_step, u_name) = group_codes(totals.col("step"), totals.col("name"))
    nsn, nrank = len(u_step), len(rank_list)
    col = np.searchsorted(rank_list, totals.col("rank").astype(np.int64))
    values = group_sum(sn * nrank + col, totals.col("seconds"), nsn * nrank).reshape(nsn, nrank)
    not_op = np.bincount(sn, weights=~totals.col("is_op").astype(np.bool_), minlength=nsn)
    is_op = not_op == 0
    durations = concat([table_of(r, "steps")[["step", "duration"]] for r in group])
    dcodes, (d_step,) = group_codes(durations.col("step"))
    step_len = group_median(dcodes, durations.col("duration"), len(d_step))
    at = np.searchsorted(d_step, u_step)
    found = (at < len(d_step)) & (d_step[np.minimum(at, len(d_step) - 1)] == u_step)
    floor = np.where(found, step_len[np.minimum(at, len(d_step) - 1)], np.nan) * _MIN_SHARE
    top = values.max(axis=1)
    second = np.sort(values, axis=1)[:, -2]
    owner = rank_list[values.argmax(axis=1)]
    allowed = np.where(is_op, 0.0, _MUCH_SMALLER * top)
    hit = (top > floor) & (second <= allowed)
    # Steady (name, rank) pairs: the rank owns the name in at least half the steps it appears.
    appears: dict[str, int] = {}
    for name in u_name.tolist():
        appears[name] = appears.get(name, 0) + 1
    owned: dict[tuple[str, int], int] = {}
    for name, rank in zip(u_name[hit].tolist(), owner[hit].tolist(), strict=True):
        owned[(name, rank)] = owned.get((name, rank), 0) + 1
    steady = {k for k, v in owned.items() if v * 2 >= appears[k[0]]}
    wanted = {
        (rank, step, name)
        for step, name, rank in zip(
            u_step[hit].tolist(), u_name[hit].tolist(), owner[hit].tolist(), strict=True
        )
        if (name, rank) in steady
    }
    keys = zip(
        ann.col("rank").tolist(), ann.col("step").tolist(), ann.col("name").tolist(), strict=True
    )
    chosen = np.array([k in wanted for k in keys], dtype=np.bool_)
    out = {}
    ranks = ann.col("rank")
    for rank in np.unique(ranks[chosen]).tolist():
        index = np.flatnonzero(chosen & (ranks == rank))
        step_code, _ = group_codes(ann.col("step")[index])
        name_code, _ = group_codes(ann.col("name")[index])
        index = index[np.lexsort((name_code, step_code))]
        out[int(rank)] = (ann.take(index), index)
    return out


def apply_single_rank(group: Sequence[RankResult]) -> tuple[list[RankResult], list[str]]:
    """Relabel single-rank work as ``reduction`` in the rank's timeline and step table."""
    found = single_rank_rows(group)
    if not found:
        return list(group), []
    notes: list[str] = []
    out: list[RankResult] = []
    red = CAT["reduction"]
    for r in group:
        rows = found.get(r.rank, (None, None))[0]
        if rows is None or rows.empty:
            out.append(r)
            continue
        lo = rows["start_ns"].to_numpy(dtype=np.int64)
        hi = rows["end_ns"].to_numpy(dtype=np.int64)
        segs = relabel(r.segments, lo, hi, _SOURCE, red)
        steps = table_of(r, "steps").copy()
        origin = int(steps.attrs.get("origin_ns", 0))
        starts = origin + (steps.col("start") * 1e9).round().astype(np.int64)
        ends = starts + (steps.col("duration") * 1e9).round().astype(np.int64)
        # Move only the difference, so the step sums stay exact whatever the window rounding.
        delta = np.stack(
            [
                segs.time_in(int(a), int(b)) - r.segments.time_in(int(a), int(b))
                for a, b in zip(starts, ends, strict=True)
            ]
        )
        if not np.abs(delta).sum() > 0:  # already reduction by a rule: nothing to say
            out.append(r)
            continue
        for j, c in enumerate(CATEGORIES):
            steps[c] = steps.col(c).astype(np.float64) + delta[:, j]
        out.append(replace_tables(r, segments=segs, steps=steps))
        names = ", ".join(sorted(set(rows.col("name").tolist())))
        notes.append(f"rank {r.rank} alone runs {names}: counted as single-rank reduction")
    return out, notes
