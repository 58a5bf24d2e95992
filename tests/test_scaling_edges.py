"""Scaling stage: single runs, missing N=1, warnings, step statistics, properties."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracescale.errors import UsageError
from tracescale.scaling import analyze_scaling
from tracescale.scaling.synthetic import Synth, run, study

BASE = Synth(
    serial={"compute": 0.02, "sync": 0.01, "host": 0.005},
    parallel={"compute": 0.5, "dataloader": 0.05},
    buckets=[20_000_000, 5_000_000],
    alpha_s=3e-5,
    bandwidth=10e9,
    overlap=0.1,
)


def test_without_n1_karp_flatt_is_estimated_over_model_t1():
    res = analyze_scaling(study(BASE, (2, 4, 8)), n_boot=10)
    assert res.baseline_world_size == 2
    assert res.serial_fraction.t1_estimated
    assert res.serial_fraction.t1_s == pytest.approx(BASE.step_time(1), rel=1e-9)
    t1 = res.serial_fraction.t1_s
    for p in res.points:
        s1 = t1 / p.step_time_s
        n = p.world_size
        assert p.karp_flatt == pytest.approx((1 / s1 - 1 / n) / (1 - 1 / n), rel=1e-9)
        assert p.karp_flatt_estimated
    assert res.points[0].speedup == 1.0 and res.points[0].efficiency == 1.0
    assert res.points[2].efficiency == pytest.approx(res.points[2].speedup * 2 / 8)


def test_single_run_uses_documented_assumptions():
    exposed = dataclasses.replace(BASE, overlap=0.01)  # comm partly exposed at N=4
    res = analyze_scaling([run(exposed, 4)], n_boot=10)
    assert res.assumed and res.to_dict()["assumed"] is True
    assert res.assumptions["compute"] == "parallel" and res.assumptions["sync"] == "serial"
    assert res.models["compute"].form == "b/N" and res.models["sync"].form == "a"
    assert all(m.assumed for m in res.models.values())
    assert any("single run" in w for w in res.warnings)
    # communication follows the alpha-beta model fitted from the two message sizes
    comm = res.models["communication"].to_dict()["transfer"]
    assert comm["fitted"] and comm["alpha_s"] == pytest.approx(3e-5, rel=1e-6)
    for pr in res.projections:
        assert pr.breakdown_s["communication"] == pytest.approx(
            exposed.breakdown(pr.world_size)["communication"], rel=1e-6
        )
    over = analyze_scaling([run(exposed, 4)], assumptions={"compute": "serial"}, n_boot=5)
    assert over.models["compute"].form == "a"
    assert over.serial_fraction.total > res.serial_fraction.total


def test_single_run_at_n1_without_collectives_warns():
    res = analyze_scaling([run(BASE, 1)], n_boot=5)
    assert any("no collective" in w for w in res.warnings)
    assert res.projections[0].world_size == 2


def test_warnings_noise_few_sizes_extrapolation():
    noisy = dataclasses.replace(BASE, jitter=0.3)
    res = analyze_scaling(study(noisy, (1, 2)), project=[4, 64], n_boot=10)
    text = " | ".join(res.warnings)
    assert "only 2 world sizes" in text
    assert "noisy steps" in text
    assert "N=[64]" in text and "extrapolate" in text


def test_step_stats_and_slowest_rank():
    r = run(dataclasses.replace(BASE, jitter=0.05), 4, seed=1)
    steps = r.steps.copy()
    steps.loc[steps["rank"] == 3, "duration"] += 0.01
    steps.loc[steps["rank"] == 3, "compute"] += 0.01
    r = dataclasses.replace(r, steps=steps)
    res = analyze_scaling([run(BASE, 1), r], n_boot=5)
    s = res.step_stats[1]
    assert s.slowest_rank == 3 and s.n_ranks == 4 and s.n_steps == BASE.steps
    per = steps.groupby("rank")["duration"].mean()
    assert s.mean == pytest.approx(per.mean())
    assert s.slowest_rank_mean == pytest.approx(per.max())
    level = steps.groupby("step")["duration"].mean()
    assert s.median == pytest.approx(level.median())
    assert s.p10 == pytest.approx(np.percentile(level, 10))
    assert res.points[1].slowest_rank_step_time_s == pytest.approx(per.max())
    assert res.points[1].step_time_s == pytest.approx(per.mean())


def test_bad_inputs():
    with pytest.raises(UsageError):
        analyze_scaling([])
    with pytest.raises(UsageError):
        analyze_scaling([run(BASE, 2), run(BASE, 2)])
    with pytest.raises(UsageError):
        analyze_scaling(study(BASE), what_if={"lunch": 0.0})
    with pytest.raises(UsageError):
        analyze_scaling(study(BASE), assumptions={"sync": "maybe"})


@settings(max_examples=25, deadline=None)
@given(
    a=st.floats(0.0, 0.05),
    b=st.floats(0.001, 2.0),
    dl=st.floats(0.0, 0.2),
    nbytes=st.integers(0, 200_000_000),
    alpha=st.floats(0.0, 1e-4),
    overlap=st.floats(0.0, 0.5),
    jitter=st.floats(0.0, 0.2),
    mode=st.sampled_from(["strong", "weak"]),
    sizes=st.sampled_from([(1,), (1, 2), (2, 4, 8), (1, 2, 4, 8), (1, 3, 6)]),
    seed=st.integers(0, 5),
)
def test_projections_nonnegative_and_finite(
    a, b, dl, nbytes, alpha, overlap, jitter, mode, sizes, seed
):
    p = Synth(
        serial={"compute": a, "sync": a / 2},
        parallel={"compute": b, "dataloader": dl},
        buckets=[nbytes] * 3,
        alpha_s=alpha,
        overlap=overlap,
        mode=mode,
        jitter=jitter,
        steps=3,
    )
    res = analyze_scaling(study(p, sizes, seed), project=[16, 1000], what_if={"sync": 0}, n_boot=8)
    rows = [*res.projections, *res.curve, *[q for w in res.what_if for q in w.projections]]
    for pr in rows:
        assert np.isfinite(pr.step_time_s) and pr.step_time_s >= 0
        assert all(np.isfinite(v) and v >= 0 for v in pr.breakdown_s.values())
        assert pr.ci90[0] <= pr.step_time_s <= pr.ci90[1]
    assert 0 <= res.serial_fraction.total <= 1 + 1e-9


def test_karp_flatt_is_a_fraction_or_null_and_the_raw_value_is_kept():
    from tracescale.report.bounds import karp_flatt_cell
    from tracescale.scaling.synthetic import Synth as _Synth

    single = analyze_scaling([run(BASE, 4)], n_boot=5)
    for p in single.points:  # one run: e would only restate the assumed T(1)
        assert (p.karp_flatt, p.karp_flatt_raw, p.karp_flatt_by_category) == (None, None, None)
    # communication dwarfs the work: every larger N is slower than N=1
    slow = _Synth(serial={"compute": 0.01}, parallel={"compute": 0.02}, buckets=[400_000_000])
    res = analyze_scaling(study(slow, (1, 2, 4)), n_boot=5)
    for p in res.points[1:]:
        s, n = p.speedup, p.world_size
        assert s < 1 and p.karp_flatt_raw == pytest.approx((1 / s - 1 / n) / (1 - 1 / n))
        assert p.karp_flatt_raw > 1 and p.karp_flatt is None and p.karp_flatt_by_category is None
        d = p.to_dict()
        assert d["karp_flatt"] is None and d["karp_flatt_raw"] == p.karp_flatt_raw
        assert karp_flatt_cell(d, 3) == ">1 (slower)"
    fine = analyze_scaling(study(BASE, (1, 2, 4)), n_boot=5)
    for p in fine.points[1:]:
        assert p.karp_flatt is not None and 0 <= p.karp_flatt <= 1
        assert p.karp_flatt == p.karp_flatt_raw
