"""Sorted delay draws -> a generalized Pareto upper tail, or None where no tail fits them.

The slowest of N ranks at large N is read from the upper tail of one rank's delay, far past the
largest draw, so the tail's form decides the projection. A generalized Pareto (GPD) is the limit
form above a high threshold, but which threshold is "high" depends on the data: a Lomax delay is
Pareto from its bottom (every draw informs the shape; a high threshold throws four fifths of
them away and the shape's error grows with it), while a body of ordinary steps plus rare long
stalls is no GPD above any threshold (a fitted GPD spreads the stalls' mass over a smooth tail
and reads the slowest of 16 ranks 60% low). So the threshold is chosen by testing: at each
candidate, from the lowest, the GPD is fitted (Zhang & Stephens 2009) and its Anderson-Darling
statistic compared with the same statistic on samples drawn from the fit and refitted (a
parametric bootstrap p-value, since the parameters are estimated); ForwardStop (G'Sell et al.
2016, applied to thresholds by Bader, Yan & Zhang 2018) picks the lowest threshold past the run
of early rejections. When every candidate is rejected no tail is extrapolated: the draws alone
(the slowest rank never beyond the largest measured delay, right for stalls of a fixed length).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
T = TypeVar("T")

#: A GPD shape >= 1 has no finite mean; shapes are bounded below it.
MAX_SHAPE = 0.9
MIN_SHAPE = -0.5
#: Fewest exceedances a threshold may leave.
MIN_EXCEEDANCES = 12
#: Candidate thresholds as the share of draws above them, lowest threshold first.
TAIL_SHARES = (0.95, 0.8, 0.6, 0.45, 0.3, 0.2)
#: ForwardStop's false-discovery level, and the parametric bootstrap's size per candidate.
ALPHA = 0.1
_GOF_SAMPLES = 100
#: Draws the tail is fitted on at most: a seeded random subsample beyond (the shape's error
#: from 2,000 draws is a few hundredths; the fit's cost grows with draws x sqrt(draws)).
FIT_DRAWS = 2000
#: Draws the threshold is tested on at most: the Anderson-Darling test rejects a poor fit
#: from a few hundred draws, and its parametric bootstrap refits every candidate 100 times.
GOF_DRAWS = 600
#: Elements of the fit's largest temporary (rows x grid x exceedances) per chunk of rows.
_CHUNK = 2_000_000


@dataclass(frozen=True)
class GPTail:
    """Generalized Pareto tail above ``u`` (seconds) holding the top ``1 - p_u`` of draws."""

    u: float
    p_u: float
    shape: float
    scale: float

    def quantile(self, q: F64) -> F64:
        r = (1.0 - q) / (1.0 - self.p_u)
        if abs(self.shape) < 1e-6:
            return np.asarray(self.u - self.scale * np.log(r), dtype=np.float64)
        return np.asarray(self.u + self.scale * (r ** (-self.shape) - 1.0) / self.shape)

    def survival(self, x: F64) -> F64:
        """P(D > x) for x >= u."""
        z = np.maximum(x - self.u, 0.0) / self.scale
        if abs(self.shape) < 1e-6:
            s = np.exp(-z)
        else:
            s = np.maximum(1.0 + self.shape * z, 0.0) ** (-1.0 / self.shape)
        return np.asarray((1.0 - self.p_u) * s, dtype=np.float64)

    def mean_excess(self, x: float) -> float:
        """E[D - x | D > x] for x >= u (finite for shape < 1)."""
        return max(self.scale + self.shape * max(x - self.u, 0.0), 0.0) / (1.0 - self.shape)


def zhang_stephens(exc: F64) -> tuple[F64, F64]:
    """(shape, scale) of GPD exceedances, one row per sample (rows sorted ascending, >= 0).

    Zhang & Stephens (2009): the posterior mean of ``b = -shape/scale`` over a fixed grid, then
    the shape's profile estimate at it. Nearly unbiased from a few dozen exceedances where
    maximum likelihood scatters and probability-weighted moments read heavy tails too light.
    """
    m = exc.shape[1]
    k = 30 + int(np.sqrt(m))
    rows = max(1, _CHUNK // max(k * m, 1))
    if exc.shape[0] > rows:  # the (rows, k, m) temporary is bounded, not the rows
        parts = [_zhang_stephens(exc[i : i + rows], k) for i in range(0, exc.shape[0], rows)]
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    return _zhang_stephens(exc, k)


def _zhang_stephens(exc: F64, k: int) -> tuple[F64, F64]:
    m = exc.shape[1]
    first = exc[:, max(int(m / 4 + 0.5) - 1, 0)]
    grid = 1.0 - np.sqrt(k / (np.arange(1, k + 1) - 0.5))
    # Exceedances all zero (equal delays) divide by zero here and their rows come out NaN, as
    # they did; numpy's warnings about it reached the user's terminal and said nothing to them.
    with np.errstate(divide="ignore", invalid="ignore"):
        b = grid[None, :] / (3.0 * np.maximum(first, 1e-300))[:, None] + 1.0 / exc[:, -1:]
        # (rows, k, m): the product and its log1p in one buffer (the GOF bootstrap's largest
        # temporary, allocated once instead of twice per chunk)
        t = np.multiply((-b)[:, :, None], exc[:, None, :])
        xi = np.log1p(t, out=t).mean(axis=2)  # (rows, k)
        ll = m * (np.log(-b / xi) - xi - 1.0)
        ll = np.where(np.isfinite(ll), ll, -np.inf)
        w = np.exp(ll - ll.max(axis=1, keepdims=True))
    w /= w.sum(axis=1, keepdims=True)
    b_post = (w * np.where(np.isfinite(b), b, 0.0)).sum(axis=1)
    shape = np.log1p(-b_post[:, None] * exc).mean(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(np.abs(b_post) > 0, -shape / b_post, exc.mean(axis=1))
    return np.clip(shape, MIN_SHAPE, MAX_SHAPE), scale


def anderson_darling(exc: F64, shape: F64, scale: F64) -> F64:
    """A^2 of each sorted row of exceedances against its fitted GPD (large: a poor fit)."""
    k = exc.shape[1]
    z = exc / np.maximum(scale, 1e-300)[:, None]
    sh = shape[:, None]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        tail = np.maximum(1.0 + sh * z, 0.0) ** (-1.0 / np.where(np.abs(sh) < 1e-6, 1.0, sh))
        cdf = np.where(np.abs(sh) < 1e-6, 1.0 - np.exp(-z), 1.0 - tail)
    cdf = np.clip(np.nan_to_num(cdf, nan=1.0), 1e-12, 1.0 - 1e-12)
    i = np.arange(1, k + 1)
    return np.asarray(
        -k - np.mean((2 * i - 1) * (np.log(cdf) + np.log1p(-cdf[:, ::-1])), axis=1),
        dtype=np.float64,
    )


def _gpd_draws(shape: float, scale: float, size: tuple[int, int], seed: int) -> F64:
    u = np.random.default_rng([seed, 7919]).random(size)
    if abs(shape) < 1e-6:
        return np.asarray(-scale * np.log(u), dtype=np.float64)
    return np.asarray(scale * (u ** (-shape) - 1.0) / shape, dtype=np.float64)


def _exceedances(draws: F64, share: float) -> tuple[float, float, F64] | None:
    """(threshold, share of draws at or below it, sorted exceedances) or None if too few."""
    m = len(draws)
    k = max(round(m * share), MIN_EXCEEDANCES)
    if k >= m:
        return None
    u = float(draws[m - k - 1])
    return u, (m - k) / m, draws[m - k :] - u


def _p_value(exc: F64, seed: int) -> tuple[float, float, float]:
    """(shape, scale, Anderson-Darling p-value) of one threshold's exceedances."""
    shape, scale = zhang_stephens(exc[None, :])
    if not (scale[0] > 0 and np.isfinite(scale[0])):
        return float(shape[0]), float(scale[0]), 0.0
    stat = float(anderson_darling(exc[None, :], shape, scale)[0])
    sims = np.sort(_gpd_draws(float(shape[0]), float(scale[0]), (_GOF_SAMPLES, len(exc)), seed))
    s_sh, s_sc = zhang_stephens(sims)
    null = anderson_darling(sims, s_sh, s_sc)
    p = (float(np.sum(null >= stat)) + 1.0) / (_GOF_SAMPLES + 1.0)
    return float(shape[0]), float(scale[0]), p


def forward_stop(p_values: list[float], alpha: float = ALPHA) -> int:
    """Index of the first candidate kept by ForwardStop; ``len(p_values)`` when all rejected.

    Rejects the first ``k`` candidates for the largest ``k`` whose mean of ``-log(1 - p_i)``
    is at most ``alpha``: a run of poor fits at low thresholds is rejected as a whole, one
    unlucky small p-value among good fits is not.
    """
    p = np.clip(np.asarray(p_values, dtype=np.float64), 0.0, 1.0 - 1e-12)
    avg = np.cumsum(-np.log1p(-p)) / np.arange(1, len(p) + 1)
    rejected = np.nonzero(avg <= alpha)[0]
    return int(rejected.max()) + 1 if len(rejected) else 0


@dataclass(frozen=True)
class TailChoice:
    """The chosen tail (None: the draws alone) and the share of draws above its threshold,
    with every candidate's goodness-of-fit p-value (lowest threshold first), and the fits at
    the higher thresholds, which fit as well (a GPD above u is one above any higher u): their
    spread is the threshold choice's share of the model-form uncertainty."""

    tail: GPTail | None
    share: float | None
    p_values: tuple[float, ...]
    alternatives: tuple[GPTail, ...] = ()


def fit_sample(draws: F64, seed: int, size: int = FIT_DRAWS) -> F64:
    """Sorted ``draws``, or a seeded random subsample of ``size`` of them (sorted)."""
    if len(draws) <= size:
        return draws
    rng = np.random.default_rng([seed, 104729, size])
    return np.sort(rng.choice(draws, size=size, replace=False))


def _tail_at(draws: F64, share: float, seed: int) -> GPTail | None:
    """The GPD above ``share`` of ``draws`` (fitted on at most ``FIT_DRAWS``; the share
    below the threshold counted over all draws)."""
    sample = fit_sample(draws, seed)
    got = _exceedances(sample, share)
    if got is None:
        return None
    u, p_u, exc = got
    shape, scale = zhang_stephens(exc[None, :])
    if not (scale[0] > 0 and np.isfinite(scale[0])):
        return None
    if len(sample) < len(draws):
        p_u = float(np.searchsorted(draws, u, side="right")) / len(draws)
    return GPTail(u, p_u, float(shape[0]), float(scale[0]))


def _each(fn: Callable[[F64], T], items: list[F64]) -> list[T]:
    """``fn`` of each item, in order, on up to one thread per usable core: the candidates'
    bootstraps are independent (each seeds its own generator) and numpy's array work, which
    is nearly all of their time, runs outside the GIL, so they overlap where cores are free
    and give the numbers the plain loop gives."""
    workers = min(len(items), _cores())
    if workers < 2:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(max_workers=workers) as pool:  # no thread outlives the call
        return list(pool.map(fn, items))


def _cores() -> int:
    """Cores this process may run on (its affinity where the platform says)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)


def choose_tail(draws: F64, seed: int = 0) -> TailChoice:
    """The GPD tail at the lowest threshold ForwardStop keeps, over sorted ``draws`` (tested
    on at most ``GOF_DRAWS`` of them, fitted on at most ``FIT_DRAWS``)."""
    tested = fit_sample(draws, seed, GOF_DRAWS)
    candidates = [(sh, got[2]) for sh in TAIL_SHARES if (got := _exceedances(tested, sh))]
    shares = [sh for sh, _ in candidates]
    p_values = [p[2] for p in _each(lambda exc: _p_value(exc, seed), [e for _, e in candidates])]
    if not shares:
        return TailChoice(None, None, ())
    pick = forward_stop(p_values)
    tail = _tail_at(draws, shares[pick], seed) if pick < len(shares) else None
    if tail is None:
        return TailChoice(None, None, tuple(p_values))
    others = tuple(t for t in (_tail_at(draws, sh, seed) for sh in shares[pick + 1 :]) if t)
    return TailChoice(tail, shares[pick], tuple(p_values), others)


def refit_tails(rows: F64, share: float) -> list[GPTail | None]:
    """The GPD tail of each sorted row above the same share of its draws (bootstrap refits)."""
    m = rows.shape[1]
    k = max(round(m * share), MIN_EXCEEDANCES)
    if k >= m:
        return [None] * rows.shape[0]
    u = rows[:, m - k - 1]
    exc = rows[:, m - k :] - u[:, None]
    shape, scale = zhang_stephens(exc)
    p_u = (m - k) / m
    return [
        GPTail(float(uu), p_u, float(sh), float(sc)) if sc > 0 and np.isfinite(sc) else None
        for uu, sh, sc in zip(u, shape, scale, strict=True)
    ]
