"""Alpha-beta model of collective transfer times, fitted from the trace's message sizes.

Per instance, ``transfer = alpha * L(type, g) + bytes_factor(type, g, bytes) / bandwidth``:
ring AllReduce ``2(g-1) alpha + 2(g-1)/g bytes/B``; AllGather / ReduceScatter / AllToAll
``(g-1) alpha + (g-1)/g bytes/B``; Broadcast ``(g-1) alpha + bytes/B``; SendRecv
``alpha + bytes/B``; Barrier latency only. The tree alternative replaces the latency factor
by ``2 log2 g`` (AllReduce) or ``log2 g``. Message bytes per rank are taken from the trace and
kept when projecting to a new N (data parallelism: the model, hence the gradient, is fixed in
both strong and weak scaling); the group size follows N proportionally.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tracescale.scaling.nnls import nnls
from tracescale.scaling.stats import RunAgg

FloatArray = npt.NDArray[np.float64]

#: Used when alpha/bandwidth cannot be fitted (single group size with one message size).
DEFAULT_ALPHA_S = 5e-6
#: Default bus bandwidth in bytes/s (order of PCIe 4 x16 / a slow NVLink), documented.
DEFAULT_BANDWIDTH = 25e9

#: Tree latency is chosen only when its cross-validated error is this much below ring's: the
#: two are hard to tell apart over a few group sizes, and NCCL uses ring for large messages.
TREE_MARGIN = 0.5
#: ... and only with this many distinct group sizes (with three, 2-parameter leave-one-out
#: is dominated by noise).
MIN_GROUPS_FOR_TREE = 4

_TWO = ("allreduce", "barrier", "other")


#: Factors already computed, by (type, group sizes, bytes, algorithm): a bootstrap evaluates
#: the same collectives at the same group sizes for every replicate. Bounded; read-only.
_FACTORS: dict[tuple[str, tuple[int, ...], bytes, float, str], tuple[FloatArray, FloatArray]] = {}
_FACTORS_MAX = 1024


def factors(ctype: str, g: FloatArray, nbytes: float, algo: str) -> tuple[FloatArray, FloatArray]:
    """(latency factor, bytes factor) of one collective type at group sizes ``g`` (read-only)."""
    g = np.asarray(g, dtype=np.float64)
    key = (ctype, g.shape, g.tobytes(), float(nbytes), algo)
    hit = _FACTORS.get(key)
    if hit is not None:
        return hit
    lat, bw = _factors(ctype, g, nbytes, algo)
    lat.setflags(write=False)
    bw.setflags(write=False)
    if len(_FACTORS) >= _FACTORS_MAX:
        _FACTORS.clear()
    _FACTORS[key] = (lat, bw)
    return lat, bw


def _factors(
    ctype: str, g: FloatArray, nbytes: float | FloatArray, algo: str
) -> tuple[FloatArray, FloatArray]:
    """``factors`` uncached; ``nbytes`` may be an array that broadcasts against ``g`` (one
    message size per row of a ``[rows, N]`` grid)."""
    on = g > 1
    gs = np.where(on, g, 2.0)
    b: float | FloatArray = (
        max(float(nbytes), 0.0)
        if np.ndim(nbytes) == 0
        else np.maximum(np.asarray(nbytes, dtype=np.float64), 0.0)
    )
    if algo == "tree":
        lat = (2.0 if ctype in _TWO else 1.0) * np.log2(gs)
    elif ctype == "sendrecv":
        lat = np.ones_like(gs)
    else:
        lat = (2.0 if ctype in _TWO else 1.0) * (gs - 1.0)
    if ctype in ("allreduce", "other"):
        bw = 2.0 * (gs - 1.0) / gs * b
    elif ctype in ("broadcast", "sendrecv"):
        bw = np.broadcast_to(b, gs.shape).astype(np.float64)
    elif ctype == "barrier":
        bw = np.zeros_like(gs)
    else:
        bw = (gs - 1.0) / gs * b
    return np.where(on, lat, 0.0), np.where(on, bw, 0.0)


@dataclass(frozen=True)
class TransferFit:
    """Fitted alpha (s) and inverse bandwidth (s/byte), plus the per-step instance template."""

    algorithm: str
    alpha_s: float
    inv_bw: float
    fitted: bool
    rmse_s: float
    n_instances: int
    template_ws: int  # world size the template was taken from (0: none)
    template: tuple[tuple[str, int, int, float], ...]  # (type, bytes, group, count per step)
    #: Barriers move no data and their latency is the implementation's (often a constant
    #: rendezvous): measured mean transfer, kept as is at any N instead of fitted into alpha.
    barrier_s: float = 0.0

    @property
    def bandwidth(self) -> float | None:
        return 1.0 / self.inv_bw if self.inv_bw > 0 else None

    def predict_by_type(self, n: FloatArray) -> dict[str, FloatArray]:
        """Summed transfer seconds per rank and step at world sizes ``n``, per collective."""
        n = np.asarray(n, dtype=np.float64)
        out: dict[str, FloatArray] = {}
        for ctype, nbytes, g, cnt in self.template:
            gg = np.maximum(np.rint(g * n / max(self.template_ws, 1)), 1.0)
            val = cnt * self.instance_time(ctype, nbytes, gg)
            out[ctype] = out.get(ctype, np.zeros_like(n)) + val
        return out

    def instance_time(self, ctype: str, nbytes: int, group: FloatArray) -> FloatArray:
        """Transfer seconds of one instance at group sizes ``group`` (0 where group <= 1)."""
        group = np.asarray(group, dtype=np.float64)
        if ctype == "barrier":
            return np.where(group > 1, self.barrier_s, 0.0)
        lat, bw = factors(ctype, group, nbytes, self.algorithm)
        return np.asarray(self.alpha_s * lat + self.inv_bw * bw, dtype=np.float64)

    def instance_times(
        self, ctypes: Sequence[str], nbytes: FloatArray, group: FloatArray
    ) -> FloatArray:
        """``instance_time`` of many collectives at once: row k of the ``[rows, N]`` result is
        collective ``ctypes[k]`` of ``nbytes[k]`` bytes at group sizes ``group[k]``. One pass
        per collective type, not per collective: a step of a thousand collectives is refitted
        for every bootstrap replicate."""
        group = np.asarray(group, dtype=np.float64)
        out = np.zeros_like(group)
        kinds = np.asarray(ctypes, dtype=object)
        for ctype in dict.fromkeys(ctypes):
            k = np.flatnonzero(kinds == ctype)
            g = group[k]
            if ctype == "barrier":
                out[k] = np.where(g > 1, self.barrier_s, 0.0)
                continue
            b = np.maximum(np.asarray(nbytes, dtype=np.float64)[k], 0.0)[:, None]
            lat, bw = _factors(ctype, g, b, self.algorithm)
            out[k] = self.alpha_s * lat + self.inv_bw * bw
        return out

    def predict(self, n: FloatArray) -> FloatArray:
        parts = self.predict_by_type(n)
        total = np.zeros_like(np.asarray(n, dtype=np.float64))
        for v in parts.values():
            total = total + v
        return total


def _rows(
    aggs: Sequence[RunAgg], algo: str
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    lat, bw, y, w, gs = [], [], [], [], []
    for a in aggs:
        for k, (ctype, nbytes, g) in enumerate(a.coll_keys):
            if g <= 1 or a.coll_weight[k] <= 0 or ctype == "barrier":
                continue
            la, ba = factors(ctype, np.array([float(g)]), nbytes, algo)
            lat.append(la[0])
            bw.append(ba[0])
            y.append(a.coll_transfer[k])
            w.append(np.sqrt(a.coll_weight[k]))
            gs.append(g)
    x = np.column_stack([lat, bw]) if lat else np.zeros((0, 2))
    return x, np.asarray(y), np.asarray(w), np.asarray(gs, dtype=np.float64)


def _solve(x: FloatArray, y: FloatArray, w: FloatArray) -> tuple[float, float, bool]:
    """NNLS for (alpha, 1/B); with collinear rows fix alpha at its default and fit 1/B."""
    distinct = np.unique(np.round(x[:, 1] / np.maximum(x[:, 0], 1e-300), 6)).size
    if distinct >= 2:
        coef, _ = nnls(x * w[:, None], y * w)
        return float(coef[0]), float(coef[1]), True
    rest = y - DEFAULT_ALPHA_S * x[:, 0]
    denom = float(np.sum(w**2 * x[:, 1] ** 2))
    inv = float(np.sum(w**2 * x[:, 1] * rest)) / denom if denom > 0 else 0.0
    if inv <= 0:
        return float(np.sum(w**2 * x[:, 0] * y) / np.sum(w**2 * x[:, 0] ** 2)), 0.0, True
    return DEFAULT_ALPHA_S, inv, True


def _template(aggs: Sequence[RunAgg]) -> tuple[int, tuple[tuple[str, int, int, float], ...]]:
    best = None
    for a in aggs:
        live = zip(a.coll_keys, a.coll_per_step, strict=True)
        if any(g > 1 and c > 0 for (_, _, g), c in live) and (
            best is None or a.world_size > best.world_size
        ):
            best = a
    if best is None:
        return 0, ()
    rows = tuple(
        (t, b, g, float(c))
        for (t, b, g), c in zip(best.coll_keys, best.coll_per_step, strict=True)
        if c > 0
    )
    return best.world_size, rows


def fit_transfer(aggs: Sequence[RunAgg], algorithm: str | None = None) -> TransferFit:
    """Fit alpha and bandwidth; ring unless tree's leave-one-group-size-out error is far lower.

    Without any instance at group size > 1 nothing can be fitted: the defaults are kept and
    ``fitted`` is False (the caller warns).
    """
    tws, tmpl = _template(aggs)
    sizes = {
        g
        for a in aggs
        for (_, _, g), c in zip(a.coll_keys, a.coll_weight, strict=True)
        if g > 1 and c > 0
    }
    if algorithm:
        candidates = [algorithm]
    else:
        candidates = ["ring", "tree"] if len(sizes) >= MIN_GROUPS_FOR_TREE else ["ring"]
    scores: dict[str, tuple[float, float, float, float, int]] = {}
    for algo in candidates:
        x, y, w, gs = _rows(aggs, algo)
        if len(y) == 0:
            return TransferFit(
                algo,
                DEFAULT_ALPHA_S,
                1.0 / DEFAULT_BANDWIDTH,
                False,
                0.0,
                0,
                tws,
                tmpl,
                _barrier_s(aggs),
            )
        alpha, inv, _ = _solve(x, y, w)
        pred = x @ np.array([alpha, inv])
        rmse = float(np.sqrt(np.average((pred - y) ** 2, weights=w**2)))
        cv = rmse
        ug = np.unique(gs)
        if len(candidates) == 2 and len(ug) >= MIN_GROUPS_FOR_TREE:
            errs = []
            for g in ug:
                k = gs != g
                al, iv, _ = _solve(x[k], y[k], w[k])
                e = x[~k] @ np.array([al, iv]) - y[~k]
                errs.append(float(np.average(e**2, weights=w[~k] ** 2)))
            cv = float(np.sqrt(np.mean(errs)))
        scores[algo] = (cv, alpha, inv, rmse, len(y))
    algo = candidates[0]
    if len(scores) == 2 and scores["tree"][0] < TREE_MARGIN * scores["ring"][0]:
        algo = "tree"
    _, alpha, inv, rmse, n = scores[algo]
    return TransferFit(algo, alpha, inv, True, rmse, n, tws, tmpl, _barrier_s(aggs))


def _barrier_s(aggs: Sequence[RunAgg]) -> float:
    """Weighted mean measured barrier transfer over the runs (0 when none was traced)."""
    num = den = 0.0
    for a in aggs:
        for k, (ctype, _, g) in enumerate(a.coll_keys):
            if ctype == "barrier" and g > 1 and a.coll_weight[k] > 0:
                num += float(a.coll_transfer[k] * a.coll_weight[k])
                den += float(a.coll_weight[k])
    return num / den if den > 0 else 0.0
