"""Rank-to-rank variability: how late the slowest of N ranks arrives at each collective.

Measured per collective instance: every rank's arrival offset (arrival minus the mean
arrival, clock skew removed because instances end together on all ranks). Each offset is
split into the part explained by the rank's own host delay in that step (data loading and
host work beyond the step's mean: it scales like the host gaps) and the rest (jitter of the
rank's device work: it scales like the kernels). A rank late at every step (rank 0 reducing, a
slow GPU) is systematic: it stays one late rank at any N and keeps its lateness (rank 0's
reduction does not shrink; a slow rank chosen as the representative carries its own work);
only the random part is drawn anew for each of N ranks. The host-delay part is drawn from the
ranks' own delays pooled over every measured run (``replay.uncertainty.delays``: one run
holds too few draws to see a heavy tail), the device jitter from the largest run's
offsets; :func:`lateness` is how far the slowest of N ranks arrives after the mean arrival.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from tracescale.classify.clocks import clock_offsets
from tracescale.classify.collectives import pipeline_transfers
from tracescale.classify.result import RunBreakdown
from tracescale.groups import cumcount, group_codes, group_mean
from tracescale.replay.arrivals.accumulation import accumulated, accumulated_rows
from tracescale.replay.arrivals.chains import chain_model, slack_counts
from tracescale.replay.arrivals.joined import first_of_step, joined_share, released_apart
from tracescale.replay.arrivals.order_stats import expected_max_of, split_systematic
from tracescale.replay.uncertainty.delays import DelayModel, expected_max_sum
from tracescale.table import Table, table_of, text

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class OffsetPool:
    """Arrival offsets at one position within the step, over ranks and steps (seconds)."""

    rank: I64
    systematic: F64  # the rank's mean offset when ranks differ beyond noise, else 0 (kept)
    host: F64  # random part explained by the rank's own host delay in that step
    rest: F64  # the remainder (device jitter)
    beta: float = 0.0  # offset per second of the rank's own host delay (host = beta * delay)
    #: A pipeline's slack per chain position (``chains``): its ranks' delays reach this
    #: collective as their chain's ``max(delay - slack)``; empty elsewhere
    slack: F64 = field(default_factory=lambda: np.zeros(0))
    #: ``_spread(rest * dev_scale)`` by ``dev_scale``: asked for every position each time a
    #: projection looks for the first one the host delays reach
    _spreads: dict[float, float] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    _unit_max: dict[int, float] = field(default_factory=dict, init=False, repr=False, compare=False)
    #: ``ReplayStudy._wait_terms`` at this position by its exact arguments, with the delay model
    #: they were drawn from: the levers' scenario studies share the pools (and mostly the
    #: model), so each asks the same slowest-rank question the projection already answered
    terms: dict[
        tuple[int | None, int, int, float, float], tuple[object, tuple[float, float, float]]
    ] = field(default_factory=dict, init=False, repr=False, compare=False)

    def rest_spread(self, dev_scale: float) -> float:
        """Width of the middle 80% of the device jitter at ``dev_scale`` (remembered)."""
        got = self._spreads.get(dev_scale)
        if got is None:
            got = self._spreads[dev_scale] = _spread(self.rest * dev_scale)
        return got

    def jitter_max(self, mu_all: F64, n: int, dev_scale: float) -> float:
        """:func:`expected_max_of` over the device jitter at ``dev_scale``, remembered per ``n``
        where no rank is systematically late: the slowest of ``n`` draws of ``s * x`` is ``s``
        times the slowest of ``n`` draws of ``x``, so one value per ``n`` serves every scale."""
        if dev_scale < 0 or np.any(mu_all):
            return expected_max_of(mu_all, self.rest * dev_scale, n)
        got = self._unit_max.get(n)
        if got is None:
            got = self._unit_max[n] = expected_max_of(mu_all, self.rest, n)
        return got * dev_scale

    #: :meth:`at_least` by its floor: a pipeline's studies (the projection's and each lever's
    #: scenario) read the same pools at ``beta`` 1, and one pool object keeps ``terms`` shared
    _raised: dict[float, OffsetPool] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def at_least(self, beta: float) -> OffsetPool:
        """This pool with ``beta`` raised to at least ``beta`` (one object per floor)."""
        if self.beta >= beta:
            return self
        got = self._raised.get(beta)
        if got is None:
            got = self._raised[beta] = dataclasses.replace(self, beta=beta)
        return got

    _by_rank: list[F64] = field(default_factory=list, init=False, repr=False, compare=False)

    def rank_offsets(self) -> F64:
        """Each measured rank's systematic offset, in rank order (worked out once: every
        slowest-rank question at this position starts from it); read-only."""
        if not self._by_rank:
            _, first = np.unique(self.rank, return_index=True)
            mu = self.systematic[first]
            mu.flags.writeable = False
            self._by_rank.append(mu)
        return self._by_rank[0]

    def offsets(self, host_scale: float, dev_scale: float) -> F64:
        out = self.systematic + self.host * host_scale + self.rest * dev_scale
        return np.asarray(out, dtype=np.float64)


def arrival_offsets(run: RunBreakdown, rank: int) -> tuple[Table, dict[int, OffsetPool]]:
    """Offsets of every rank at every instance (table with ``position``/``offset``) and the
    pools per position within the step."""
    c = table_of(run, "collectives")
    if len(c) == 0:
        return c.assign(position=np.zeros(0), offset=np.zeros(0)), {}
    c = c.copy()
    c["pg"] = text(c, "pg")
    c["end"] = c.col("start") + c.col("duration")
    key = ["pg", "collective", "seq"]
    skew = clock_offsets(c, key, rank)
    ranks = c.col("rank")
    arrival = c.col("start") - np.array([skew.get(int(r), 0.0) for r in ranks.tolist()])
    c["arrival"] = arrival
    instance, uniq = group_codes(*(c.col(k) for k in key))
    c["offset"] = arrival - group_mean(instance, arrival, len(uniq[0]))[instance]
    # A pipeline's point-to-point transfers are numbered apart from the other collectives
    # (from P2P_POSITIONS on): a stage whose step holds one transfer more or fewer than the
    # last (batched send/recv merged differently) would otherwise put its data-parallel
    # AllReduce at a transfer's number, and half the steps' AllReduce would miss the wait
    # for the slowest replica, read at that number (a pipeline with lognormal loader delays:
    # the slowest of 32 ranks' 31 ms was carried in 9 of 20 steps, the step 14% short).
    p2p = point_to_point(c)
    order = np.lexsort((c.col("start"), c.col("step"), ranks, p2p))
    position = np.empty(len(c), dtype=np.int64)
    codes = group_codes(p2p[order], ranks[order], c.col("step")[order])[0]
    position[order] = cumcount(codes) + np.where(p2p[order], P2P_POSITIONS, 0)
    c["position"] = position
    end = arrival - c.col("start") + c.col("end")  # on the reference rank's clock
    at = first_of_step(c)
    carried = released_apart(at, instance, len(uniq[0]), end)
    c["joins"] = joined_share(at, instance, len(uniq[0]))
    # each rank's own delay per step, less the step's mean over ranks
    st = table_of(run, "steps")
    own = st.col("dataloader") - st.col("caused_dataloader") + st.col("host")
    first = _first_rows(st.col("rank"), st.col("step"))
    d_rank, d_step, d_own = st.col("rank")[first], st.col("step")[first], own[first]
    # summed over the steps since the rank's last collective (``accumulation``)
    d_rank, d_step, d_own, _ = accumulated(d_rank, d_step, d_own, ranks, c.col("step"))
    s_codes, (s_ids,) = group_codes(d_step)
    d_own = d_own - group_mean(s_codes, d_own, len(s_ids))[s_codes]
    delay = _lookup(d_rank, d_step, d_own, ranks, c.col("step"))
    # less its instance's mean, as the offset is: an in-node group's mean delay is not the
    # world's, and the mismatch read HSDP's first AllGather as following 0.90-0.93 of a rank's
    # delay (1.00 within one node), shrinking the slowest rank's drawn delay by as much
    c["delay"] = delay - group_mean(instance, delay, len(uniq[0]))[instance]
    mine = accumulated_rows(own_delays(run), c)[0]
    c["own_delay"] = _lookup(
        mine.col("rank"), mine.col("step"), mine.col("delay"), ranks, c.col("step")
    )
    chain = chain_model(c, p2p, instance, mine)
    systematic_all = np.full(len(c), np.nan)
    host_all = np.full(len(c), np.nan)
    rest_all = np.full(len(c), np.nan)
    pools: dict[int, OffsetPool] = {}
    offsets_col, delay_col, own_col = c.col("offset"), c.col("delay"), c.col("own_delay")
    for k, idx in _by_value(position):
        o = offsets_col[idx].astype(np.float64)
        r = ranks[idx].astype(np.int64)
        mu, _ = split_systematic(o, r)
        _, inv = np.unique(r, return_inverse=True)
        systematic = mu[inv] if np.any(mu) else np.zeros(len(o))
        rand = o - systematic
        if chain is None:  # the members' last syncs' different ends are no jitter of theirs
            a = carried[idx]
            a = a - np.bincount(inv, weights=a)[inv] / np.bincount(inv)[inv] if np.any(mu) else a
            aa = float(np.dot(a, a))
            gamma = min(max(float(np.dot(a, rand)) / aa, 0.0), 1.0) if aa > 0 else 0.0
            rand = rand - gamma * a
        if chain is not None and not p2p[idx[0]]:  # a pipeline's chains (``chains``)
            slack, modelled = chain
            host = modelled[idx]
            host = (
                host - np.bincount(inv, weights=host)[inv] / np.bincount(inv)[inv]
                if np.any(mu)
                else host
            )
            systematic_all[idx], host_all[idx], rest_all[idx] = systematic, host, rand - host
            pools[int(k)] = OffsetPool(r, systematic, host, rand - host, 1.0, slack)
            continue
        d = delay_col[idx].astype(np.float64)
        d = d - np.bincount(inv, weights=d)[inv] / np.bincount(inv)[inv] if np.any(mu) else d
        denom = float(np.dot(d, d))
        beta = min(max(float(np.dot(d, rand)) / denom, 0.0), 1.0) if denom > 0 else 0.0
        host = beta * d
        systematic_all[idx] = systematic
        host_all[idx] = beta * own_col[idx].astype(np.float64)
        rest_all[idx] = rand - host
        pools[int(k)] = OffsetPool(r, systematic, host, rand - host, beta)
    c["systematic"], c["host"], c["rest"] = systematic_all, host_all, rest_all
    return c, pools


#: Where a step's point-to-point transfers' positions start: past any other collective's.
P2P_POSITIONS = 1 << 40


def point_to_point(c: Table) -> npt.NDArray[np.bool_]:
    """Rows of a collectives table that are a pipeline's send/recv between two ranks."""
    if len(c) == 0:
        return np.zeros(0, dtype=np.bool_)
    return pipeline_transfers(c.col("collective"), c.col("group_size"))


def _first_rows(rank: np.ndarray, step: np.ndarray) -> np.ndarray:
    """Rows that are the first of their (rank, step), in row order."""
    seen: set[tuple[int, int]] = set()
    keep = []
    for i, k in enumerate(zip(rank.tolist(), step.tolist(), strict=True)):
        if k not in seen:
            seen.add(k)
            keep.append(i)
    return np.array(keep, dtype=np.int64)


def _lookup(
    rank: np.ndarray, step: np.ndarray, value: np.ndarray, at_rank: np.ndarray, at_step: np.ndarray
) -> F64:
    """``value`` at each (``at_rank``, ``at_step``), 0 where the pair has none."""
    table = dict(zip(zip(rank.tolist(), step.tolist(), strict=True), value.tolist(), strict=True))
    pairs = zip(at_rank.tolist(), at_step.tolist(), strict=True)
    return np.array([table.get(p, 0.0) for p in pairs], dtype=np.float64)


def _by_value(values: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """Row indices per distinct value, values ascending, rows in order."""
    order = np.argsort(values, kind="stable")
    bounds = np.flatnonzero(np.diff(values[order])) + 1
    parts = np.split(order, bounds) if len(order) else []
    return [(int(values[p[0]]), p) for p in parts]


def own_delays(run: RunBreakdown) -> Table:
    """Every rank's own host delay per step (data loading and host work, less the waits for
    other ranks), seconds, as ``rank``, ``step``, ``delay`` rows (one per pair): less the run's
    median and, when ranks differ beyond noise, less each rank's own mean (a rank late at every
    step stays one late rank, kept in its systematic offset; it is no draw)."""
    st = table_of(run, "steps")
    own = (st.col("dataloader") - st.col("caused_dataloader") + st.col("host")).astype(np.float64)
    ok = np.isfinite(own)
    d, rank = own[ok], st.col("rank").astype(np.int64)[ok]
    step = st.col("step")[ok]
    if len(d) == 0:
        return Table({"rank": rank, "step": step, "delay": d})
    mu, eps = split_systematic(d, rank)
    if np.any(mu):
        d = np.asarray(eps, dtype=np.float64)
    out = d - float(np.median(d))
    first = _first_rows(rank, step)
    return Table({"rank": rank[first], "step": step[first], "delay": out[first]})


#: A host-delay spread below this reaching a collective is not drawn (it costs a convolution).
_NEGLIGIBLE_S = 1e-6


def _spread(x: F64) -> float:
    """Width of the middle 80% of ``x``."""
    if len(x) == 0:
        return 0.0
    lo, hi = np.quantile(x, [0.1, 0.9])
    return float(hi - lo)


def reaches(
    pool: OffsetPool, delays: DelayModel | None, host_scale: float, dev_scale: float
) -> bool:
    """Whether the ranks' own host delays visibly move their arrivals at this collective."""
    if delays is None:
        return False
    b = pool.beta * host_scale
    return b * delays.spread > max(0.05 * pool.rest_spread(dev_scale), _NEGLIGIBLE_S)


def first_reached(
    pools: Mapping[int, OffsetPool], delays: DelayModel | None, host_scale: float,
    dev_scale: float,
) -> int | None:  # fmt: skip
    """The first position (in position order) whose arrivals the host delays reach
    (:func:`reaches`), None where none is: the position where a step's host delay is waited
    for. Stops at the first, so asking it per position is not a pass over every position."""
    for k, pool in sorted(pools.items()):
        if reaches(pool, delays, host_scale, dev_scale):
            return int(k)
    return None


def lateness(
    pool: OffsetPool,
    delays: DelayModel | None,
    n: int,
    host_scale: float,
    dev_scale: float,
) -> float:
    """E[max over ``n`` ranks of (systematic offset + host delay + device jitter)]: when the
    slowest of ``n`` ranks arrives, on the scale where a rank's arrival is its systematic offset
    plus ``host`` plus ``rest`` of ``arrival_offsets``' frame (the step's common level left out).

    Each rank draws its host delay from ``delays`` (scaled by ``host_scale`` and by how much
    of a rank's delay reaches this collective, ``pool.beta``) and its device jitter from the
    pool (scaled by ``dev_scale``); measured ranks keep their systematic offsets, further ranks
    get the median one. Without pooled delays only the device jitter is drawn.
    """
    mu_all = pool.rank_offsets()
    b = pool.beta * host_scale
    rest = pool.rest * dev_scale
    if delays is None or not reaches(pool, delays, host_scale, dev_scale):
        return pool.jitter_max(mu_all, n, dev_scale)  # the host delay does not reach it
    if len(pool.slack):
        return _chain_lateness(pool, delays, n, b, rest)
    mu = mu_all[:n]
    vals, counts = np.unique(mu, return_counts=True)
    if n > len(mu):
        vals = np.append(vals, float(np.median(mu_all)))
        counts = np.append(counts, n - len(mu))
    return expected_max_sum(vals, counts.tolist(), delays, b, rest, n)


def _chain_lateness(pool: OffsetPool, delays: DelayModel, n: int, b: float, rest: F64) -> float:
    """A pipeline's slowest of ``n`` ranks after the mean arrival: each rank's delay less its
    chain position's slack (a chain arrives as late as its latest such term), the slowest of
    all ``n`` less that of one chain (the mean arrival: one chain's expected lateness). The
    slacks keep their measured size at any N: the fill a stage waits through is one
    microbatch's pass per stage before it, and a microbatch keeps its size."""
    p = len(pool.slack)
    if n <= p:  # no more ranks than one chain: the slowest is the one chain's (both terms equal)
        return 0.0
    out = []
    for k in (max(n, p), p):
        vals, counts = slack_counts(-pool.slack, k)
        out.append(expected_max_sum(vals, counts, delays, b, rest, k))
    return max(out[0] - out[1], 0.0)


def delay_assumption(delays: DelayModel | None) -> str:
    """What the slowest-rank projection assumed about per-rank delays, in words."""
    if delays is None:
        return "no per-rank host delays measured: only device jitter is drawn for each rank"
    p = delays.work_power
    if p < 0.25:
        how = "keeping its size at any N (not a share of the batch)"
    elif p > 0.75:
        how = "shrinking with the rank's host work as N grows"
    else:
        how = f"scaling as the rank's host work to the power {p:.2f}"
    text = (
        "each rank's own host delay per step (data loading, host work) is drawn for each of N "
        f"ranks from {len(delays.draws)} delays pooled over the measured runs, {how}, as the "
        "runs' spreads moved with their host work"
    )
    t = delays.tail
    if t is None and delays.stalls:
        size = float(np.median(delays.draws[-delays.stalls :]) - np.median(delays.draws))
        return text + (
            f"; {delays.stalls} of them are stalls of about {size * 1e3:.1f} ms, and a body plus"
            " stalls of that size at their measured rate predicted each run's slowest ranks"
            " best (fitted on the other runs), so no rank draws beyond one stall"
        )
    if t is None and delays.p_values:
        return text + (
            "; no generalized Pareto tail fits them above any threshold (Anderson-Darling), as"
            " with rare stalls of a fixed length, so no rank draws beyond the largest measured"
        )
    if t is None:
        return text + "; too few to fit a tail, so no rank draws beyond the largest measured"
    shapes = sorted(r.shape for r in delays.refits if r is not None)
    spread = (
        f" (bootstrap 5-95%: {shapes[len(shapes) // 20]:.2f}..{shapes[-1 - len(shapes) // 20]:.2f})"
        if shapes
        else ""
    )
    return (
        text + f", upper tail (the top {1 - t.p_u:.0%}) generalized Pareto with shape "
        f"{t.shape:.2f}{spread}; the slowest of"
        " N grows like N^shape, so with few draws the point estimate at large N is uncertain and"
        " the 90% interval carries that uncertainty"
    )
