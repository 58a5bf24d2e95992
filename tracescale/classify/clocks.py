"""Collective instances of a run's ranks -> each rank's clock offset to a reference rank.

Collectives end together on all their members, so the median difference of the ends of the
instances two ranks share is their clock offset. With process groups smaller than the world
(tensor-parallel pairs, data parallel across them) a rank may share no instance with the
reference: it is reached through ranks already aligned, group by group.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tracescale.groups import group_codes, group_median, group_size
from tracescale.table import as_table


def clock_offsets(
    coll: Any, key: Sequence[str], ref_rank: int, end: str = "end"
) -> dict[int, float]:
    """Each rank's clock minus ``ref_rank``'s (``coll``: one row per rank and instance, the
    instance named by the ``key`` columns, its end in ``end``); a rank that no chain of shared
    instances reaches is left out (callers take 0)."""
    coll = as_table(coll)
    offsets: dict[int, float] = {int(ref_rank): 0.0}
    ranks = coll.col("rank").astype(np.int64)
    raw = coll.col(end)
    # relative to the first end: exact in float64 even for int64 ns since the epoch
    ends = (raw - raw.min()).astype(np.float64) if len(raw) else raw.astype(np.float64)
    codes, uniq = group_codes(*(coll.col(k) for k in key))
    ngroups = len(uniq[0]) if uniq else 0
    # each row's rank as an index into one offset per rank (a chain of small groups, as a
    # pipeline's stages, takes many rounds, and a lookup per row and round was the cost)
    rank_ids, rank_index = np.unique(ranks, return_inverse=True)
    by_rank = np.full(len(rank_ids), np.nan)
    while True:
        for r, v in offsets.items():
            at = np.searchsorted(rank_ids, r)
            if at < len(rank_ids) and rank_ids[at] == r:
                by_rank[at] = v
        shift = by_rank[rank_index]
        known = ~np.isnan(shift)
        if known.all():
            return offsets
        aligned = group_median(np.where(known, codes, -1), ends - shift, ngroups)
        rest = ~known & (codes >= 0)
        ref = np.full(len(ranks), np.nan)
        ref[rest] = aligned[codes[rest]]
        rest &= ~np.isnan(ref)
        if not rest.any():
            return offsets
        rank_codes, (found,) = group_codes(ranks[rest])
        new = group_median(rank_codes, ends[rest] - ref[rest], len(found))
        offsets.update({int(r): float(v) for r, v in zip(found.tolist(), new, strict=True)})


def alignment_scatter(
    coll: Any, key: Sequence[str], offsets: dict[int, int], end: str = "end_ns"
) -> dict[int, float]:
    """Each rank's median distance (seconds) of its aligned collective ends from the instance's
    median end, over the instances it shares with another rank.

    NCCL ends a collective on every member within microseconds, so once the offsets are right
    this is microseconds too; milliseconds mean the offset is not one number over the window (a
    clock that drifts, or a host whose clock was stepped) and the cross-rank readings (waits,
    arrival order, the slowest rank) carry that error.
    """
    coll = as_table(coll)
    if coll.empty:
        return {}
    ranks = coll.col("rank").astype(np.int64)
    raw = coll.col(end)
    shift = np.array([float(offsets.get(int(r), 0.0)) for r in ranks.tolist()])
    aligned = (raw - raw.min()).astype(np.float64) - shift
    codes, uniq = group_codes(*(coll.col(k) for k in key))
    ngroups = len(uniq[0]) if uniq else 0
    size = group_size(codes, ngroups)
    shared = (codes >= 0) & (size[np.maximum(codes, 0)] > 1)
    if not shared.any():
        return {}
    med = group_median(codes, aligned, ngroups)
    resid = np.abs(aligned - med[np.maximum(codes, 0)])[shared]
    rank_codes, (rank_ids,) = group_codes(ranks[shared])
    per_rank = group_median(rank_codes, resid, len(rank_ids))
    return {int(r): float(v) / 1e9 for r, v in zip(rank_ids.tolist(), per_rank, strict=True)}
