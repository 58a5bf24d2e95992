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

    def offsets(self, host_scale: float, dev_scale: float) -> F64:
        out = self.systematic + self.host * host_scale + self.rest * dev_scale
        return np.asarray(out, dtype=np.float64)


def _split(offsets: F64, rank: I64) -> tuple[F64, F64]:
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
    mu_all, eps = _split(offsets, rank)
    if len(eps) == 0 or n < 1:
        return 0.0
    mu = mu_all[:n]
    extra = n - len(mu)
    vals, counts = np.unique(mu, return_counts=True)
    if extra > 0:
        vals = np.append(vals, float(np.median(mu_all)))
        counts = np.append(counts, extra)
    e = np.sort(eps)
    x = np.unique((vals[:, None] + e[None, :]).ravel())
    log_f = np.zeros(len(x))
    m = len(e)
    for v, k in zip(vals.tolist(), counts.tolist(), strict=True):
        f = np.searchsorted(e, x - v, side="right") / m
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
        mu, _ = _split(o, r)
        _, inv = np.unique(r, return_inverse=True)
        systematic = mu[inv] if np.any(mu) else np.zeros(len(o))
        rand = o - systematic
        d = g["delay"].to_numpy(dtype=np.float64)
        d = d - np.bincount(inv, weights=d)[inv] / np.bincount(inv)[inv] if np.any(mu) else d
        denom = float(np.dot(d, d))
        beta = min(max(float(np.dot(d, rand)) / denom, 0.0), 1.0) if denom > 0 else 0.0
        host = beta * d
        pools[int(k)] = OffsetPool(r, systematic, host, rand - host)
    return c, pools
