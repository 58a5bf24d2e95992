"""Single-rank work found by comparing ranks: the serial 'final reduction on one node'.

A user range (``record_function``) that runs on one rank of a step and is absent, or much
smaller, on the others is work the other ranks will wait for (e.g. rank 0 aggregating metrics).
Rules catch the usual names; this catches the rest without the user naming them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import pandas as pd

from tracescale.categories import CATEGORIES
from tracescale.classify.rank import RankResult
from tracescale.classify.timeline import CAT, relabel

#: Categories single-rank work is taken from; waits, data loading and syncs keep their names.
_SOURCE = np.array([CAT[c] for c in ("compute", "memcpy", "host", "idle")], dtype=np.int8)
_MIN_SHARE = 0.005  # of the step: shorter ranges are noise, not a serial part worth naming
_MUCH_SMALLER = 0.1  # others' time below this fraction of the one rank's counts as absent


def single_rank_ranges(group: Sequence[RankResult]) -> dict[int, pd.DataFrame]:
    """Per rank, the range rows that are single-rank work (empty when < 2 ranks).

    A name counts when, in most of the steps it appears in, one rank spends over 0.5% of the
    step in it and every other rank spends under 10% of that (for plain ops: nothing at all).
    Requiring it step after step keeps preemption noise (one rank's op slowed once on an
    oversubscribed machine) from passing for a reduction.
    """
    frames = [r.annotations.assign(rank=r.rank) for r in group if len(r.annotations)]
    if len(group) < 2 or not frames:
        return {}
    ann = pd.concat(frames, ignore_index=True)
    totals = pd.concat(
        [r.range_totals.assign(rank=r.rank) for r in group if len(r.range_totals)],
        ignore_index=True,
    )
    per = totals.groupby(["step", "name", "rank"])["seconds"].sum().unstack("rank", fill_value=0.0)
    per = per.reindex(columns=sorted(r.rank for r in group), fill_value=0.0)
    is_op = totals.groupby(["step", "name"])["is_op"].all().reindex(per.index).to_numpy()
    durations = pd.concat([r.steps[["step", "duration"]] for r in group])
    step_len = durations.groupby("step")["duration"].median()
    values = per.to_numpy()
    top = values.max(axis=1)
    second = np.sort(values, axis=1)[:, -2]
    owner = per.columns.to_numpy()[values.argmax(axis=1)]
    floor = step_len.reindex(per.index.get_level_values("step")).to_numpy() * _MIN_SHARE
    allowed = np.where(is_op, 0.0, _MUCH_SMALLER * top)
    hit = (top > floor) & (second <= allowed)
    names = per.index.get_level_values("name").to_numpy()
    steps = per.index.get_level_values("step").to_numpy()
    # Steady (name, rank) pairs: the rank owns the name in at least half the steps it appears.
    hit_names, hit_owner, hit_steps = names[hit], owner[hit], steps[hit]
    owned = (
        pd.Series(1, index=pd.MultiIndex.from_arrays([hit_names, hit_owner]))
        .groupby(level=[0, 1])
        .size()
    )
    appears = pd.Series(names).value_counts()
    need = appears.reindex(owned.index.get_level_values(0)).to_numpy()
    steady = owned.index[owned.to_numpy() * 2 >= need]
    keep = pd.MultiIndex.from_arrays([hit_names, hit_owner]).isin(steady)
    wanted = pd.MultiIndex.from_arrays([hit_owner[keep], hit_steps[keep], hit_names[keep]])
    chosen = ann[pd.MultiIndex.from_frame(ann[["rank", "step", "name"]]).isin(wanted)]
    return {
        int(rank): rows.sort_values(["step", "name"], kind="mergesort")
        for rank, rows in chosen.groupby("rank", sort=True)
    }


def apply_single_rank(group: Sequence[RankResult]) -> tuple[list[RankResult], list[str]]:
    """Relabel single-rank work as ``reduction`` in the rank's timeline and step table."""
    found = single_rank_ranges(group)
    if not found:
        return list(group), []
    notes: list[str] = []
    out: list[RankResult] = []
    red = CAT["reduction"]
    for r in group:
        rows = found.get(r.rank)
        if rows is None or rows.empty:
            out.append(r)
            continue
        lo = rows["start_ns"].to_numpy(dtype=np.int64)
        hi = rows["end_ns"].to_numpy(dtype=np.int64)
        segs = relabel(r.segments, lo, hi, _SOURCE, red)
        steps = r.steps.copy()
        origin = int(steps.attrs.get("origin_ns", 0))
        starts = origin + (steps["start"].to_numpy() * 1e9).round().astype(np.int64)
        ends = starts + (steps["duration"].to_numpy() * 1e9).round().astype(np.int64)
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
        values = steps[list(CATEGORIES)].to_numpy(dtype=np.float64, copy=True) + delta
        steps[list(CATEGORIES)] = values
        out.append(dataclasses.replace(r, segments=segs, steps=steps))
        names = ", ".join(sorted(set(rows["name"])))
        notes.append(f"rank {r.rank} alone runs {names}: counted as single-rank reduction")
    return out, notes
