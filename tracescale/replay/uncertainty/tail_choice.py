"""Per-run delay draws -> which tail model to extrapolate, chosen by predicting held-out data.

The slowest of N ranks at large N is read far past the largest draw, so the tail's form decides
the projection, and a form chosen by shape alone can be badly wrong: a body of ordinary steps
plus rare stalls of a fixed length passes a generalized Pareto goodness-of-fit test often
enough (the stalls and the body's upper end blend into one smooth-looking tail), and then the
stalls are extrapolated as an unbounded power law (a stall mixture projected 24-49% slow at
2x-8x). So the candidates (the pooled draws resampled as they are; the GPD tail; a bounded
mixture: the body plus stalls of one size at their measured rate) are each fitted on all runs
but one and scored on how well they predict the held-out run's draws, each run held out in
turn: the expected slowest of k of its draws (unbiased from the held-out draws, k = 2..16), the
quantity the projection extrapolates ("gpd" is the shape's choice: the GPD where one fits, else
the draws alone). The best predictor is kept; the others that predict about as well (within
twice its error) stay as ends of the interval: a few dozen held-out draws cannot tell them
apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]

#: Stalls are at most this share of draws (rarer than this they are a tail, not the body).
MAX_STALL_SHARE = 0.2
#: Fewest stalls a mixture needs (one long draw is no fixed size).
MIN_STALLS = 2
#: The gap below the stalls is at least this many times the body's middle-80% width and
#: at least the stalls' own range (stalls of a fixed size cluster apart from the body).
GAP_OVER_BODY = 3.0
#: Slowest-of-k sizes scored on the held-out run (each at most a quarter of its draws).
SCORE_K = (2, 4, 8, 16)
#: A rival predicting within this factor of the best's error stays in the interval.
RIVAL_FACTOR = 2.0


def stall_count(draws: F64) -> int:
    """How many of the top sorted ``draws`` are stalls of a fixed size (0: no such cluster).

    The largest gap between consecutive draws in the top ``MAX_STALL_SHARE`` splits off the
    stalls when it is wide against the body (``GAP_OVER_BODY`` times its middle-80% width)
    and against the stalls' own range: a power tail's top draws spread out (each gap wider
    than the last), a fixed stall's cluster together.
    """
    m = len(draws)
    top = int(m * MAX_STALL_SHARE)
    if top < MIN_STALLS or m < 10:
        return 0
    gaps = np.diff(draws[m - top - 1 :])  # gaps[j]: below draws[m - top + j]
    j = np.arange(len(gaps) - MIN_STALLS + 1)
    k = top - j  # draws at and above draws[m - top + j]
    # the body draws[: m - k]'s 10th and 90th percentiles (numpy's linear rule on sorted
    # draws), for every split at once: a loop of np.quantile was quadratic in the draws
    n_body = m - k
    width = _sorted_quantile(draws, n_body, 0.9) - _sorted_quantile(draws, n_body, 0.1)
    own = draws[-1] - draws[m - k]
    g = gaps[j]
    ok = (g > GAP_OVER_BODY * np.maximum(width, 1e-12)) & (g > own)
    if not ok.any():
        return 0
    # the widest qualifying gap (the first of equal ones, as a scan keeping only wider ones)
    best = int(np.flatnonzero(ok)[np.argmax(g[ok])])
    return int(k[best])


def _sorted_quantile(draws: F64, n: npt.NDArray[np.int64], q: float) -> F64:
    """The ``q`` quantile of each prefix ``draws[:n]`` of sorted draws (numpy's default,
    linear interpolation between order statistics)."""
    pos = q * (n - 1).astype(np.float64)
    below = np.floor(pos).astype(np.int64)
    above = np.minimum(below + 1, n - 1)
    frac = pos - below
    out: F64 = draws[below] + frac * (draws[above] - draws[below])
    return out


def mixture_grid(draws: F64, stalls: int) -> tuple[F64, F64]:
    """(cumulative probabilities, sorted delays) of the bounded mixture: a body draw, plus with
    the stalls' measured rate one stall's size (the stalls' median over the body's)."""
    m = len(draws)
    body = draws[: m - stalls]
    size = float(np.median(draws[m - stalls :]) - np.median(body))
    rate = stalls / m
    x = np.concatenate([body, body + size])
    w = np.concatenate(
        [np.full(len(body), (1 - rate) / len(body)), np.full(len(body), rate / len(body))]
    )
    order = np.argsort(x, kind="stable")
    return np.cumsum(w[order]), x[order]


def grid_max(q: F64, x: F64, n: int) -> float:
    """E[max of n] of a discrete distribution with cumulative probabilities ``q`` at ``x``."""
    if len(x) == 0:
        return 0.0
    c = np.concatenate([[0.0], np.minimum(q, 1.0)])
    c[-1] = 1.0
    return float(np.sum(x * np.diff(c**n)))


def held_out_max(draws: F64, k: int) -> float:
    """Unbiased E[max of k] from sorted ``draws``: the mean over all k-subsets of their
    largest (the i-th smallest is the largest of C(i-1, k-1) of the C(m, k) subsets).

    The binomials come from a table of log factorials, not ``scipy.special.gammaln``: an
    analyze that never needs scipy does not pay its import (half a second)."""
    m = len(draws)
    if m == 0 or k < 1 or k > m:  # no k-subset: no weight on any draw
        return 0.0
    lf = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, m + 1, dtype=np.float64)))])
    i = np.arange(k, m + 1)  # the i-th smallest, i >= k: log C(i-1, k-1) - log C(m, k)
    logw = lf[i - 1] - lf[k - 1] - lf[i - k] - (lf[m] - lf[k] - lf[m - k])
    return float(np.dot(np.exp(logw), draws[k - 1 :]))


@dataclass(frozen=True)
class HeldOut:
    """The largest run's draws and the slowest-of-k sizes they are scored at."""

    draws: F64
    ks: tuple[int, ...]

    @staticmethod
    def of(per_run: Sequence[F64]) -> tuple[F64, HeldOut] | None:
        """(the smaller runs' draws pooled and sorted, the largest run's) or None when either
        is too few to fit or to score."""
        if len(per_run) < 2:
            return None
        last = np.sort(np.asarray(per_run[-1], dtype=np.float64))
        last = last[np.isfinite(last)]
        rest = np.sort(np.concatenate([np.asarray(p, dtype=np.float64) for p in per_run[:-1]]))
        rest = rest[np.isfinite(rest)]
        ks = tuple(k for k in SCORE_K if 4 * k <= len(last))
        if len(rest) < 20 or not ks:
            return None
        return rest, HeldOut(last, ks)

    def score(self, predict: Sequence[float]) -> float:
        """Mean squared error of the predicted slowest-of-k against the held-out one, in units
        of the held-out draws' middle-80% width."""
        lo, hi = np.quantile(self.draws, [0.1, 0.9])
        unit = max(float(hi - lo), 1e-12)
        obs = np.array([held_out_max(self.draws, k) for k in self.ks])
        return float(np.mean(((np.asarray(predict) - obs) / unit) ** 2))


def folds(per_run: Sequence[F64]) -> list[tuple[F64, HeldOut]]:
    """Each run held out in turn (the others pooled to fit on), where both are enough: rare
    stalls may all fall in the largest run, and only the folds that fit on it can see them."""
    out = []
    for j in range(len(per_run)):
        got = HeldOut.of([*per_run[:j], *per_run[j + 1 :], per_run[j]])
        if got is not None:
            out.append(got)
    return out


def combined(per_fold: Sequence[tuple[dict[str, float], int]]) -> dict[str, float]:
    """Each candidate's score over the folds where every candidate was fitted, weighted by the
    held-out draws: the largest run's fold's candidates, and the mixture where any fold could
    fit one (a candidate fitted in fewer folds is compared on those alone)."""
    if not per_fold:
        return {}
    names = set(per_fold[-1][0]) | {k for sc, _ in per_fold for k in sc if k == "mixture"}
    common = [(sc, w) for sc, w in per_fold if all(k in sc for k in names)]
    if not common:  # no fold fits every candidate: the largest run's fold alone
        return dict(per_fold[-1][0])
    total = float(sum(w for _, w in common))
    return {k: float(sum(sc[k] * w for sc, w in common)) / total for k in names}


def ranked(scores: dict[str, float]) -> tuple[str, tuple[str, ...]]:
    """(the best-scoring model, the others within ``RIVAL_FACTOR`` of its error)."""
    best = min(scores, key=lambda k: (scores[k], k))
    bound = RIVAL_FACTOR * scores[best] + 1e-9
    return best, tuple(k for k in sorted(scores) if k != best and scores[k] <= bound)
