"""``analyze_scaling``: the one entry point from RunBreakdowns to a ScalingResult."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from tracescale.categories import CATEGORIES
from tracescale.classify.result import RunBreakdown
from tracescale.errors import UsageError
from tracescale.scaling.comm import DEFAULT_ALPHA_S, DEFAULT_BANDWIDTH
from tracescale.scaling.fit import DEFAULT_ASSUMPTIONS, StudyModel, fit_study
from tracescale.scaling.mode import detect_mode
from tracescale.scaling.models import SeriesFit
from tracescale.scaling.project import (
    bootstrap,
    interval,
    optimal_world_size,
    overheads,
    projections,
    serial_fraction_of,
    speedup_of,
)
from tracescale.scaling.result import (
    ModelInfo,
    Projection,
    ScalingPoint,
    ScalingResult,
    SerialFraction,
    StepStats,
    WhatIf,
)
from tracescale.scaling.serial import (
    as_serial_fraction,
    gustafson,
    karp_flatt,
    karp_flatt_by_category,
    model_t1,
    weak_share,
)
from tracescale.scaling.stats import RunAgg, aggregate, prepare, step_stats
from tracescale.table import table_of

#: Share of the step a category's fit error may reach before "poor fit" is warned.
POOR_FIT = 0.03
NOISY_CV = 0.10
FAR_EXTRAPOLATION = 8.0


def _check(
    runs: Sequence[RunBreakdown],
    what_if: Mapping[str, float] | None,
    assumptions: Mapping[str, str] | None,
) -> None:
    if not runs:
        raise UsageError("no runs to analyze")
    sizes = [r.world_size for r in runs]
    if len(set(sizes)) != len(sizes):
        raise UsageError(f"two runs with the same world size: {sorted(sizes)}")
    for r in runs:
        if len(table_of(r, "steps")) == 0:
            raise UsageError(f"run at N={r.world_size} has no steps")
    for c, f in (what_if or {}).items():
        if c not in CATEGORIES or not (f >= 0 and np.isfinite(f)):
            raise UsageError(f"--what-if {c}={f}: need a category and a factor >= 0")
    for c, k in (assumptions or {}).items():
        if c not in CATEGORIES or k not in ("serial", "parallel"):
            raise UsageError(f"assumption {c}={k}: need a category and serial|parallel")


def _series_info(fit: SeriesFit) -> dict[str, object]:
    return {"form": fit.form, "params": fit.params, "rmse_s": fit.rmse_s}


def _models(model: StudyModel) -> dict[str, ModelInfo]:
    out = {}
    for c in CATEGORIES:
        if c != "communication":
            f = model.cats[c]
            out[c] = ModelInfo(
                f.form, f.params, f.rmse_s, f.cv_error, f.candidates, f.n_points, f.assumed
            )
            continue
        tr = model.transfer
        algo = "2(N-1)*alpha" if tr.algorithm == "ring" else "2*log2(N)*alpha"
        form = f"max(0, {tr.algorithm}[{algo} + bytes-term/bandwidth] - overlap_window) + residual"
        parts = {
            "transfer": {
                "algorithm": tr.algorithm,
                "alpha_s": tr.alpha_s,
                "bandwidth_bytes_per_s": tr.bandwidth,
                "fitted": tr.fitted,
                "rmse_s": tr.rmse_s,
                "instances": tr.n_instances,
                "template_world_size": tr.template_ws,
            },
            "overlap_window": _series_info(model.overlap) if model.overlap else None,
            "residual": _series_info(model.residual),
        }
        params = {
            "alpha_s": tr.alpha_s,
            "bandwidth_bytes_per_s": tr.bandwidth if tr.bandwidth is not None else float("nan"),
        }
        out[c] = ModelInfo(
            form,
            params,
            model.comm_rmse_s,
            None,
            {},
            model.residual.n_points,
            model.residual.assumed or not tr.fitted,
            parts,
        )
    return out


def _points(
    aggs: Sequence[RunAgg],
    stats: Sequence[StepStats],
    model: StudyModel,
    assumptions: Mapping[str, str],
) -> tuple[ScalingPoint, ...]:
    base = aggs[0]
    est = base.world_size != 1
    t1c = dict(base.cats) if not est else model_t1(model)
    t1 = float(sum(t1c.values()))
    out = []
    for a, st in zip(aggs, stats, strict=True):
        n = a.world_size
        s = speedup_of(base.total, a.total, base.world_size, n, model.mode)
        s1 = speedup_of(t1, a.total, 1, n, model.mode)
        g = sh = None
        if model.mode == "weak":
            sh, _ = weak_share(a.cats, a.serial_compute, assumptions)
            g = gustafson(n, sh)
        # One run says nothing about how time changes with N: its e would only restate the
        # model's assumed T(1). Outside [0, 1] the value is kept as raw, never as a fraction.
        raw = karp_flatt(s1, n) if len(aggs) >= 2 else None
        kf = as_serial_fraction(raw)
        out.append(
            ScalingPoint(
                world_size=n,
                step_time_s=a.total,
                slowest_rank_step_time_s=st.slowest_rank_mean,
                speedup=s,
                efficiency=s * base.world_size / n,
                karp_flatt=kf,
                karp_flatt_estimated=est and raw is not None,
                karp_flatt_by_category=(
                    karp_flatt_by_category(a.cats, t1c, n, model.mode) if kf is not None else None
                ),
                gustafson_speedup=g,
                serial_share=sh,
                karp_flatt_raw=raw,
            )
        )
    return tuple(out)


def _warnings(
    aggs: Sequence[RunAgg],
    stats: Sequence[StepStats],
    model: StudyModel,
    targets: Sequence[int],
    assumed: bool,
) -> list[str]:
    sizes = [a.world_size for a in aggs]
    mean_t = float(np.mean([a.total for a in aggs]))
    w = []
    if assumed:
        w.append(
            f"single run (N={sizes[0]}): nothing can be fitted; projections use the default "
            "assumptions per category and are marked assumed"
        )
    elif len(sizes) < 3:
        w.append(
            f"only {len(sizes)} world sizes measured ({sizes}): forms chosen by fewest "
            "parameters, not cross-validation; measure at least 3 world sizes"
        )
    if not assumed:
        for c, f in model.cats.items():
            if f.rmse_s > POOR_FIT * mean_t:
                w.append(f"poor fit for {c}: {f.form} misses by {f.rmse_s * 1e3:.3g} ms (rms)")
        if model.comm_rmse_s > POOR_FIT * mean_t:
            w.append(
                f"poor fit for communication: misses by {model.comm_rmse_s * 1e3:.3g} ms (rms)"
            )
    for st in stats:
        if st.cv > NOISY_CV:
            w.append(
                f"noisy steps at N={st.world_size}: coefficient of variation {st.cv:.0%} "
                f"(> {NOISY_CV:.0%}); intervals widen and fits are less certain"
            )
    far = [t for t in targets if t > FAR_EXTRAPOLATION * max(sizes)]
    if far:
        w.append(
            f"projections at N={far} extrapolate more than {FAR_EXTRAPOLATION:g}x beyond the "
            f"largest measured N={max(sizes)}"
        )
    tr = model.transfer
    multi = sorted({n for n in sizes if n > 1})
    if not tr.template and multi:
        # A data-parallel job syncs its ranks at least once per optimizer step: none in the
        # window usually means the window missed it (accumulation cycle longer than the steps
        # profiled), and the projections then leave the job's whole communication out.
        w.append(
            f"the runs at N={', '.join(map(str, multi))} traced no collective between ranks: "
            "communication at larger N is not projected; if the ranks synchronize less often "
            "than every profiled step (gradient accumulation whose optimizer step falls "
            "outside the window), profile a window that holds one"
        )
    elif not tr.template:
        if any(a.cats["communication"] > 0 for a in aggs) or len(sizes) == 1:
            w.append(
                "no collective with a group size > 1 was traced: communication transfer at "
                "larger N is not projected (only the measured non-transfer part)"
            )
    elif not tr.fitted:
        w.append(
            f"collective transfer times could not be fitted: using alpha={DEFAULT_ALPHA_S * 1e6:g} "
            f"us and bandwidth={DEFAULT_BANDWIDTH / 1e9:g} GB/s"
        )
    if any(b < 0 for _, b, _, _ in tr.template):
        w.append("some collectives have unknown message sizes: modelled as latency only")
    return w


def analyze_scaling(
    runs: Sequence[RunBreakdown],
    *,
    mode: str = "auto",
    project: Sequence[int] | None = None,
    what_if: Mapping[str, float] | None = None,
    assumptions: Mapping[str, str] | None = None,
    seed: int = 0,
    n_boot: int = 200,
    closed_form_intervals: bool = True,
) -> ScalingResult:
    """Fit how each category scales over the runs of one study and project to new N.

    ``project``: target world sizes (default 2x, 4x, 8x the largest measured N).
    ``what_if``: category -> factor applied to its measured time before fitting; one scenario
    per entry, plus all together when there are several. ``assumptions``: category ->
    ``serial``/``parallel``, used for single-run studies and the weak-mode serial share.
    Deterministic for a given ``seed``.

    ``closed_form_intervals=False``: a strong-scaling study whose intervals the replay will
    give skips the closed form's bootstrap (``bootstrap.replicates`` is 0 and its intervals
    are points); weak scaling keeps it, its serial share's interval is the closed form's.
    """
    _check(runs, what_if, assumptions)
    runs = sorted(runs, key=lambda r: r.world_size)
    assume = dict(assumptions or {})
    datas = [prepare(r) for r in runs]
    aggs = [aggregate(d) for d in datas]
    stats = tuple(step_stats(d) for d in datas)
    mode_, reason = detect_mode(aggs, mode, [r.input_sizes for r in runs])
    model = fit_study(aggs, mode_, assume)
    single = len(runs) == 1
    base_n = aggs[0].world_size
    max_n = aggs[-1].world_size
    targets = sorted({int(t) for t in (project or [2 * max_n, 4 * max_n, 8 * max_n])})
    if any(t < 1 for t in targets):
        raise UsageError(f"--project needs world sizes >= 1, not {targets}")
    curve_n = sorted({2**k for k in range(0, int(np.log2(max(targets))) + 1)} | {*targets})
    curve_n = sorted(set(curve_n) | {a.world_size for a in aggs})
    grid = np.asarray(curve_n, dtype=np.float64)
    if not closed_form_intervals and mode_ == "strong":
        n_boot = 0

    def scenario(
        scale: Mapping[str, float] | None, m: StudyModel, aa: list[RunAgg], k: int
    ) -> tuple[SerialFraction, tuple[Projection, ...], tuple[Projection, ...]]:
        boot = bootstrap(datas, m, grid, assume, scale, seed + k, n_boot)
        f, by, t1, t1_est = serial_fraction_of(m, aa, assume)
        measured = aggs[0].total if scale else None
        proj = projections(m, aa[0].total, base_n, targets, max_n, boot, assume, measured)
        curve = projections(m, aa[0].total, base_n, curve_n, max_n, boot, assume, measured)
        frac = SerialFraction(f, interval(boot.fraction, f), by, t1, t1_est)
        return frac, proj, curve

    frac, proj, curve = scenario(None, model, aggs, 0)
    scenarios: list[WhatIf] = []
    items = list((what_if or {}).items())
    combos = [dict([it]) for it in items] + ([dict(items)] if len(items) > 1 else [])
    for k, factors in enumerate(combos, start=1):
        aa = [aggregate(d, scale=factors) for d in datas]
        m = fit_study(aa, mode_, assume)
        fr, pr, _ = scenario(factors, m, aa, k)
        label = ", ".join(f"{c}={v:g}" for c, v in factors.items())
        limit = 1.0 / fr.total if fr.total > 0 else None
        scenarios.append(WhatIf(label, factors, fr.total, limit, optimal_world_size(m, base_n), pr))

    effective = {**DEFAULT_ASSUMPTIONS, **assume} if single else assume
    return ScalingResult(
        mode=mode_,
        mode_reason=reason,
        baseline_world_size=base_n,
        assumed=single,
        assumptions=effective,
        step_stats=stats,
        points=_points(aggs, stats, model, assume),
        serial_fraction=frac,
        # Amdahl's cap holds for a fixed global problem; weak scaling grows the work with N
        # (Gustafson), where a cap would contradict the projected throughput speedups.
        amdahl_limit=1.0 / frac.total if frac.total > 0 and mode_ == "strong" else None,
        optimal_world_size=optimal_world_size(model, base_n),
        models=_models(model),
        projections=proj,
        curve=curve,
        overheads=overheads(model, [max_n, *[t for t in targets if t != max_n]]),
        what_if=tuple(scenarios),
        warnings=tuple(_warnings(aggs, stats, model, targets, single)),
        seed=seed,
        n_boot=n_boot,
        max_steps=max(d.mask.shape[1] for d in datas),
    )
