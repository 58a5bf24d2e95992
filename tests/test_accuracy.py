"""The analyzer recovers the simulator's truth: the end-to-end accuracy contract."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tracescale.categories import CATEGORIES
from tracescale.pipeline import analyze
from tracescale.simulate import make_params, simulate, true_speedup

CASES = {
    "strong-seed0": ("strong", 0, {}),
    "strong-seed7-dataloader-bound": ("strong", 7, {"dl_parallel": 0.08, "dl_serial": 0.01}),
    "weak-seed1": ("weak", 1, {}),
    "strong-comm-heavy": ("strong", 3, {"bandwidth": 5e9, "alpha": 5e-5}),
    "strong-straggler": ("strong", 2, {"straggler_rank": 1, "straggler_factor": 1.3}),
    "strong-late-straggler": ("strong", 4, {"straggler_rank": 2, "straggler_factor": 1.5}),
    "weak-straggler": ("weak", 6, {"straggler_rank": 1, "straggler_factor": 1.3}),
    # Bucketed AllReduce whose last bucket cannot hide: found by a random sweep, where a plain
    # "transfer minus overlap window" model was off by 40-75% at N=32.
    "strong-large-model": ("strong", 627, {"model_bytes": 4e8, "comm_start": 0.0}),
    "strong-many-buckets": ("strong", 663, {"model_bytes": 2e8, "buckets": 8, "comm_start": 0.3}),
    "weak-slow-network": (
        "weak",
        888,
        {"bandwidth": 5e9, "alpha": 1e-4, "model_bytes": 2e8, "dl_parallel": 0.0},
    ),
}


def _study(tmp_path: Path, mode: str, seed: int, sets: dict[str, float]):
    params = make_params(sets)
    simulate([1, 2, 4, 8], tmp_path, mode=mode, seed=seed, params=params, compresslevel=1)
    truth = json.loads((tmp_path / "truth.json").read_text())
    study = analyze(str(tmp_path), jobs=1, project=[32], mode="auto", no_cache=True)
    return params, truth, study


@pytest.fixture(scope="module")
def case_study(tmp_path_factory: pytest.TempPathFactory):
    """Function: a case's (params, truth, study), simulated and analyzed once per module (the
    Amdahl test reads the comm-heavy case's runs, which its accuracy test analyzes too)."""
    done: dict[str, tuple] = {}

    def get(case: str) -> tuple:
        if case not in done:
            done[case] = _study(tmp_path_factory.mktemp("acc"), *CASES[case])
        return done[case]

    return get


@pytest.mark.parametrize("case", sorted(CASES))
def test_breakdown_and_projection_match_truth(case_study, case: str) -> None:
    mode = CASES[case][0]
    params, truth, study = case_study(case)
    entry = study.studies[0]
    assert entry["mode"] == mode, entry["mode_reason"]
    for run in entry["runs"]:
        t = truth["runs"][str(run["world_size"])]
        step = t["step_time"]
        assert run["step_time_s"]["mean"] == pytest.approx(step, rel=0.01)
        total = sum(run["breakdown_s"].values())
        assert total == pytest.approx(run["step_time_s"]["mean"], rel=0.005)
        for c in CATEGORIES:
            assert abs(run["breakdown_s"][c] - t["breakdown"][c]) <= 0.05 * step, (case, c)
    scaling = entry["scaling"]
    assert scaling["serial_fraction"]["total"] == pytest.approx(truth["serial_fraction"], abs=0.02)
    proj = {p["world_size"]: p for p in scaling["projections"]}
    assert proj[32]["speedup"] == pytest.approx(true_speedup(params, mode, 32), rel=0.10)
    # Karp–Flatt is exactly the formula on the measured step times.
    t1 = entry["runs"][0]["step_time_s"]["mean"]
    for point, run in zip(scaling["points"], entry["runs"], strict=False):
        n = run["world_size"]
        if n == 1:
            assert point["karp_flatt"] is None
            continue
        s = t1 / run["step_time_s"]["mean"]
        if mode == "weak":
            s = n * t1 / run["step_time_s"]["mean"]
        assert point["karp_flatt"] == pytest.approx((1 / s - 1 / n) / (1 - 1 / n), rel=1e-9)


def test_plain_amdahl_misses_comm_heavy_truth(case_study) -> None:
    """Ignoring communication growth (Amdahl on the measured N=1..8 step times) is far off."""
    import numpy as np

    mode, _seed, _sets = CASES["strong-comm-heavy"]
    params, _truth, study = case_study("strong-comm-heavy")
    runs = study.studies[0]["runs"]
    n = np.array([r["world_size"] for r in runs], dtype=float)
    t = np.array([r["step_time_s"]["mean"] for r in runs])
    # Least squares t(N) = a + b/N, the classic Amdahl fit.
    a, b = np.linalg.lstsq(np.stack([np.ones_like(n), 1 / n], axis=1), t, rcond=None)[0]
    amdahl_32 = t[0] / (a + b / 32)
    truth_32 = true_speedup(params, mode, 32)
    assert abs(amdahl_32 - truth_32) / truth_32 > 0.25
