"""Per-rank host delays pooled over the measured runs -> the expected slowest of N ranks.

A rank's own host delay in a step (data loading, host work beyond its run's median) does not
depend on how many ranks run, but the step waits for the slowest of them: ``E[max of N]``
grows with N, and for a heavy tail it grows like ``N^xi`` far past the largest measured draw.
One run has too few draws to see that tail (8 ranks x 10 steps), so the distribution is fitted
on every run's delays pooled together (each run centred on its own median, in the largest run's
units): its body empirical, its upper tail a generalized Pareto above the lowest threshold where
one fits (``tail_fit``), or no tail at all where none fits (rare stalls of a fixed length). The
shape is poorly known from a few dozen draws and sets ``E[max]`` at large N, so the sample is
bootstrapped (and its tail refitted above the same share of draws), and the interval takes the
resamples whose slowest rank sits at the 5th and 95th percentile. Everything is vectorized:
the projection asks for many N.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tracescale.replay.uncertainty.tail_choice import (
    combined,
    folds,
    grid_max,
    mixture_grid,
    ranked,
    stall_count,
)
from tracescale.replay.uncertainty.tail_fit import FIT_DRAWS, GPTail, choose_tail, refit_tails

F64 = npt.NDArray[np.float64]

#: Pooled draws needed before the upper tail is extrapolated; below this the draws alone.
MIN_POOLED = 60
_BOOT = 200
#: Draws per bootstrap resample: beyond this a resample of the pool is as good as all of it.
_BOOT_DRAWS = FIT_DRAWS
#: Probability grid of a delay's CDF: the body's quantiles, then the tail up to 1 - _TOP / N.
_BODY_POINTS = 128
_TAIL_POINTS = 64
_TOP = 1e-4
_REST_POINTS = 16


@dataclass(frozen=True)
class DelayModel:
    """Pooled per-rank host delays (seconds, sorted) with their fitted upper tail (None: the
    draws alone), and ``resampled`` bootstrap resamples of them (regenerated from ``seed``)
    with their tails refitted above the point fit's ``share`` of draws, for the interval."""

    draws: F64
    tail: GPTail | None
    refits: tuple[GPTail | None, ...] = ()
    seed: int = 0
    resampled: int = 0
    share: float | None = None
    #: Goodness-of-fit p-value of each candidate threshold, lowest first (``tail_fit``).
    p_values: tuple[float, ...] = ()
    #: Tails fitted above the higher thresholds (``TailChoice.alternatives``); without a tail
    #: of its own, the GPD tail that predicted the largest run about as well (``tail_choice``).
    alternatives: tuple[GPTail, ...] = ()
    #: Without a tail: how many of the top draws are stalls of a fixed size (the bounded
    #: mixture, ``tail_choice.mixture_grid``); 0: the draws as they are.
    stalls: int = 0
    #: The bounded mixture's stalls where it predicted the largest run about as well as the
    #: chosen model (an end of the interval).
    rival_stalls: int = 0
    #: The model held-out scoring chose ("gpd", "mixture", "empirical"; "" unscored) and each
    #: candidate's score (``tail_choice.HeldOut.score``).
    chosen: str = ""
    scores: tuple[tuple[str, float], ...] = ()
    #: How the delays scale with the rank's host work: ``delay ~ host_scale ** work_power``
    #: (1: a loader's jitter proportional to its share of the batch; 0: stalls of a fixed
    #: size, whatever N), read from how the measured runs' spreads moved with their host
    #: work (``laws.work_scales.delay_power``).
    work_power: float = 1.0
    #: How many steps one draw sums (a gradient-accumulation cycle's, ``arrivals.accumulation``):
    #: the slowest rank's sum is waited for once per cycle, at its boundary's first collective.
    steps: int = 1

    @functools.cached_property
    def spread(self) -> float:
        """Width of the middle 80% of the draws (``variability.reaches`` asks it per position)."""
        if len(self.draws) == 0:
            return 0.0
        lo, hi = np.quantile(self.draws, [0.1, 0.9])
        return float(hi - lo)

    def with_tail(self, tail: GPTail | None) -> DelayModel:
        if tail is None:  # the draws alone: an end of every interval, one object for them all
            return self._untailed
        return DelayModel(self.draws, tail)

    @functools.cached_property
    def _untailed(self) -> DelayModel:
        return DelayModel(self.draws, None)

    def resample(self, i: int) -> F64:
        """The i-th bootstrap resample (sorted), regenerated from its own seed."""
        return _resample(self.draws, self.seed, i)

    def ends(self, n: int) -> tuple[DelayModel, DelayModel]:
        """:meth:`_ends`, worked out once per ``n`` (each projected N asks it per position, for
        its interval and the levers' replays): the same models back, their grids kept."""
        got = self._ends_memo.get(n)
        if got is None:
            got = self._ends_memo[n] = self._ends(n)
        return got

    @functools.cached_property
    def _ends_memo(self) -> dict[int, tuple[DelayModel, DelayModel]]:
        return {}

    def _ends(self, n: int) -> tuple[DelayModel, DelayModel]:
        """The bootstrap models whose slowest of ``n`` ranks sits at the 5th and 95th
        percentile. With a tail they are ordered by the quantile the maximum typically reaches,
        ``1 - 0.5/n`` (a refit's shape and scale move together, so neither alone orders them);
        without one by the resample's own ``E[max of n]``. Without resamples, the model itself
        at both ends."""
        if not self.resampled:
            return self, self
        p = 1.0 - 0.5 / max(n, 1)
        if self.tail is not None:
            body = float(np.quantile(self.draws, p))
            reach = np.array(
                [
                    float(t.quantile(np.array([p]))[0]) if t is not None and p > t.p_u else body
                    for t in self.refits
                ]
            )
        else:
            boots = self._boots
            reach = np.array([b.grid_max(n) for b in boots])
        if self.tail is not None:
            own = float(self.tail.quantile(np.array([p]))[0]) if p > self.tail.p_u else body
        else:
            own = self.grid_max(n)
        order = np.argsort(reach, kind="stable")
        last = len(order) - 1
        below = float(np.mean(reach < own)) + 0.5 * float(np.mean(reach == own))
        lo_q, hi_q = _bias_corrected(below)
        picks = (int(order[int(lo_q * last)]), int(order[int(np.ceil(hi_q * last))]))
        if self.tail is None:
            lo, hi = boots[picks[0]], boots[picks[1]]
            return self._rivals(lo, hi, n)
        lo, hi = (DelayModel(self.resample(i), self.refits[i]) for i in picks)
        lo_reach, hi_reach = float(reach[picks[0]]), float(reach[picks[1]])
        for alt in self.alternatives:  # the threshold's choice widens the ends
            r = float(alt.quantile(np.array([p]))[0]) if p > alt.p_u else lo_reach
            if r < lo_reach:
                lo, lo_reach = DelayModel(self.draws, alt), r
            if r > hi_reach:
                hi, hi_reach = DelayModel(self.draws, alt), r
        return self._rivals(lo, hi, n)

    @functools.cached_property
    def _boots(self) -> tuple[DelayModel, ...]:
        """The resamples as models (remembered: ``ends`` is asked per N and position)."""
        return tuple(self._boot(i) for i in range(self.resampled))

    @functools.cached_property
    def _mixture(self) -> tuple[F64, F64]:
        return mixture_grid(self.draws, self.stalls)

    def _boot(self, i: int) -> DelayModel:
        """The i-th resample as a model without a tail: the mixture's stalls counted as the
        resample's draws at or above the point's shortest stall (their rate resampled)."""
        res = self.resample(i)
        if not self.stalls:
            return DelayModel(res, None)
        cut = float(self.draws[len(self.draws) - self.stalls])
        k = int(np.sum(res >= cut))
        return DelayModel(res, None, stalls=k if 0 < k < len(res) else 0)

    def _rivals(self, lo: DelayModel, hi: DelayModel, n: int) -> tuple[DelayModel, DelayModel]:
        """The ends widened to the models that predicted the largest run about as well as the
        chosen one (``tail_choice.ranked``): a few dozen held-out draws cannot tell them apart."""
        rivals = (
            [DelayModel(self.draws, None, stalls=self.rival_stalls)] if self.rival_stalls else []
        )
        if self.tail is None:
            rivals += [DelayModel(self.draws, alt) for alt in self.alternatives]
        if not rivals:
            return lo, hi
        lo_max, hi_max = model_max(lo, n), model_max(hi, n)
        for r in rivals:
            v = model_max(r, n)
            if v < lo_max:
                lo, lo_max = r, v
            if v > hi_max:
                hi, hi_max = r, v
        return lo, hi

    def grid_max(self, n: int) -> float:
        """E[max of n] without a tail: of the draws, or of the bounded mixture."""
        if self.stalls:
            return grid_max(*self._mixture, n)
        return empirical_max(self.draws, n)

    def quantile_grid(self, n: int) -> tuple[F64, F64]:
        """(probabilities, delays) tracing the CDF up to ``1 - _TOP / n``."""
        d = self.draws
        m = len(d)
        if self.tail is None and self.stalls:
            return self._mixture
        if self.tail is None:
            q = np.arange(1, m + 1, dtype=np.float64) / m
            return q, d
        body, qb = self._body_grid
        top = 1.0 - _TOP / max(n, 1)
        r = np.geomspace(1.0, (1.0 - top) / (1.0 - self.tail.p_u), _TAIL_POINTS)[1:]
        qt = 1.0 - (1.0 - self.tail.p_u) * r
        return np.concatenate([qb, qt]), np.concatenate([body, self.tail.quantile(qt)])

    @functools.cached_property
    def _body_grid(self) -> tuple[F64, F64]:
        """The body's delays and probabilities on the grid (the same at every ``n``)."""
        assert self.tail is not None
        body = self.draws[self.draws <= self.tail.u]
        if len(body) > _BODY_POINTS:
            body = np.quantile(body, np.linspace(0.0, 1.0, _BODY_POINTS))
        return body, np.linspace(0.0, self.tail.p_u, len(body) + 1)[1:]

    def mean(self) -> float:
        t = self.tail
        if t is None and self.stalls:
            q, x = self._mixture
            return float(np.dot(np.diff(np.concatenate([[0.0], q])), x))
        if t is None:
            return float(np.mean(self.draws))
        body = self.draws[self.draws <= t.u]
        body_mean = float(np.mean(body)) if len(body) else t.u
        return t.p_u * body_mean + (1 - t.p_u) * (t.u + t.scale / (1 - t.shape))


def _resample(draws: F64, seed: int, i: int) -> F64:
    size = min(len(draws), _BOOT_DRAWS)
    return np.sort(np.random.default_rng([seed, i]).choice(draws, size=size, replace=True))


def _bias_corrected(below: float) -> tuple[float, float]:
    """The 5th and 95th percentiles to read from a bootstrap whose share ``below`` of resamples
    fall under the point estimate (Efron's bias-corrected percentile interval): resamples of a
    heavy-tailed sample repeat its draws and lose its extremes, so they sit below the point
    more often than half the time and the plain percentiles would fall short on the high side.
    """
    from statistics import NormalDist

    unit = NormalDist()
    z0 = unit.inv_cdf(min(max(below, 0.01), 0.99))
    z = unit.inv_cdf(0.95)
    return unit.cdf(2 * z0 - z), unit.cdf(2 * z0 + z)


def sorted_quantile(x: F64, p: F64) -> F64:
    """``np.quantile(x, p)`` (its default, linear method) of an already sorted ``x``: the same
    interpolation between neighbouring order statistics, without the sort and the general
    function's checks, which cost more than the interpolation on the few hundred draws the
    slowest-rank grid reads (it is asked a few hundred times per projection)."""
    out: F64 = np.interp(np.asarray(p, dtype=np.float64) * (len(x) - 1), np.arange(len(x)), x)
    return out


def empirical_max(draws: F64, n: int) -> float:
    """E[max of n] of independent draws from sorted ``draws`` (their empirical distribution)."""
    m = len(draws)
    if m == 0:
        return 0.0
    c = np.arange(m + 1, dtype=np.float64) / m
    return float(np.sum(draws * np.diff(c**n)))


def pool_delays(per_run: Sequence[F64], seed: int = 0) -> DelayModel | None:
    """One model from every run's centred delays (None without draws): the tail model that,
    fitted on the smaller runs, best predicts the largest run's slowest ranks (``tail_choice``),
    refitted on every draw; without a largest run to score on, the GPD where one fits."""
    parts = [np.asarray(d, dtype=np.float64) for d in per_run]
    draws = np.sort(np.concatenate(parts)) if parts else np.zeros(0)
    draws = draws[np.isfinite(draws)]
    if len(draws) == 0:
        return None
    if len(draws) < MIN_POOLED:
        return DelayModel(draws, None)
    choice = choose_tail(draws, seed)
    stalls = stall_count(draws)
    scores = _scores(parts, seed, stalls > 0)
    gpd = choice.tail if choice.share is not None else None
    if gpd is not None and "gpd" not in scores:  # too few smaller-run draws to fit one: unscored
        scores = {}
    best, rivals = ranked(scores) if scores else ("", ())
    if gpd is None or best in ("mixture", "empirical"):
        alt = (gpd,) if gpd is not None and "gpd" in rivals else ()
        return DelayModel(
            draws, None, (), seed, _BOOT, None, choice.p_values, alt,
            stalls=stalls if best == "mixture" else 0,
            rival_stalls=stalls if best != "mixture" and "mixture" in rivals else 0,
            chosen=best, scores=tuple(sorted(scores.items())),
        )  # fmt: skip
    rival = stalls if "mixture" in rivals else 0
    scored = tuple(sorted(scores.items()))
    boot = np.stack([_resample(draws, seed, i) for i in range(_BOOT)])
    fits = refit_tails(boot, choice.share or 0.0)
    if sum(t is not None for t in fits) < _BOOT // 2:
        return DelayModel(
            draws, gpd, p_values=choice.p_values, rival_stalls=rival, chosen=best, scores=scored
        )
    # a failed refit keeps the point tail (its resample index must stay aligned)
    refits = tuple(t if t is not None else gpd for t in fits)
    return DelayModel(
        draws, gpd, refits, seed, _BOOT, choice.share, choice.p_values, choice.alternatives,
        rival_stalls=rival, chosen=best, scores=scored,
    )  # fmt: skip


def _scores(parts: Sequence[F64], seed: int, stalled: bool) -> dict[str, float]:
    """Each candidate's error predicting a held-out run's slowest-of-k from the other runs'
    draws (``tail_choice.folds``: each run held out in turn); empty when there are too few to
    fit or to score."""
    per_fold = []
    for rest, held in folds(parts):
        # "gpd" is the shape's choice: the GPD where one fits, else the draws alone. The draws
        # alone do not compete with a fitted GPD: scored at k <= 16 they predict as well as a
        # power tail and say nothing past the largest draw, where Lomax delays go on.
        models = {"empirical": DelayModel(rest, None)}
        if len(rest) >= MIN_POOLED:
            models = {"gpd": DelayModel(rest, choose_tail(rest, seed).tail)}
        k = stall_count(rest)
        if stalled and k:
            models["mixture"] = DelayModel(rest, None, stalls=k)
        scores = {
            name: held.score([model_max(m, k) for k in held.ks]) for name, m in models.items()
        }
        per_fold.append((scores, len(held.draws)))
    return combined(per_fold)


def model_max(model: DelayModel, n: int) -> float:
    """E[max of n] of one rank's delay alone (no offsets, no device jitter)."""
    return expected_max_sum(np.zeros(1), [n], model, 1.0, np.zeros(1), n)


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
        r_all = sorted_quantile(r_all, (np.arange(_REST_POINTS) + 0.5) / _REST_POINTS)
    shifts = sorted_quantile(r_all, np.linspace(0.0, 1.0, 5)) if len(r_all) > 5 else r_all
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
