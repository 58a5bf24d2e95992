"""Projections with bootstrap intervals, the optimal world size, and overhead sentences.

The bootstrap resamples, per run, ranks and steps with replacement (multinomial weights; runs
of more than ``blocks.MAX_RESAMPLED`` steps in that many blocks of consecutive steps),
refits every series with the forms chosen on the full data, and re-evaluates the model. The
random stream is ``numpy.random.default_rng(seed)``, so results are deterministic per seed.
Intervals are 5th-95th percentiles, widened if needed to contain the point estimate (the
``max(0, .)`` in exposed communication can bias replicates to one side).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tracescale.categories import CATEGORIES
from tracescale.scaling.fit import StudyModel, fit_study
from tracescale.scaling.result import Overhead, Projection
from tracescale.scaling.serial import gustafson, model_t1, strong_fraction, weak_share
from tracescale.scaling.stats import RunAgg, RunData, aggregate_many, blocked

FloatArray = npt.NDArray[np.float64]

_LABELS = {
    "allreduce": "AllReduce",
    "allgather": "AllGather",
    "reducescatter": "ReduceScatter",
    "broadcast": "Broadcast",
    "alltoall": "AllToAll",
    "sendrecv": "SendRecv",
    "barrier": "Barrier",
    "other": "other collectives",
}


@dataclass(frozen=True)
class Boot:
    """Bootstrap replicates: baseline step time, modelled step times on ``grid``, f."""

    grid: FloatArray
    base: FloatArray  # [B]
    totals: FloatArray  # [B, len(grid)]
    fraction: FloatArray  # [B]


def serial_fraction_of(
    model: StudyModel, aggs: Sequence[RunAgg], assumptions: Mapping[str, str]
) -> tuple[float, dict[str, float], float, bool]:
    """(f, f_c, T(1), T(1) estimated?) in the model's mode."""
    base = aggs[0]
    if model.mode == "weak":
        s, by = weak_share(base.cats, base.serial_compute, assumptions)
        return s, by, base.total, base.world_size != 1
    t1 = base.total if base.world_size == 1 else float(sum(model_t1(model).values()))
    f, by = strong_fraction(model, t1)
    return f, by, t1, base.world_size != 1


def bootstrap(
    datas: Sequence[RunData],
    model: StudyModel,
    grid: FloatArray,
    assumptions: Mapping[str, str],
    scale: Mapping[str, float] | None,
    seed: int,
    n_boot: int,
) -> Boot:
    """Resample ranks and steps in every run, refit with fixed forms, evaluate on ``grid``."""
    rng = np.random.default_rng(seed)
    forms = model.forms()
    datas = [blocked(d) for d in datas]  # a bounded number of columns of steps per run
    # Draw in the order replicate by replicate, run by run (ranks, then steps), so the
    # random stream is the one a per-replicate loop would use.
    draws: list[tuple[list[FloatArray], list[FloatArray]]] = [([], []) for _ in datas]
    for _ in range(n_boot):
        for d, (rws, sws) in zip(datas, draws, strict=True):
            nr, ns = d.mask.shape
            rws.append(rng.multinomial(nr, np.full(nr, 1.0 / nr)).astype(np.float64))
            sws.append(rng.multinomial(ns, np.full(ns, 1.0 / ns)).astype(np.float64))
    per_run = [
        aggregate_many(d, np.array(rws), np.array(sws), scale) if n_boot else []
        for d, (rws, sws) in zip(datas, draws, strict=True)
    ]
    base = np.empty(n_boot)
    totals = np.empty((n_boot, len(grid)))
    frac = np.empty(n_boot)
    for b in range(n_boot):
        aggs = [runs[b] for runs in per_run]
        m = fit_study(aggs, model.mode, assumptions, fixed=forms)
        base[b] = aggs[0].total
        totals[b] = m.total(grid)
        frac[b] = serial_fraction_of(m, aggs, assumptions)[0]
    return Boot(grid, base, totals, frac)


def interval(samples: FloatArray, point: float) -> tuple[float, float]:
    """5th-95th percentile interval that always contains the point estimate."""
    if len(samples) == 0:
        return point, point
    lo, hi = np.percentile(samples, [5.0, 95.0])
    return float(min(lo, point)), float(max(hi, point))


def speedup_of(t_base: float, t_n: float, base_n: int, n: float, mode: str) -> float:
    """Strong: ``T(base)/T(N)``; weak: throughput speedup ``N T(base) / (base T(N))``."""
    if t_n <= 0:
        return float("nan")
    k = n / base_n if mode == "weak" else 1.0
    return k * t_base / t_n


def projections(
    model: StudyModel,
    t_base: float,
    base_n: int,
    targets: Sequence[int],
    max_measured: int,
    boot: Boot,
    assumptions: Mapping[str, str],
    measured_base: float | None = None,
) -> tuple[Projection, ...]:
    """Projection rows at ``targets`` (each must be on ``boot.grid``)."""
    n = np.asarray(targets, dtype=np.float64)
    parts = model.predict(n)
    out = []
    for i, nn in enumerate(targets):
        bd = {c: float(parts[c][i]) for c in CATEGORIES}
        t = float(sum(bd.values()))
        s = speedup_of(t_base, t, base_n, nn, model.mode)
        j = int(np.searchsorted(boot.grid, nn))
        tb = boot.totals[:, j]
        k = nn / base_n if model.mode == "weak" else 1.0
        sb = k * boot.base / np.where(tb > 0, tb, np.nan)
        g = None
        if model.mode == "weak" and t > 0:
            sh, _ = weak_share(bd, bd["compute"] * model.serial_compute_ratio, assumptions)
            g = gustafson(nn, sh)
        vs = None
        if measured_base is not None:
            vs = speedup_of(measured_base, t, base_n, nn, model.mode)
        out.append(
            Projection(
                world_size=int(nn),
                step_time_s=t,
                speedup=s,
                efficiency=s * base_n / nn,
                ci90=interval(tb, t),
                speedup_ci90=interval(sb[np.isfinite(sb)], s),
                breakdown_s=bd,
                extrapolation=nn / max_measured,
                gustafson_speedup=g,
                speedup_vs_measured=vs,
            )
        )
    return tuple(out)


def optimal_world_size(model: StudyModel, base_n: int) -> int | None:
    """World size that minimizes step time (strong) or maximizes throughput (weak), if the
    model has an interior optimum; None when more GPUs always help (within 2^20)."""
    grid = np.unique(np.concatenate([np.arange(1, 4097), np.geomspace(4096, 2**20, 200)]))
    grid = np.rint(grid)
    t = model.total(grid)
    score = -grid / np.where(t > 0, t, np.inf) if model.mode == "weak" else t
    i = int(np.argmin(score))
    if i >= len(grid) - 1 or score[i] >= score[-1] - 1e-3 * abs(score[-1]):
        return None
    return max(int(grid[i]), base_n) if grid[i] >= 1 else None


def _fmt(sec: float) -> str:
    return f"{sec * 1e3:.3g} ms" if sec < 1.0 else f"{sec:.3g} s"


def overheads(model: StudyModel, sizes: Sequence[int]) -> tuple[Overhead, ...]:
    """Per world size: exposed collective time by type, other communication, growth terms."""
    n = np.asarray(sizes, dtype=np.float64)
    by_type = model.transfer.predict_by_type(n)
    xsum = model.transfer.predict(n)
    exposed = model.exposed(n)
    resid = model.residual.predict(n)
    out = []
    for i, nn in enumerate(sizes):
        rows: list[tuple[str, str, float]] = []
        for ctype, v in sorted(by_type.items()):
            sec = float(exposed[i] * v[i] / xsum[i]) if xsum[i] > 0 else 0.0
            rows.append(("communication", _LABELS.get(ctype, ctype), sec))
        rows.append(
            ("communication", "other communication (waits, host collectives)", float(resid[i]))
        )
        for c, fit in model.cats.items():
            rows.append((c, f"{c} growth term", float(fit.growth(n[i : i + 1])[0])))
        for cat, src, sec in rows:
            if sec > 1e-9:
                text = f"at N={nn}, {src} adds {_fmt(sec)} per step"
                out.append(Overhead(int(nn), cat, src, sec, text))
    return tuple(out)
