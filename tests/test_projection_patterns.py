"""Replayed projections of simulated training patterns against the simulator's own schedule.

The simulator's truth comes from its event-level scheduler (``tracescale.simulate``), never
from the replay. Measured at N=1,2,4,8 (1..16 across nodes), projected to 2x, 4x and 8x the
largest N: within 10% up to 4x and 15% at 8x, with the truth inside the 90% interval.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tracescale.pipeline import analyze
from tracescale.simulate import pattern_params, simulate

CASES = {
    "fsdp": [1, 2, 4, 8],
    "tp": [1, 2, 4, 8],
    "grad_accum": [1, 2, 4, 8],
    "launch_bound": [1, 2, 4, 8],
    "comm_types": [1, 2, 4, 8],
    "multinode": [1, 2, 4, 8, 16],
    "heavy_tail": [1, 2, 4, 8],
}


@pytest.mark.parametrize("pattern", sorted(CASES))
def test_pattern_projection_within_tolerance_and_interval(tmp_path: Path, pattern: str) -> None:
    sizes = CASES[pattern]
    top = max(sizes)
    targets = [2 * top, 4 * top, 8 * top]
    truth = simulate(
        sizes,
        tmp_path,
        pattern=pattern,
        seed=0,
        truth_at=targets,
        params=pattern_params(pattern),
        compresslevel=1,
    )
    entry = analyze(str(tmp_path), jobs=1, no_cache=True, project=targets).studies[0]
    for run in entry["runs"]:
        assert run["replay_error"] <= 0.02, (pattern, run["world_size"])
    assert "replay" in entry["scaling"]
    for k, proj in zip((2, 4, 8), entry["scaling"]["projections"], strict=True):
        true = truth["speedup"][str(proj["world_size"])]
        assert abs(proj["speedup"] / true - 1) <= (0.10 if k <= 4 else 0.15), (pattern, k)
        lo, hi = proj["speedup_ci90"]
        assert lo <= true <= hi, (pattern, k, lo, true, hi)
