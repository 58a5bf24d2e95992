"""Collective rows of a run (rank, step, position within the step, instance) -> how far the
members of each collective met apart at their step's first collective.

Why apart from ``variability``: a step's host delay is waited for at its first collective by
that collective's group alone (HSDP's in-node AllGather); a later collective of another group
(the replicate AllReduce across nodes) joins several of those groups, and its members arrive
apart by the lateness of each group's slowest rank. The projection carries that lateness
itself (``slowest_rank``), so these two readings take it out of the jitter and say how many
of the first collective's groups each collective joins.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from tracescale.groups import group_codes, group_mean
from tracescale.table import Table

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


def released_apart(at: I64, instance: I64, count: int, end: F64) -> F64:
    """Per row, how much later than its instance's other members the rank left its step's
    first collective (``at``: :func:`first_of_step`; ``end``: the rows' ends on one clock; 0
    where a member has none).

    A step's host delay is waited for at its first collective, by that collective's group.
    Members of one later collective that met there arrive apart only by their own work since;
    members that met in different instances of it (HSDP's replicate AllReduce joins ranks of
    different in-node AllGathers; a data-parallel AllReduce joins different tensor-parallel
    pairs) also carry those instances' different ends: the lateness of another group's
    slowest rank. The projection carries that lateness itself, grown to the joined groups'
    size, so the part of an offset it explains is no jitter of the rank's device work."""
    prev = np.where(at >= 0, end[np.clip(at, 0, None)], np.nan)
    known = np.isfinite(prev)
    whole = np.bincount(instance, weights=known, minlength=count) == np.bincount(
        instance, minlength=count
    )
    filled = np.where(known, prev, 0.0)
    out = filled - group_mean(instance, filled, count)[instance]
    return np.asarray(np.where(whole[instance], out, 0.0), dtype=np.float64)


def joined_share(at: I64, instance: I64, count: int) -> F64:
    """Per row, the distinct instances of the step's first collective its instance's members
    met in, over its members (1 where a member has none): 1/size where all met in one (a
    group inside the first's), 1 where each met in its own (HSDP's replicate AllReduce after
    the in-node AllGather). How far waiting here joins the first collective's groups
    (``arrivals.slowest_rank``); per row, not per position, since under gradient
    accumulation one position holds an in-node AllGather in one step and the replicate
    AllReduce in another. ``at``: :func:`first_of_step`."""
    met = np.where(at >= 0, instance[np.clip(at, 0, None)], -1)
    members = np.bincount(instance, minlength=count).astype(np.float64)
    known = np.bincount(instance, weights=met >= 0, minlength=count) == members
    pairs = np.unique(np.stack([instance, met])[:, met >= 0], axis=1)
    distinct = np.bincount(pairs[0], minlength=count) if pairs.size else np.zeros(count)
    share = np.where(known & (members > 0), distinct / np.maximum(members, 1.0), 1.0)
    return np.asarray(share[instance], dtype=np.float64)


def first_of_step(c: Table) -> I64:
    """Per row, the row of its rank's first collective in its step (position 0; -1: none)."""
    codes, _ = group_codes(c.col("rank"), c.col("step"))
    first = np.flatnonzero(c.col("position") == 0)
    at = np.full(int(codes.max()) + 1 if len(codes) else 0, -1, dtype=np.int64)
    at[codes[first]] = first
    return np.asarray(at[codes], dtype=np.int64)
