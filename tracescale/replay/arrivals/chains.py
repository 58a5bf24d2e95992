"""A pipeline's chains: the ranks' own host delays per step and their arrival offsets at the
data-parallel collectives in; each chain position's slack (how much of a delay the pipeline's
fill absorbs there) and each arrival's modelled lateness out.

Why: in a pipeline a rank's own delay reaches the step's end only through its chain (the
stages of one replica, joined by send/recv), and only past the time its stage would have
waited anyway for its first input. A replica arrives at its data-parallel collectives as late
as ``max over its stages s of (delay_s - slack_s)``: the first stage's delay counts whole, a
later stage's only beyond its fill slack. Read as each rank's own delay reaching the
collective whole (``beta`` 1), the slowest of N ranks' delays held the step, a later stage's
absorbed delay included, and the offsets left over (other stages' delays, 11 ms wide against
a true device jitter of 0.1 ms) were drawn again as device jitter: a 4-stage pipeline with
lognormal loader delays was projected 21% slow at its own measured N=16. The slacks are fitted
to the measured offsets (least squares, one slack per chain position, coordinate descent);
the offsets they leave are the device jitter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tracescale.groups import group_codes
from tracescale.ingest.groups import key_members
from tracescale.table import Table, text

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

#: Candidate slacks per coordinate pass (between 0 and the delays' 99th percentile), and the
#: passes over the chain positions: three reach a fixed point on every study tried.
_GRID = 96
_PASSES = 3


@dataclass(frozen=True)
class Chains:
    """Which chain each rank is in and its position there (ranks in rank order per chain)."""

    chain: dict[int, int]
    position: dict[int, int]
    size: int


def find_chains(ranks: Sequence[int], pg_keys: Sequence[str]) -> Chains | None:
    """The chains joined by the send/recv groups ``pg_keys`` (their members from the keys),
    None where a group names no members or the chains differ in length (no one shape)."""
    parent = {int(r): int(r) for r in ranks}

    def root(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for key in set(pg_keys):
        members = key_members(key)
        if not members or any(m not in parent for m in members):
            return None
        for m in members[1:]:
            parent[root(m)] = root(members[0])
    groups: dict[int, list[int]] = {}
    for r in sorted(parent):
        groups.setdefault(root(r), []).append(r)
    sizes = {len(g) for g in groups.values()}
    if len(sizes) != 1 or sizes == {1}:
        return None
    chain, position = {}, {}
    for k, chain_ranks in enumerate(sorted(groups.values())):
        for j, r in enumerate(chain_ranks):
            chain[r], position[r] = k, j
    return Chains(chain, position, sizes.pop())


def fit_slack(
    chains: Chains,
    delay: dict[tuple[int, int], float],
    rank: I64,
    step: I64,
    instance: I64,
    offset: F64,
) -> F64:
    """One slack per chain position (seconds, the smallest 0) that best explains ``offset``
    (arrivals less their instance's mean) as the chain's ``max(delay - slack)`` less the
    instance's mean of it. ``delay``: (rank, step) -> the rank's own delay in that step."""
    p = chains.size
    steps = np.unique(step)
    d = _delay_cube(chains, delay, steps)
    if not len(offset) or not np.any(d):
        return np.zeros(p)
    ci = np.array([chains.chain[int(r)] for r in rank.tolist()], dtype=np.int64)
    si = np.searchsorted(steps, step)
    order = np.argsort(instance, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(instance[order]) != 0])
    counts = np.diff(np.r_[starts, len(order)])
    inv = np.repeat(np.arange(len(starts)), counts)
    y = offset[order]
    ci, si = ci[order], si[order]
    top = float(np.quantile(d, 0.99) - d.min())
    grid = np.linspace(0.0, max(top, 1e-6), _GRID)
    slack = np.zeros(p)
    for _ in range(_PASSES):
        for j in range(p):
            others = np.delete(np.arange(p), j)  # a chain has two ranks or more
            other = (d[:, others, :] - slack[others, None]).max(axis=1)
            cand = np.maximum(d[None, :, j, :] - grid[:, None, None], other[None])
            m = cand[:, ci, si]
            mean = np.add.reduceat(m, starts, axis=1) / counts
            err = ((y[None, :] - (m - mean[:, inv])) ** 2).sum(axis=1)
            slack[j] = grid[int(np.argmin(err))]
    out: F64 = slack - slack.min()
    return out


def modelled_offsets(
    chains: Chains,
    slack: F64,
    delay: dict[tuple[int, int], float],
    rank: I64,
    step: I64,
    instance: I64,
) -> F64:
    """Each arrival's modelled offset: its chain's ``max(delay - slack)`` in that step less
    the mean of it over the arrivals of its instance."""
    steps = np.unique(step)
    d = _delay_cube(chains, delay, steps)
    lateness = (d - slack[None, :, None]).max(axis=1)
    ci = np.array([chains.chain[int(r)] for r in rank.tolist()], dtype=np.int64)
    m = lateness[ci, np.searchsorted(steps, step)]
    codes, uniq = group_codes(instance)
    mean = np.bincount(codes, weights=m, minlength=len(uniq[0])) / np.bincount(codes)
    out: F64 = m - mean[codes]
    return out


def chain_model(
    c: Table, p2p: npt.NDArray[np.bool_], instance: I64, mine: Table
) -> tuple[F64, F64] | None:
    """A pipeline's slack per chain position and every row's modelled offset (``chains``),
    None where the run has no send/recv or its chains cannot be read from their groups."""
    if not p2p.any():
        return None
    ranks = c.col("rank").astype(np.int64)
    found = find_chains(sorted(set(ranks.tolist())), sorted(set(text(c, "pg")[p2p].tolist())))
    if found is None:
        return None
    delay = dict(zip(zip(mine.col("rank").tolist(), mine.col("step").tolist(), strict=True),
                     mine.col("delay").tolist(), strict=True))  # fmt: skip
    step = c.col("step").astype(np.int64)
    fit = ~p2p & (c.col("group_size") > 1)
    slack = fit_slack(found, delay, ranks[fit], step[fit], instance[fit], c.col("offset")[fit])
    return slack, modelled_offsets(found, slack, delay, ranks, step, instance)


def slack_counts(slack: F64, n: int) -> tuple[F64, list[int]]:
    """The slacks of ``n`` ranks laid out in chains of ``len(slack)``: (values, counts)."""
    p = len(slack)
    counts = [round(n * (j + 1) / p) - round(n * j / p) for j in range(p)]
    return np.asarray(slack, dtype=np.float64), counts


def _delay_cube(chains: Chains, delay: dict[tuple[int, int], float], steps: I64) -> F64:
    """Own delays as (chain, position, step), 0 where a rank has none in a step."""
    k = len(set(chains.chain.values()))
    out = np.zeros((k, chains.size, len(steps)))
    for r, c in chains.chain.items():
        j = chains.position[r]
        out[c, j] = [delay.get((r, int(s)), 0.0) for s in steps.tolist()]
    return out
