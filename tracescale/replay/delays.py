"""Per-rank host delays pooled over the measured runs -> the expected slowest of N ranks.

A rank's own host delay in a step (data loading, host work beyond its run's median) does not
depend on how many ranks run, but the step waits for the slowest of them: ``E[max of N]``
grows with N, and for a heavy tail it grows like ``N^xi`` far past the largest measured draw.
One run has too few draws to see that tail (8 ranks x 10 steps), so the distribution is fitted
on every run's delays pooled together (each run centred on its own median, in the largest run's
units): its body empirical, its upper tail a generalized Pareto fitted by probability-weighted
moments (Hosking & Wallis 1987: steadier than maximum likelihood on a few dozen exceedances).
The shape is poorly known from a few dozen exceedances and sets ``E[max]`` at large N, so the
sample is bootstrapped and refitted, and the interval takes the refits at the 5th and 95th
percentile of the shape. Everything is vectorized: the projection asks for many N.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]

#: Pooled draws needed before the upper tail is extrapolated; below this the draws alone.
MIN_POOLED = 60
_TAIL_QUANTILE = 0.8
_MIN_EXCEEDANCES = 12
#: A GPD shape >= 1 has no finite mean; shapes are bounded below it.
_MAX_SHAPE = 0.9
_MIN_SHAPE = -0.5
_BOOT = 200
#: Draws per bootstrap resample: beyond this a resample of the pool is as good as all of it.
_BOOT_DRAWS = 4000
#: Probability grid of a delay's CDF: the body's quantiles, then the tail up to 1 - _TOP / N.
_BODY_POINTS = 128
_TAIL_POINTS = 64
_TOP = 1e-4
_REST_POINTS = 16


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


def _zhang_stephens(exc: F64) -> tuple[F64, F64]:
    """(shape, scale) of GPD exceedances, one row per sample (rows sorted ascending, > 0).

    Zhang & Stephens (2009): the posterior mean of ``b = -shape/scale`` over a fixed grid, then
    the shape's profile estimate at it. Nearly unbiased from a few dozen exceedances where
    maximum likelihood scatters and probability-weighted moments read heavy tails too light.
    """
    m = exc.shape[1]
    k = 30 + int(np.sqrt(m))
    first = exc[:, max(int(m / 4 + 0.5) - 1, 0)]
    grid = 1.0 - np.sqrt(k / (np.arange(1, k + 1) - 0.5))
    b = grid[None, :] / (3.0 * np.maximum(first, 1e-300))[:, None] + 1.0 / exc[:, -1:]
    with np.errstate(divide="ignore", invalid="ignore"):
        xi = np.log1p(-b[:, :, None] * exc[:, None, :]).mean(axis=2)  # (rows, k)
        ll = m * (np.log(-b / xi) - xi - 1.0)
    ll = np.where(np.isfinite(ll), ll, -np.inf)
    w = np.exp(ll - ll.max(axis=1, keepdims=True))
    w /= w.sum(axis=1, keepdims=True)
    b_post = (w * np.where(np.isfinite(b), b, 0.0)).sum(axis=1)
    shape = np.log1p(-b_post[:, None] * exc).mean(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(np.abs(b_post) > 0, -shape / b_post, exc.mean(axis=1))
    return np.clip(shape, _MIN_SHAPE, _MAX_SHAPE), scale


def _tails(rows: F64) -> list[GPTail | None]:
    """The tail of each sorted row of draws above its ``_TAIL_QUANTILE``."""
    m = rows.shape[1]
    k = max(round(m * (1.0 - _TAIL_QUANTILE)), _MIN_EXCEEDANCES)
    if m < MIN_POOLED or k >= m:
        return [None] * rows.shape[0]
    u = rows[:, m - k - 1]
    exc = rows[:, m - k :] - u[:, None]
    shape, scale = _zhang_stephens(exc)
    p_u = (m - k) / m
    return [
        GPTail(float(uu), p_u, float(sh), float(sc)) if sc > 0 and np.isfinite(sc) else None
        for uu, sh, sc in zip(u, shape, scale, strict=True)
    ]


@dataclass(frozen=True)
class DelayModel:
    """Pooled per-rank host delays (seconds, sorted) with their fitted upper tail, and the
    tails refitted on bootstrap resamples of them (for the interval)."""

    draws: F64
    tail: GPTail | None
    refits: tuple[GPTail, ...] = ()
    seed: int = 0

    def with_tail(self, tail: GPTail | None) -> DelayModel:
        return DelayModel(self.draws, tail)

    def resample(self, i: int) -> F64:
        """The i-th bootstrap resample (sorted), regenerated from its own seed."""
        return _resample(self.draws, self.seed, i)

    def ends(self, n: int) -> tuple[DelayModel, DelayModel]:
        """The bootstrap models (resampled draws and their refitted tail) whose slowest of
        ``n`` ranks sits at the 5th and 95th percentile, read from the quantile the maximum
        typically reaches, ``1 - 0.5/n`` (a refit's shape and scale move together, so neither
        alone orders them). Without refits, the model itself at both ends."""
        if not self.refits:
            return self, self
        p = 1.0 - 0.5 / max(n, 1)
        body = float(np.quantile(self.draws, p))
        reach = np.array(
            [float(t.quantile(np.array([p]))[0]) if p > t.p_u else body for t in self.refits]
        )
        order = np.argsort(reach, kind="stable")
        last = len(order) - 1
        picks = (int(order[int(0.05 * last)]), int(order[int(np.ceil(0.95 * last))]))
        lo, hi = (DelayModel(self.resample(i), self.refits[i]) for i in picks)
        return lo, hi

    def quantile_grid(self, n: int) -> tuple[F64, F64]:
        """(probabilities, delays) tracing the CDF up to ``1 - _TOP / n``."""
        d = self.draws
        m = len(d)
        if self.tail is None:
            q = np.arange(1, m + 1, dtype=np.float64) / m
            return q, d
        body = d[d <= self.tail.u]
        if len(body) > _BODY_POINTS:
            body = np.quantile(body, np.linspace(0.0, 1.0, _BODY_POINTS))
        qb = np.linspace(0.0, self.tail.p_u, len(body) + 1)[1:]
        top = 1.0 - _TOP / max(n, 1)
        r = np.geomspace(1.0, (1.0 - top) / (1.0 - self.tail.p_u), _TAIL_POINTS)[1:]
        qt = 1.0 - (1.0 - self.tail.p_u) * r
        return np.concatenate([qb, qt]), np.concatenate([body, self.tail.quantile(qt)])

    def mean(self) -> float:
        t = self.tail
        if t is None:
            return float(np.mean(self.draws))
        body = self.draws[self.draws <= t.u]
        body_mean = float(np.mean(body)) if len(body) else t.u
        return t.p_u * body_mean + (1 - t.p_u) * (t.u + t.scale / (1 - t.shape))


def _resample(draws: F64, seed: int, i: int) -> F64:
    size = min(len(draws), _BOOT_DRAWS)
    return np.sort(np.random.default_rng([seed, i]).choice(draws, size=size, replace=True))


def pool_delays(per_run: Sequence[F64], seed: int = 0) -> DelayModel | None:
    """One model from every run's centred delays (None without draws)."""
    parts = [np.asarray(d, dtype=np.float64) for d in per_run]
    draws = np.sort(np.concatenate(parts)) if parts else np.zeros(0)
    draws = draws[np.isfinite(draws)]
    if len(draws) == 0:
        return None
    point = _tails(draws[None, :])[0]
    if point is None:
        return DelayModel(draws, None)
    boot = np.stack([_resample(draws, seed, i) for i in range(_BOOT)])
    fits = _tails(boot)
    if sum(t is not None for t in fits) < _BOOT // 2:
        return DelayModel(draws, point)
    # a failed refit keeps the point tail (its resample index must stay aligned)
    refits = tuple(t if t is not None else point for t in fits)
    return DelayModel(draws, point, refits, seed)


def expected_max_sum(
    mu: F64, counts: Sequence[int], model: DelayModel, b: float, rest: F64, n: int
) -> float:
    """E[max over ranks of (mu_v + b * D + R)], ``counts[v]`` ranks at offset ``mu_v``.

    D from ``model`` (b > 0), R an independent draw of ``rest`` (equal weights). The CDF of the
    sum is tabulated on a grid (the delay's quantiles shifted by the rest's), the maximum's CDF
    is the product over ranks, and the mass beyond the grid's top is added from the tail's mean
    excess (for a heavy tail it is not small).
    """
    q, xd = model.quantile_grid(n)
    r_all = np.sort(np.asarray(rest, dtype=np.float64))
    if len(r_all) == 0:
        r_all = np.zeros(1)
    if len(r_all) > _REST_POINTS:
        r_all = np.quantile(r_all, (np.arange(_REST_POINTS) + 0.5) / _REST_POINTS)
    shifts = np.quantile(r_all, np.linspace(0.0, 1.0, 5)) if len(r_all) > 5 else r_all
    x = np.unique((b * xd[:, None] + shifts[None, :]).ravel())
    qd = np.concatenate([[0.0], q])
    xq = np.concatenate([[xd[0] - 1e-12], xd])
    y = (x[:, None] - r_all[None, :]) / b
    f = np.interp(y, xq, qd, left=0.0, right=1.0)
    if model.tail is not None:  # beyond the grid's top: the tail's own CDF
        far = y > xd[-1]
        f[far] = 1.0 - model.tail.survival(y[far])
    fx = f.mean(axis=1)
    vals = np.asarray(mu, dtype=np.float64)
    grid = np.unique((vals[:, None] + x[None, :]).ravel())
    log_f = np.zeros(len(grid))
    with np.errstate(divide="ignore"):
        for v, k in zip(vals.tolist(), counts, strict=True):
            log_f += k * np.log(np.interp(grid - v, x, fx, left=0.0, right=float(fx[-1])))
    surv = 1.0 - np.exp(log_f)
    # E[max] = lo + integral of P(max > x) from lo (where the max's CDF is 0) to the top
    e = float(grid[0] + np.sum(0.5 * (surv[:-1] + surv[1:]) * np.diff(grid)))
    if model.tail is not None:  # beyond the top: sum over ranks of P(bD > z) * mean excess
        z = (grid[-1] - float(np.median(vals)) - float(np.median(r_all))) / b
        over = float(model.tail.survival(np.array([z]))[0])
        e += float(sum(counts)) * over * b * model.tail.mean_excess(z)
    return e
