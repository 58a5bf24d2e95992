"""Collective instances of a run's ranks -> each rank's clock offset to a reference rank.

Collectives end together on all their members, so the median difference of the ends of the
instances two ranks share is their clock offset. With process groups smaller than the world
(tensor-parallel pairs, data parallel across them) a rank may share no instance with the
reference: it is reached through ranks already aligned, group by group.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd


def clock_offsets(
    coll: pd.DataFrame, key: Sequence[str], ref_rank: int, end: str = "end"
) -> dict[int, float]:
    """Each rank's clock minus ``ref_rank``'s (``coll``: one row per rank and instance, the
    instance named by the ``key`` columns, its end in ``end``); a rank that no chain of shared
    instances reaches is left out (callers take 0)."""
    key = list(key)
    offsets: dict[int, float] = {int(ref_rank): 0.0}
    ranks = coll["rank"].astype("int64")
    # relative to the first end: exact in float64 even for int64 ns since the epoch
    ends = (coll[end] - coll[end].min()).astype("float64")
    while True:
        known = ranks.isin(list(offsets))
        if known.all():
            return offsets
        aligned = (
            (ends[known] - ranks[known].map(offsets))
            .groupby([coll.loc[known, k] for k in key])
            .median()
        )
        rest = coll.loc[~known, key].assign(rank=ranks[~known], end=ends[~known])
        joined = rest.join(aligned.rename("ref"), on=key, how="inner")
        if joined.empty:
            return offsets
        new = (joined["end"] - joined["ref"]).groupby(joined["rank"]).median()
        offsets.update({int(r): float(v) for r, v in new.items()})


def alignment_scatter(
    coll: pd.DataFrame, key: Sequence[str], offsets: dict[int, int], end: str = "end_ns"
) -> dict[int, float]:
    """Each rank's median distance (seconds) of its aligned collective ends from the instance's
    median end, over the instances it shares with another rank.

    NCCL ends a collective on every member within microseconds, so once the offsets are right
    this is microseconds too; milliseconds mean the offset is not one number over the window (a
    clock that drifts, or a host whose clock was stepped) and the cross-rank readings (waits,
    arrival order, the slowest rank) carry that error.
    """
    key = list(key)
    if coll.empty:
        return {}
    ranks = coll["rank"].astype("int64")
    aligned = (coll[end] - coll[end].min()).astype("float64") - ranks.map(offsets).fillna(0.0)
    groups = aligned.groupby([coll[k] for k in key])
    shared = groups.transform("size") > 1
    if not shared.any():
        return {}
    resid = (aligned - groups.transform("median")).abs()[shared]
    per_rank = resid.groupby(ranks[shared]).median()
    return {int(r): float(v) / 1e9 for r, v in per_rank.items()}
