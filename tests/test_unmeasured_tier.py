"""Projections across a topology tier never measured: the interval covers plausible links.

Studies measured within one node (N <= gpus_per_node) are projected past it. The point
estimate keeps the stated assumption (intra-node link); the 90% interval must reach the
simulator's slower inter-node link, and stay narrow where the tier was supplied or measured.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tracescale.pipeline import analyze
from tracescale.replay.links.links import (
    UNMEASURED_INTER_BANDWIDTH_FLOOR,
    UNMEASURED_INTER_LATENCY_CEILING,
    fit_comm,
)
from tracescale.replay.links.topology import INTER, INTRA
from tracescale.simulate import pattern_params, simulate

SIZES = [1, 2, 4, 8]
TARGETS = [16, 32, 64]


def _instances(groups: list[int]) -> pd.DataFrame:
    rows = []
    for g in groups:
        for nbytes in (1e3, 1e8):
            t = 2 * (g - 1) * 1e-5 + 2 * (g - 1) / g * nbytes / 5e10
            rows.append(("all_reduce", "RING_SIMPLE", nbytes, g, t, g))
    return pd.DataFrame(
        rows, columns=["collective", "algo", "bytes", "group", "transfer", "world_size"]
    )


def test_unmeasured_inter_tier_keeps_intra_point_and_slow_alternative() -> None:
    comm = fit_comm(_instances([2, 4, 8]), gpus_per_node=8)
    intra = comm.lookup("all_reduce", "RING_SIMPLE", INTRA)
    inter = comm.lookup("all_reduce", "RING_SIMPLE", INTER)
    assert (inter.alpha_s, inter.inv_bw) == (intra.alpha_s, intra.inv_bw)
    assert inter.alt == pytest.approx(
        (
            intra.alpha_s * UNMEASURED_INTER_LATENCY_CEILING,
            intra.inv_bw / UNMEASURED_INTER_BANDWIDTH_FLOOR,
        )
    )
    fast = comm.transfer("all_reduce", "RING_SIMPLE", 1e8, 8, 8, 16)
    slow = comm.transfer("all_reduce", "RING_SIMPLE", 1e8, 8, 8, 16, end=1)
    assert slow > 5 * fast


def test_measured_or_supplied_inter_tier_has_no_plausible_range() -> None:
    measured = fit_comm(_instances([2, 4, 8, 16]), gpus_per_node=8)
    assert measured.lookup("all_reduce", "RING_SIMPLE", INTER).alt is None
    supplied = fit_comm(_instances([2, 4, 8]), 8, inter_bandwidth=5e9, inter_latency=3e-5)
    got = supplied.lookup("all_reduce", "RING_SIMPLE", INTER)
    assert got.alt is None
    assert got.inv_bw == pytest.approx(1 / 5e9)


def _simulate(tmp_path: Path, overrides: dict[str, float | int]) -> tuple[dict[str, float], Path]:
    params = pattern_params("multinode", overrides)
    truth = simulate(
        SIZES,
        tmp_path,
        pattern="multinode",
        seed=0,
        truth_at=TARGETS,
        params=params,
        compresslevel=1,
    )
    return truth["speedup"], tmp_path


@pytest.fixture(scope="module")
def studies(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """Function: the (true speedups, folder) of a preset, simulated once for the module (the
    plain preset is read by two tests; analyze with no_cache writes nothing there)."""
    done: dict[str, tuple[dict[str, float], Path]] = {}

    def get(overrides: dict[str, float | int]) -> tuple[dict[str, float], Path]:
        key = repr(sorted(overrides.items()))
        if key not in done:
            done[key] = _simulate(tmp_path_factory.mktemp("tier"), overrides)
        return done[key]

    return get


@pytest.mark.parametrize(
    "overrides",
    [
        {},  # preset: inter-node bandwidth 1/6 of intra-node, 3x the per-hop latency
        {"inter_bandwidth": 5e9, "inter_alpha": 6e-5},  # 1/10 of it, 6x the latency
    ],
    ids=["inter_1_6", "inter_1_10"],
)
def test_interval_covers_truth_past_the_measured_node(
    studies, overrides: dict[str, float | int]
) -> None:
    truth, path = studies(overrides)
    entry = analyze(str(path), jobs=1, no_cache=True, project=TARGETS).studies[0]
    warning = next(w for w in entry["warnings"] if "no inter-node collective" in w)
    assert "1/12 of its bandwidth" in warning
    for proj in entry["scaling"]["projections"]:
        true = truth[str(proj["world_size"])]
        lo, hi = proj["speedup_ci90"]
        assert lo <= true <= hi, (proj["world_size"], lo, true, hi)
        # the point keeps the stated assumption (intra-node link): faster than the truth
        assert proj["speedup"] > true


def test_supplied_inter_node_link_keeps_a_narrow_interval(studies) -> None:
    truth, path = studies({})
    entry = analyze(
        str(path),
        jobs=1,
        no_cache=True,
        project=TARGETS,
        inter_node_bandwidth=50e9 / 6,
        inter_node_latency=30e-6,
    ).studies[0]
    for proj in entry["scaling"]["projections"]:
        true = truth[str(proj["world_size"])]
        lo, hi = proj["speedup_ci90"]
        assert lo <= true <= hi, (proj["world_size"], lo, true, hi)
        assert hi / lo < 1.2, (proj["world_size"], lo, hi)
