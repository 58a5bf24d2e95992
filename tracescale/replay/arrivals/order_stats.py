"""E[max over n ranks] of a systematic offset per rank plus a random draw: the slowest rank's
arrival where no host delay is drawn (device jitter alone), and the split of measured offsets
into what stays with a rank at every step and what is drawn anew."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


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
