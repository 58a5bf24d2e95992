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

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pandas as pd

from tracescale.classify.clocks import clock_offsets
from tracescale.classify.result import RunBreakdown
from tracescale.replay.uncertainty.delays import DelayModel, expected_max_sum

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

    def offsets(self, host_scale: float, dev_scale: float) -> F64:
        out = self.systematic + self.host * host_scale + self.rest * dev_scale
        return np.asarray(out, dtype=np.float64)


def split_systematic(offsets: F64, rank: I64) -> tuple[F64, F64]:
    """(per-rank systematic offsets in rank order, pooled random part)."""
    ranks, inv = np.unique(rank, return_inverse=True)
    counts = np.bincount(inv).astype(np.float64)
    mu = np.bincount(inv, weights=offsets) / counts
    eps = offsets - mu[inv]
    steps = max(len(offsets) / max(len(ranks), 1), 1.0)
    noise = float(np.var(eps)) / steps if len(eps) else 0.0
    if len(ranks) < 2 or float(np.var(mu)) <= 4.0 * noise:
        return np.zeros(len(ranks)), offsets
    return mu, eps


def expected_max(offsets: F64, rank: I64, n: int) -> float:
    """E[max over n ranks of (systematic offset + a random draw)].

    The measured ranks keep their systematic offsets (in rank order); ranks beyond them get
    the median one. The maximum's CDF is the product of the ranks' CDFs on the support points.
    """
    mu_all, eps = split_systematic(offsets, rank)
    return expected_max_of(mu_all, eps, n)


def expected_max_of(mu_all: F64, eps: F64, n: int) -> float:
    """E[max over n ranks of (systematic offset ``mu_all`` in rank order + a draw of ``eps``)]."""
    if len(eps) == 0 or n < 1:
        return 0.0
    mu = mu_all[:n]
    extra = n - len(mu)
    vals, counts = np.unique(mu, return_counts=True)
    if extra > 0:
        vals = np.append(vals, float(np.median(mu_all)))
        counts = np.append(counts, extra)
    sx = np.sort(eps)
    sf = np.arange(1, len(sx) + 1, dtype=np.float64) / len(sx)
    x = np.unique((vals[:, None] + sx[None, :]).ravel())
    log_f = np.zeros(len(x))
    for v, k in zip(vals.tolist(), counts.tolist(), strict=True):
        j = np.searchsorted(sx, x - v, side="right") - 1
        f = np.where(j >= 0, sf[np.clip(j, 0, None)], 0.0)
        with np.errstate(divide="ignore"):
            log_f += k * np.log(f)
    pmf = np.diff(np.concatenate([[0.0], np.exp(log_f)]))
    return float(np.dot(pmf, x))


def arrival_offsets(run: RunBreakdown, rank: int) -> tuple[pd.DataFrame, dict[int, OffsetPool]]:
    """Offsets of every rank at every instance (frame with ``position``/``offset``) and the
    pools per position within the step."""
    c = run.collectives
    if len(c) == 0:
        return c.assign(position=[], offset=[]), {}
    c = c.copy()
    c["pg"] = c["pg"].fillna("").astype(str) if "pg" in c else ""
    c["end"] = c["start"] + c["duration"]
    key = ["pg", "collective", "seq"]
    skew = clock_offsets(c, key, rank)
    c["arrival"] = c["start"] - c["rank"].map(skew).fillna(0.0)
    c["offset"] = c["arrival"] - c.groupby(key)["arrival"].transform("mean")
    ordered = c.sort_values(["rank", "step", "start"])
    c["position"] = ordered.groupby(["rank", "step"]).cumcount().reindex(c.index)
    st = run.steps
    own = st["dataloader"] - st["caused_dataloader"] + st["host"]
    delay = pd.Series(own.to_numpy(), index=pd.MultiIndex.from_frame(st[["rank", "step"]]))
    delay = delay[~delay.index.duplicated()]
    delay = delay - delay.groupby(level="step").transform("mean")
    at = pd.MultiIndex.from_frame(c[["rank", "step"]])
    c["delay"] = delay.reindex(at).fillna(0.0).to_numpy()
    c["own_delay"] = own_delays(run).reindex(at).fillna(0.0).to_numpy()
    pools: dict[int, OffsetPool] = {}
    for k, g in c.groupby("position"):
        o = g["offset"].to_numpy(dtype=np.float64)
        r = g["rank"].to_numpy(dtype=np.int64)
        mu, _ = split_systematic(o, r)
        _, inv = np.unique(r, return_inverse=True)
        systematic = mu[inv] if np.any(mu) else np.zeros(len(o))
        rand = o - systematic
        d = g["delay"].to_numpy(dtype=np.float64)
        d = d - np.bincount(inv, weights=d)[inv] / np.bincount(inv)[inv] if np.any(mu) else d
        denom = float(np.dot(d, d))
        beta = min(max(float(np.dot(d, rand)) / denom, 0.0), 1.0) if denom > 0 else 0.0
        host = beta * d
        c.loc[g.index, "systematic"] = systematic
        c.loc[g.index, "host"] = beta * g["own_delay"].to_numpy(dtype=np.float64)
        c.loc[g.index, "rest"] = rand - host
        pools[int(k)] = OffsetPool(r, systematic, host, rand - host, beta)
    return c, pools


def own_delays(run: RunBreakdown) -> pd.Series:
    """Every rank's own host delay per step (data loading and host work, less the waits for
    other ranks), seconds, by (rank, step): less the run's median and, when ranks differ beyond
    noise, less each rank's own mean (a rank late at every step stays one late rank, kept in
    its systematic offset; it is no draw)."""
    st = run.steps
    own = (st["dataloader"] - st["caused_dataloader"] + st["host"]).to_numpy(dtype=np.float64)
    ok = np.isfinite(own)
    index = pd.MultiIndex.from_frame(st.loc[ok, ["rank", "step"]])
    d, rank = own[ok], st["rank"].to_numpy(dtype=np.int64)[ok]
    if len(d) == 0:
        return pd.Series(d, index=index, dtype=np.float64)
    mu, eps = split_systematic(d, rank)
    if np.any(mu):
        d = np.asarray(eps, dtype=np.float64)
    out = pd.Series(d - float(np.median(d)), index=index)
    return out[~out.index.duplicated()]


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
    _, first = np.unique(pool.rank, return_index=True)
    mu_all = pool.systematic[first]
    b = pool.beta * host_scale
    rest = pool.rest * dev_scale
    if delays is None or not reaches(pool, delays, host_scale, dev_scale):
        return pool.jitter_max(mu_all, n, dev_scale)  # the host delay does not reach it
    mu = mu_all[:n]
    vals, counts = np.unique(mu, return_counts=True)
    if n > len(mu):
        vals = np.append(vals, float(np.median(mu_all)))
        counts = np.append(counts, n - len(mu))
    return expected_max_sum(vals, counts.tolist(), delays, b, rest, n)


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
