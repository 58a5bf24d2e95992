"""One key's collective rows (bytes, group size, measured transfer) -> its alpha-beta link with
the ends of alpha's plausible range, for ``replay.links.links``.

The latency is an intercept: with one group size it is read from messages whose transfers it
is a few % of, so per-instance noise leaves it uncertain by a large share of its value, and
with one (latency, bytes) mix it cannot be told from beta at all. The ends keep what the rows
cannot decide inside the projections' intervals, and the note states it.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from tracescale.scaling.comm import factors
from tracescale.scaling.nnls import nnls
from tracescale.scaling.quantiles import student_t95


def algo_family(label: str) -> str:
    """ring or tree from an algorithm/protocol label (RING_LL, TREE_SIMPLE, ...)."""
    return "tree" if label.upper().startswith("TREE") else "ring"


@dataclass(frozen=True)
class AlphaBeta:
    alpha_s: float
    inv_bw: float  # seconds per byte
    source: str  # the key it was fitted on, or "default"/"user"
    #: The ends of alpha's plausible range, (alpha, inv_bw) with beta refitted to the rows, for
    #: the intervals: ``alt`` the higher latency, ``low`` the lower; None where it is the
    #: point. Where alpha is barely told from beta (one message mix, or one group size whose
    #: latency is a few % of each transfer) they reach far.
    alt: tuple[float, float] | None = None
    low: tuple[float, float] | None = None
    #: alpha's standard error from the rows' scatter; None where the rows give none (one
    #: message mix, collinear factors, too few rows): such a latency was assumed, not measured.
    alpha_se: float | None = None

    def weak(self) -> bool:
        """True when the rows barely tell the latency from the bandwidth: its 90% range spans
        more than ``WEAK_RANGE``x or reaches 0."""
        lo, hi = self.at(-1)[0], self.at(1)[0]
        return hi > 0 and (lo <= 0 or hi / lo > WEAK_RANGE)

    def at(self, end: int) -> tuple[float, float]:
        """(alpha, inv_bw) at the low (-1) or high (+1) end of the range, else the point."""
        got = self.low if end < 0 else self.alt if end > 0 else None
        return got if got is not None else (self.alpha_s, self.inv_bw)

    def time(self, ctype: str, nbytes: float, group: float, algo: str, end: int = 0) -> float:
        if group <= 1:
            return 0.0
        lat, bw = factors(ctype, np.asarray([float(group)]), max(nbytes, 0.0), algo_family(algo))
        a, inv = self.at(end)
        return float(a * lat[0] + inv * bw[0])


def refit_beta(rows: Any, alpha: float) -> float:
    """Beta fitted to ``rows`` (relative residuals) once alpha is fixed elsewhere, with the
    rows far off it weighted down as :func:`robust_nnls` does."""
    x, y = factor_rows(rows)
    w = 1.0 / np.maximum(y, 1e-9)
    beta = beta_given(x, y, np.ones_like(y), alpha)  # absolute first, as robust_nnls
    for _ in range(10):
        r = np.log(np.maximum(y, 1e-12) / np.maximum(x @ np.array([alpha, beta]), 1e-12))
        scale = max(1.4826 * float(np.median(np.abs(r))), 0.05)
        new = beta_given(x, y, w / (1.0 + (r / (3.0 * scale)) ** 2), alpha)
        if np.isclose(new, beta, rtol=1e-6, atol=0.0):
            break
        beta = new
    return beta


def factor_rows(rows: Any) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """(latency factor, bytes factor) per row, and the measured transfers."""
    lat, bw = [], []
    for ct, b, g, a in zip(
        rows["collective"], rows["bytes"], rows["group"], rows["algo"], strict=True
    ):
        la, ba = factors(str(ct), np.asarray([float(g)]), max(float(b), 0.0), algo_family(str(a)))
        lat.append(la[0])
        bw.append(ba[0])
    return np.column_stack([lat, bw]), rows["transfer"].to_numpy(dtype=np.float64)


def fit_rows(rows: Any, prior: AlphaBeta | None = None) -> AlphaBeta | None:
    """NNLS for (alpha, beta) on relative residuals, with alpha's 90% range as the ends.

    The ends are alpha's standard error from the rows' scatter about the fit (Student's t,
    5th/95th percentile), beta refitted at each: with one group size the latency is an
    intercept read from messages whose transfers it is a few % of, and 5% noise per instance
    leaves it uncertain by half its value. With one distinct (latency, bytes) mix alpha and
    beta cannot be told apart at all. Given the intra-node fit as ``prior``, the slower tier's
    latency is then assumed to lie between the intra-node alpha (latency does not grow) and
    alpha times the bandwidth ratio (latency grows like bandwidth shrinks): the point
    estimate is the ratio to the power ``LATENCY_EXPONENT``, the ends are those two.
    """
    x, y = factor_rows(rows)
    w = 1.0 / np.maximum(y, 1e-9)  # relative: small latency-bound messages count as much
    if mixes(rows) >= 2:
        coef, kept = robust_nnls(x, y, w)
        w_kept = np.where(kept >= _OUTLIER, w, 0.0)
        se = alpha_se(x, y, w_kept, coef)
        low, high = alpha_range(x, y, w_kept, coef, se)
        se_alpha = None if se is None else se[0]
        return AlphaBeta(float(coef[0]), float(coef[1]), "", alt=high, low=low, alpha_se=se_alpha)
    if prior is None:
        return None
    return between_tiers(rows, prior)


#: Where between "latency does not grow across nodes" (0) and "latency grows like bandwidth
#: shrinks" (1) an unidentified inter-node latency is placed, as the exponent of the bandwidth
#: ratio: NCCL's cost model puts the network's per-hop latency at 3-6x NVLink's where its
#: bandwidth is 6-12x lower, exponents log 3/log 6 = 0.61 to log 6/log 12 = 0.72.
LATENCY_EXPONENT = 2.0 / 3.0


def between_tiers(rows: Any, prior: AlphaBeta) -> AlphaBeta:
    """The slower tier's link from ``rows`` where its latency is assumed, not read: between
    ``prior``'s (the intra-node) alpha, latency not growing, and that alpha times the bandwidth
    ratio, latency growing like bandwidth shrinks; the point at the ratio to the power
    ``LATENCY_EXPONENT`` (a fixed point, since the ratio is measured at the point's beta),
    beta refitted at each."""
    x, y = factor_rows(rows)
    w = 1.0 / np.maximum(y, 1e-9)

    def beta_for(alpha: float) -> float:
        return beta_given(x, y, w, alpha)

    a0 = prior.alpha_s
    low_end = (a0, beta_for(a0))
    alpha = a0
    for _ in range(20):  # fixed point: alpha = a0 * (beta / beta_intra) ** LATENCY_EXPONENT
        slower = beta_for(alpha) / prior.inv_bw if prior.inv_bw > 0 else 1.0
        alpha = a0 * float(max(slower, 1.0) ** LATENCY_EXPONENT)
    slower = beta_for(alpha) / prior.inv_bw if prior.inv_bw > 0 else 1.0
    high_alpha = a0 * max(slower, 1.0)
    high = (high_alpha, beta_for(high_alpha))
    point = (alpha, beta_for(alpha))
    return AlphaBeta(
        *point,
        "",
        alt=high if high != point else None,
        low=low_end if low_end != point else None,
    )


def beta_given(
    x: npt.NDArray[np.float64], y: npt.NDArray[np.float64], w: npt.NDArray[np.float64], alpha: float
) -> float:
    """Least-squares beta (weights ``w``) once alpha is fixed, at least 0."""
    rest = (y - alpha * x[:, 0]) * w
    xb = x[:, 1] * w
    denom = float(np.dot(xb, xb))
    return max(float(np.dot(xb, rest)) / denom, 0.0) if denom > 0 else 0.0


#: Ends narrower than this share of alpha are the point (exact rows, simulators without noise).
_NEGLIGIBLE = 1e-6
#: Rows the robust fit weighs below this (about 5 robust standard deviations off) are outliers
#: and left out of alpha's standard error; the others count at full weight: the Cauchy weights
#: of ordinary noise (0.5-1) would read its scatter as smaller than it is.
_OUTLIER = 0.25


def alpha_se(
    x: npt.NDArray[np.float64],
    y: npt.NDArray[np.float64],
    w: npt.NDArray[np.float64],
    coef: npt.NDArray[np.float64],
) -> tuple[float, int] | None:
    """(standard error of alpha, degrees of freedom) from the weighted rows' scatter about the
    fit; None with fewer than three rows or collinear factor columns (nothing to read it from)."""
    dof = int(np.count_nonzero(w > 0)) - 2
    if dof < 1:
        return None
    xw = x * w[:, None]
    r = (y - x @ coef) * w
    gram = xw.T @ xw
    scale = np.sqrt(np.diag(gram))
    if not np.all(scale > 0) or np.linalg.det(gram / np.outer(scale, scale)) <= 1e-12:
        return None
    var = float(np.dot(r, r)) / dof * float(np.linalg.inv(gram)[0, 0])
    se = float(np.sqrt(max(var, 0.0)))
    return (se, dof) if np.isfinite(se) else None


def alpha_range(
    x: npt.NDArray[np.float64],
    y: npt.NDArray[np.float64],
    w: npt.NDArray[np.float64],
    coef: npt.NDArray[np.float64],
    se: tuple[float, int] | None,
) -> tuple[tuple[float, float] | None, tuple[float, float] | None]:
    """(low, high) ends of alpha's 90% range from its standard error ``se`` (:func:`alpha_se`),
    beta refitted at each; None where an end is the point."""
    if se is None:
        return None, None
    half = student_t95(se[1]) * se[0]
    alpha = float(coef[0])
    if not np.isfinite(half) or half <= _NEGLIGIBLE * max(alpha, 1e-12):
        return None, None
    lo, hi = max(alpha - half, 0.0), alpha + half
    low = (lo, beta_given(x, y, w, lo)) if lo < alpha else None
    return low, (hi, beta_given(x, y, w, hi))


def robust_nnls(
    x: npt.NDArray[np.float64], y: npt.NDArray[np.float64], w: npt.NDArray[np.float64]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """NNLS on relative residuals, reweighted so rows far off the fit stop counting (Cauchy
    weights on the log residual); returns the coefficients and each row's last weight. Relative
    residuals let one row 20x off (another instance's transfer joined onto it, a stalled
    kernel) pull the bandwidth to infinity, so the first fit is on absolute residuals, which
    such a short row barely moves."""
    coef, _ = nnls(x, y)
    c = np.ones(len(y))
    for _ in range(10):
        r = np.log(np.maximum(y, 1e-12) / np.maximum(x @ coef, 1e-12))
        scale = max(1.4826 * float(np.median(np.abs(r))), 0.05)
        c = 1.0 / (1.0 + (r / (3.0 * scale)) ** 2)
        new, _ = nnls(x * (w * c)[:, None], y * w * c)
        if np.allclose(new, coef, rtol=1e-6, atol=0.0):
            break
        coef = new
    return np.asarray(coef, dtype=np.float64), c


#: A fitted latency whose 90% range spans more than this factor is stated as an assumption.
WEAK_RANGE = 2.0


def weak_note(fit: AlphaBeta, rows: Any, key: tuple[str, str, str]) -> list[str]:
    """The assumption to state when the rows barely tell this key's latency from its bandwidth
    (its 90% range spans more than ``WEAK_RANGE``x), else nothing."""
    if not fit.weak():
        return []
    lo, hi = fit.at(-1)[0], fit.at(1)[0]
    sizes = ", ".join(str(int(g)) for g in sorted(set(rows["group"].astype(int))))
    mb = rows["bytes"].astype(float) / 1e6
    what = (
        f"group size{'s' if ',' in sizes else ''} {sizes}, messages "
        f"{mb.min():.3g}-{mb.max():.3g} MB"
    )
    how = (
        "one message mix: assumed between the intra-node latency and that times the bandwidth "
        f"ratio, at the ratio to the power {Fraction(LATENCY_EXPONENT).limit_denominator(12)}"
        if mixes(rows) < 2
        else "its standard error from the transfers' scatter"
    )
    ctype, algo, tier = key
    return [
        f"{tier}-node {ctype} {algo} latency {fit.alpha_s * 1e6:.3g} us per hop, 90% range "
        f"{lo * 1e6:.3g}-{hi * 1e6:.3g} us ({what}; {how}): the intervals replay both ends"
    ]


def mixes(rows: Any) -> int:
    """Distinct (latency, bytes) factor mixes: alpha and beta separate from two on."""
    x, _ = factor_rows(rows)
    return int(np.unique(np.round(x[:, 1] / np.maximum(x[:, 0], 1e-300), 3)).size)
