"""Rank-to-rank variability: how late the slowest of N ranks arrives at each collective.

Measured per collective instance: every rank's arrival offset (arrival minus the mean
arrival, clock skew removed because instances end together on all ranks). Each offset is
split into the part explained by the rank's own host delay in that step (data loading and
host work beyond the step's mean: it scales like the host gaps) and the rest (jitter of the
rank's device work: it scales like the kernels). A rank late at every step (rank 0 reducing, a
slow GPU) is systematic: it stays one late rank at any N and keeps its lateness (rank 0's
reduction does not shrink; a slow rank chosen as the representative carries its own work);
only the random part is drawn anew for each of N ranks. ``E[max over N ranks]`` is exact over
the empirical distribution.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

from tracescale.classify.result import RunBreakdown

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


#: Samples needed before the upper tail is extrapolated by a generalized Pareto fit.
TAIL_MIN_SAMPLES = 100
_TAIL_QUANTILE = 0.8
_TAIL_MIN_EXCEEDANCES = 20
#: The point fit's shape is capped here: one extreme draw in a few hundred yields larger shapes
#: that would dominate E[max] at large N. The bootstrap refits that set the interval are only
#: bounded below 1 (a GPD shape >= 1 has no finite mean).
_MAX_SHAPE = 0.3
_MAX_BOOT_SHAPE = 0.9
#: Bootstrap refits of the tail: the shape sets E[max of N] ~ N^shape, so its uncertainty
#: dominates the interval of the slowest rank at large N.
_TAIL_BOOT = 100


@dataclass(frozen=True)
class Tail:
    """Generalized Pareto tail above the ``_TAIL_QUANTILE`` of a pool's random part, in units
    of that part's standard deviation (so it can be rescaled with the work behind it).
    ``boot``: (shape, scale) refitted on bootstrap resamples of the pool."""

    shape: float
    scale: float  # / std
    boot: tuple[tuple[float, float], ...] = ()

    def refits(self) -> list[Tail]:
        """The bootstrap refits as tails of their own."""
        return [Tail(sh, sc) for sh, sc in self.boot]


def _gpd(z: F64, max_shape: float = _MAX_SHAPE) -> tuple[float, float] | None:
    """(shape, scale) of the exceedances of ``z`` over its ``_TAIL_QUANTILE``."""
    from scipy.stats import genpareto

    u = float(np.quantile(z, _TAIL_QUANTILE))
    exc = z[z > u] - u
    if len(exc) < _TAIL_MIN_EXCEEDANCES or float(exc.max()) <= 0:
        return None
    shape, _, scale = genpareto.fit(exc, floc=0.0)
    if not (np.isfinite(shape) and np.isfinite(scale)) or scale <= 0:
        return None
    return float(min(max(shape, -0.5), max_shape)), float(scale)


def fit_tail(eps: F64, boot: int = _TAIL_BOOT, seed: int = 0) -> Tail | None:
    """The upper tail of ``eps`` (None with too few samples): E[max of N] for N beyond the
    number of samples needs draws larger than any measured one. With ``boot`` > 0 the sample
    is resampled and refitted for the spread of the shape."""
    sd = float(np.std(eps))
    if len(eps) < TAIL_MIN_SAMPLES or sd <= 0:
        return None
    z = np.asarray(eps, dtype=np.float64) / sd
    point = _gpd(z)
    if point is None:
        return None
    if boot <= 0:
        return Tail(*point)
    rng = np.random.default_rng(seed)
    fits = []
    for _ in range(boot):
        got = _gpd(rng.choice(z, size=len(z), replace=True), _MAX_BOOT_SHAPE)
        if got is not None:
            fits.append(got)
    if len(fits) < boot // 2:
        return Tail(*point)
    return Tail(point[0], point[1], tuple(fits))


def _cdf_points(e: F64, tail: Tail | None, n: int) -> tuple[F64, F64]:
    """(support points, CDF) of the random part: empirical, with a GPD tail when given."""
    m = len(e)
    cdf = np.arange(1, m + 1, dtype=np.float64) / m
    if tail is None:
        return e, cdf
    sd = float(np.std(e))
    u = float(np.quantile(e, _TAIL_QUANTILE))
    keep = e <= u
    p_u = float(keep.mean())
    top = 1.0 - 1e-3 / max(n, 1)  # the tail beyond this quantile adds nothing visible
    q = np.linspace(p_u, top, 400)[1:]
    r = (1.0 - q) / (1.0 - p_u)
    y = -np.log(r) if abs(tail.shape) < 1e-06 else (r ** (-tail.shape) - 1.0) / tail.shape
    x_tail = u + tail.scale * sd * y
    return np.concatenate([e[keep], x_tail]), np.concatenate([cdf[keep], q])


def expected_max(offsets: F64, rank: I64, n: int, tail: Tail | None = None) -> float:
    """E[max over n ranks of (systematic offset + a random draw)].

    The measured ranks keep their systematic offsets (in rank order); ranks beyond them get
    the median one. The maximum's CDF is the product of the ranks' CDFs on the support points;
    with ``tail`` the random part's upper tail is the fitted generalized Pareto one.
    """
    mu_all, eps = split_systematic(offsets, rank)
    return expected_max_of(mu_all, eps, n, tail)


def expected_max_of(mu_all: F64, eps: F64, n: int, tail: Tail | None = None) -> float:
    """E[max over n ranks of (systematic offset ``mu_all`` in rank order + a draw of ``eps``)]."""
    if len(eps) == 0 or n < 1:
        return 0.0
    mu = mu_all[:n]
    extra = n - len(mu)
    vals, counts = np.unique(mu, return_counts=True)
    if extra > 0:
        vals = np.append(vals, float(np.median(mu_all)))
        counts = np.append(counts, extra)
    e = np.sort(eps)
    sx, sf = _cdf_points(e, tail, n)
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
    c["end"] = c["start"] + c["duration"]
    key = ["collective", "seq"]
    ref = c[c["rank"] == rank].set_index(key)["end"]
    skew = {}
    for r, grp in c.groupby("rank"):
        j = grp.set_index(key)["end"].to_frame().join(ref.rename("ref"), how="inner")
        skew[r] = float(np.median(j["end"] - j["ref"])) if len(j) else 0.0
    c["arrival"] = c["start"] - c["rank"].map(skew)
    c["offset"] = c["arrival"] - c.groupby(key)["arrival"].transform("mean")
    ordered = c.sort_values(["rank", "step", "start"])
    c["position"] = ordered.groupby(["rank", "step"]).cumcount().reindex(c.index)
    st = run.steps
    own = st["dataloader"] - st["caused_dataloader"] + st["host"]
    delay = pd.Series(own.to_numpy(), index=pd.MultiIndex.from_frame(st[["rank", "step"]]))
    delay = delay[~delay.index.duplicated()]
    delay = delay - delay.groupby(level="step").transform("mean")
    c["delay"] = delay.reindex(pd.MultiIndex.from_frame(c[["rank", "step"]])).fillna(0.0).to_numpy()
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
        pools[int(k)] = OffsetPool(r, systematic, host, rand - host, beta)
    return c, pools
