"""Each rank's own delay per step and the steps that hold its collectives in; the delay the
first collective of each such step waits for (summed since the rank's last one) out.

Why: with gradient accumulation the steps between two optimizer steps hold no collective
(``no_sync``, ZeRO's reduce at the boundary only), so nothing makes the ranks wait for each
other there: a rank's loader delays add up over the cycle, and the first collective of the
boundary step waits for the slowest rank's sum. Read per step, each rank's arrival there
followed one step's delay and the rest was drawn as device jitter, scaled down with the
kernels: ZeRO-2 accumulating 4 steps with lognormal loader delays was projected 13% short at
its own measured N=8, 29-35% at 2-8x. A run where every step holds a collective keeps its
per-step delays (a cycle of one step).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from tracescale.table import Table

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


def accumulated(
    rank: I64, step: I64, delay: F64, coll_rank: I64, coll_step: I64
) -> tuple[I64, I64, F64, int]:
    """(rank, step, delay, cycle): per rank, its delays summed over the steps up to and
    including each step that holds one of its collectives, one row per such step; ``cycle``
    is the most common number of steps summed. A rank's steps after its last collective and
    its first cycle where it is shorter than ``cycle`` (the profile began inside it) are left
    out. Where every step holds a collective, or none does, the rows come back as they are
    (cycle 1)."""
    coll_rank = np.asarray(coll_rank, dtype=np.int64)
    coll_step = np.asarray(coll_step, dtype=np.int64)
    holds = set(zip(coll_rank.tolist(), coll_step.tolist(), strict=True))
    pairs = list(zip(rank.tolist(), step.tolist(), strict=True))
    if not holds or all(p in holds for p in pairs):
        return rank, step, delay, 1
    ends: dict[int, I64] = {}
    for r in np.unique(coll_rank).tolist():
        ends[r] = np.unique(coll_step[coll_rank == r])
    out_rank, out_step, out_delay, lengths = [], [], [], []
    for r in np.unique(rank).tolist():
        mine = rank == r
        s, d = step[mine], delay[mine]
        order = np.argsort(s, kind="stable")
        s, d = s[order], d[order]
        e = ends.get(r)
        if e is None or not len(e):
            continue
        at = np.searchsorted(e, s)  # the cycle a step belongs to: its end's index
        ok = at < len(e)
        at, d = at[ok], d[ok]
        if not len(at):
            continue
        total = np.bincount(at, weights=d, minlength=len(e))
        count = np.bincount(at, minlength=len(e))
        used = np.flatnonzero(count > 0)
        out_rank.append(np.full(len(used), r, dtype=np.int64))
        out_step.append(e[used])
        out_delay.append(total[used])
        lengths.append(count[used])
    if not out_rank:
        return rank, step, delay, 1
    rk, st, dl, n = (np.concatenate(x) for x in (out_rank, out_step, out_delay, lengths))
    # a rank's first cycle may have begun before the profile did: read the length from the
    # others where there are any, and leave a first one out where it is shorter
    first = np.r_[True, rk[1:] != rk[:-1]]
    values, counts = np.unique(n[~first] if (~first).any() else n, return_counts=True)
    cycle = int(values[np.argmax(counts)])
    keep = ~(first & (n < cycle))
    return rk[keep], st[keep], dl[keep].astype(np.float64), cycle


def accumulated_rows(own: Table, coll: Table) -> tuple[Table, int]:
    """:func:`accumulated` of ``own`` (``rank``, ``step``, ``delay`` rows) at the steps of the
    collectives ``coll`` (its ``rank`` and ``step`` columns): the rows, and the cycle."""
    if len(coll) == 0:
        return own, 1
    r, s, d, cycle = accumulated(
        own.col("rank").astype(np.int64), own.col("step").astype(np.int64),
        own.col("delay").astype(np.float64), coll.col("rank").astype(np.int64),
        coll.col("step").astype(np.int64),
    )  # fmt: skip
    return Table({"rank": r, "step": s, "delay": d}), cycle


def block_sums(delay: F64, cycle: int) -> F64:
    """A run without collectives (one rank): its per-step delays summed over consecutive
    blocks of ``cycle`` steps (the rest dropped), in the units the other runs' draws have."""
    d = np.asarray(delay, dtype=np.float64)
    whole = len(d) // cycle * cycle
    if cycle <= 1 or whole == 0:
        return d if cycle <= 1 else np.zeros(0)
    out: F64 = d[:whole].reshape(-1, cycle).sum(axis=1)
    return out
