"""The study model: one fitted series per category plus the communication model.

``t_c(N) = a_c + b_c/N + o_c(N)`` for every category but communication, whose time is
``max(0, transfer(N) - overlap_window(N)) + residual(N)``: the alpha-beta transfer of the
collectives minus the compute that can hide it (the ``overlap_window`` column, modelled like
a compute category), plus what is not transfer (waits, host collectives) on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from tracescale.categories import CATEGORIES
from tracescale.classify.result import CAUSED
from tracescale.scaling.comm import TransferFit, fit_transfer
from tracescale.scaling.models import SeriesFit, evaluate, fit_series
from tracescale.scaling.stats import RunAgg, ScheduleRow

FloatArray = npt.NDArray[np.float64]

#: Single-run defaults (strong mode): which categories shrink with N. Overridable.
DEFAULT_ASSUMPTIONS: dict[str, str] = {
    "compute": "parallel",
    "memcpy": "parallel",
    "dataloader": "parallel",
    "sync": "serial",
    "reduction": "serial",
    "host": "serial",
    "idle": "serial",
    "communication": "serial",  # the non-transfer part; transfer follows the alpha-beta model
}

#: Weak mode: categories counted as the serial share ``s`` (plus ``serial_compute``).
WEAK_SERIAL: tuple[str, ...] = ("sync", "reduction", "host", "idle")

#: Share of the transfer that must stay exposed for a run's overlap window to count as the
#: full window (when comm is entirely hidden, the measured window is only a lower bound).
_EXPOSED_MIN = 0.02


@dataclass(frozen=True)
class Schedule:
    """A typical step's collectives in order, for bucketed overlap (DDP's AllReduce buckets).

    Bucket k starts when its gradients are ready and runs after the buckets before it; the
    compute left after it started (``hide``) can hide it and everything after it. The step
    waits for the last bucket, so the exposed time is ``max_k(sum_{j>=k} X_j - hide_k)``;
    blocking host collectives (barrier) add their transfer. At a new N, ``X_j`` comes from the
    alpha-beta fit and ``hide_k`` scales with the parallel compute.
    """

    rows: tuple[ScheduleRow, ...]
    world_size: int

    @classmethod
    def from_runs(cls, aggs: Sequence[RunAgg], template_ws: int) -> Schedule | None:
        """From the largest run with asynchronous collectives that record hideable compute."""
        live = [a for a in aggs if a.world_size > 1 and any(r[3] and r[2] > 1 for r in a.schedule)]
        best = max(live, key=lambda a: a.world_size) if live else None
        if best is None or not any(r[4] > 0 for r in best.schedule):
            return None
        return cls(best.schedule, best.world_size)

    def exposed(
        self, n: FloatArray, transfer: TransferFit, parallel: Callable[[FloatArray], FloatArray]
    ) -> FloatArray:
        n = np.asarray(n, dtype=np.float64)
        ref = float(parallel(np.array([float(self.world_size)]))[0])
        scale = parallel(n) / ref if ref > 0 else np.ones_like(n)
        blocking = np.zeros_like(n)
        worst = np.zeros_like(n)
        if not self.rows:
            return np.asarray(blocking + worst, dtype=np.float64)
        # Every row at every N in one [rows, N] grid (a step may hold thousands of
        # collectives, and the bootstrap refits it per replicate); sums run in row order.
        ctypes = [r[0] for r in self.rows]
        nbytes = np.array([max(r[1], 0) for r in self.rows], dtype=np.float64)
        group = np.array([r[2] for r in self.rows], dtype=np.float64)
        is_async = np.array([r[3] for r in self.rows], dtype=np.bool_)
        hide = np.array([r[4] for r in self.rows], dtype=np.float64)
        g = np.maximum(np.rint(group[:, None] * n[None, :] / self.world_size), 1.0)
        x = transfer.instance_times(ctypes, nbytes, g)
        if (~is_async).any():
            blocking = blocking + np.cumsum(x[~is_async], axis=0)[-1]
        if is_async.any():
            # exposed = max_k(sum_{j>=k} X_j - hide_k), the suffix sums from the last bucket
            suffix = np.cumsum(x[is_async][::-1], axis=0)
            h = (hide[is_async][:, None] * scale[None, :])[::-1]
            worst = np.maximum(worst, np.max(suffix - h, axis=0))
        return np.asarray(blocking + worst, dtype=np.float64)


#: Waits for late ranks below this share of a category are jitter, not a straggler.
_STRAGGLER_MIN = 0.02


@dataclass(frozen=True)
class StudyModel:
    """Fitted model of a study; ``predict`` gives every category at any N >= 1."""

    mode: str
    cats: Mapping[str, SeriesFit]
    residual: SeriesFit
    overlap: SeriesFit | None
    transfer: TransferFit
    serial_compute_ratio: float
    comm_rmse_s: float
    #: Per CAUSED category: the straggler penalty relative to the category's parallel part.
    straggler: Mapping[str, float] = field(default_factory=dict)
    straggler_onset: Mapping[str, int] = field(default_factory=dict)
    schedule: Schedule | None = None

    def parallel_compute(self, n: FloatArray) -> FloatArray:
        """The compute that shrinks with N (and can hide communication)."""
        c = self.cats["compute"]
        return np.maximum(c.predict(n) - c.serial(), 0.0)

    def exposed(self, n: FloatArray) -> FloatArray:
        if self.schedule is not None:
            return self.schedule.exposed(
                np.asarray(n, dtype=np.float64), self.transfer, self.parallel_compute
            )
        x = self.transfer.predict(n)
        w = self.overlap.predict(n) if self.overlap is not None else np.zeros_like(x)
        # The critical path is the straggler's: its slower compute hides more of the transfer.
        onset = self.straggler_onset.get("compute", 2)
        w = w * np.where(np.asarray(n) >= onset, 1.0 + self.straggler.get("compute", 0.0), 1.0)
        return np.maximum(x - w, 0.0)

    def predict(self, n: FloatArray) -> dict[str, FloatArray]:
        n = np.asarray(n, dtype=np.float64)
        out = {}
        for c in CATEGORIES:
            if c == "communication":
                out[c] = self.exposed(n) + self.residual.predict(n)
            else:
                out[c] = self.cats[c].predict(n)
        return out

    def total(self, n: FloatArray) -> FloatArray:
        parts = self.predict(n)
        return np.asarray(sum(parts.values()), dtype=np.float64)

    def forms(self) -> dict[str, str]:
        """Chosen forms, to refit bootstrap replicates with the same shapes."""
        f = {c: s.form for c, s in self.cats.items()}
        f["communication.residual"] = self.residual.form
        if self.overlap is not None:
            f["communication.overlap"] = self.overlap.form
        f["transfer"] = self.transfer.algorithm
        return f


def _fit_overlap(
    aggs: Sequence[RunAgg],
    n: FloatArray,
    w: FloatArray,
    mode: str,
    compute: SeriesFit,
    series: Callable[[str, FloatArray, FloatArray, FloatArray], SeriesFit],
) -> SeriesFit | None:
    """Model the compute that can hide communication.

    Only runs whose communication is partly exposed measure the whole window; where it is
    fully hidden the measured window (compute while comm ran) is a lower bound. With two or
    more exact points the window is fitted like a compute category. With one, it shrinks like
    parallel compute through it (strong: ``b/N``; weak: constant). With none, the window lies
    between the largest lower bound and all of the parallel compute (the fitted ``b`` of
    compute; weak: compute minus serial_compute); the geometric mean of the two is taken, so
    the estimate is off by at most the square root of the bounds' ratio either way.
    """
    xfer = np.array([a.xfer for a in aggs])
    ow = np.array([a.overlap_window for a in aggs])
    has = xfer > 0
    exact = has & (xfer - ow > _EXPOSED_MIN * xfer)
    if exact.sum() >= 2:
        return series("communication.overlap", ow[exact], n[exact], w[exact])
    if not has.any():
        return None
    src = exact if exact.any() else has
    strong = mode == "strong"
    b = float(np.max(ow[src] * (n[src] if strong else 1.0)))
    if not exact.any():
        par = [a.cats["compute"] - a.serial_compute for a, h in zip(aggs, has, strict=True) if h]
        upper = compute.params["b"] if strong else float(np.mean(par))
        b = float(np.sqrt(b * upper)) if upper > b else b
    fit = SeriesFit("b/N" if strong else "a", (b,), 0.0, None, {}, int(src.sum()), True)
    rmse = float(np.sqrt(np.mean((fit.predict(n[src]) - ow[src]) ** 2)))
    return SeriesFit(fit.form, fit.coef, rmse, None, {}, fit.n_points, True)


def single_run_form(category: str, mode: str, assumptions: Mapping[str, str]) -> str:
    """Form for a category of a single-run study: serial -> ``a``, parallel -> ``b/N``."""
    if mode == "weak":
        return "a"
    kind = assumptions.get(category, DEFAULT_ASSUMPTIONS.get(category, "serial"))
    return "b/N" if kind == "parallel" else "a"


def _straggler_fit(
    aggs: Sequence[RunAgg], c: str, n: FloatArray, w: FloatArray, mode: str, onset: int
) -> SeriesFit:
    """``a + b/N`` (weak: ``a``) from the median rank's own time, plus the straggler term
    fitted to what the run-level time adds on top from ``onset`` on."""
    own = np.array([a.own_median.get(c, a.cats[c]) for a in aggs])
    total = np.array([a.cats[c] for a in aggs])
    on = (n >= onset).astype(np.float64)
    coef: tuple[float, ...]
    if mode == "strong":
        clean = fit_series(n, own, w, mode=mode, form="a+b/N")
        a0, b0 = clean.params["a"], clean.params["b"]
        penalty = np.maximum(total - (a0 + b0 / n), 0.0)
        x = on / n
        den = float(np.sum((x * w) ** 2))
        s = max(float(np.sum(penalty * x * w * w)) / den, 0.0) if den > 0 else 0.0
        form, coef = f"a+b/N+s/N@{onset}", (a0, b0, s)
    else:
        clean = fit_series(n, own, w, mode=mode, form="a")
        a0 = clean.params["a"]
        penalty = np.maximum(total - a0, 0.0)
        s1 = float(penalty[on > 0].mean()) if on.any() else 0.0
        form, coef = f"a+s@{onset}", (a0, s1)
    rmse = float(np.sqrt(np.mean((evaluate(form, coef, n) - total) ** 2)))
    return SeriesFit(form, tuple(float(v) for v in coef), rmse, None, {}, len(n), False)


def fit_study(
    aggs: Sequence[RunAgg],
    mode: str,
    assumptions: Mapping[str, str] | None = None,
    fixed: Mapping[str, str] | None = None,
) -> StudyModel:
    """Fit every series; ``fixed`` forms (from the point estimate) skip the form choice."""
    aggs = sorted(aggs, key=lambda a: a.world_size)
    fixed = fixed or {}
    assume = dict(assumptions or {})
    single = len(aggs) == 1
    n = np.array([a.world_size for a in aggs], dtype=np.float64)
    tot = np.array([a.total for a in aggs])
    w = 1.0 / np.where(tot > 0, tot, 1.0)

    def series(key: str, y: FloatArray, nn: FloatArray, ww: FloatArray) -> SeriesFit:
        if single:
            cat = key.split(".")[0]
            form = "b/N" if key.endswith("overlap") and mode == "strong" else None
            form = form or single_run_form(cat, mode, assume)
            return fit_series(nn, y, ww, mode=mode, form=form, assumed=True)
        return fit_series(nn, y, ww, mode=mode, form=fixed.get(key))

    cats = {
        c: series(c, np.array([a.cats[c] for a in aggs]), n, w)
        for c in CATEGORIES
        if c != "communication"
    }
    straggler: dict[str, float] = {}
    onsets: dict[str, int] = {}
    multi = [a for a in aggs if a.world_size > 1]
    for c in CAUSED:
        waited = sum(a.caused.get(c, 0.0) for a in multi)
        total = sum(a.cats[c] for a in multi)
        if single or total <= 0 or waited <= _STRAGGLER_MIN * total:
            continue
        # Ranks waited for a late rank. The median rank's own work (waits removed) gives the
        # serial and parallel parts; what the straggler adds on top is its own term, absent
        # below the N where it first showed (with one rank there is nobody to wait for).
        late = [a.world_size for a in multi if a.caused.get(c, 0.0) > _STRAGGLER_MIN * a.cats[c]]
        onset = min(late) if late else min(a.world_size for a in multi)
        fit = _straggler_fit(aggs, c, n, w, mode, onset)
        cats[c] = fit
        par = fit.params["b"] if mode == "strong" else fit.params["a"]
        if par > 0:
            straggler[c] = fit.params.get("s", 0.0) / par
            onsets[c] = onset
    transfer = fit_transfer(aggs, fixed.get("transfer"))
    xfer = np.array([a.xfer for a in aggs])
    ow = np.array([a.overlap_window for a in aggs])
    comm = np.array([a.cats["communication"] for a in aggs])
    schedule = Schedule.from_runs(aggs, transfer.template_ws)
    if schedule is not None:
        probe = StudyModel(mode, cats, cats["idle"], None, transfer, 0.0, 0.0, straggler, onsets)
        exposed = schedule.exposed(n, transfer, probe.parallel_compute)
    else:
        exposed = np.maximum(xfer - ow, 0.0)
    residual = series("communication.residual", np.maximum(comm - exposed, 0.0), n, w)

    overlap = _fit_overlap(aggs, n, w, mode, cats["compute"], series)
    big = aggs[-1]
    ratio = big.serial_compute / big.cats["compute"] if big.cats["compute"] > 0 else 0.0
    ratio = min(max(ratio, 0.0), 1.0)
    model = StudyModel(
        mode, cats, residual, overlap, transfer, ratio, 0.0, straggler, onsets, schedule
    )
    pred = model.predict(n)["communication"]
    rmse = float(np.sqrt(np.mean((pred - comm) ** 2)))
    return StudyModel(
        mode, cats, residual, overlap, transfer, ratio, rmse, straggler, onsets, schedule
    )
