"""The same units of work spread over many GPU streams, many steps or many process groups
attribute exactly what the common shape (a few steps, one stream, one group) attributes: every
category's total over the run is the same. What each shape *costs* is measured by
``benchmarks/bench_shapes.py`` (``make bench``) as CPU-time ratios, not here: a timed assertion
swung from 2.1x to 4.2x between an idle machine and CI's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.linear_work_traces import write_study
from tracescale.api import analyze


def _totals(path: Path) -> tuple[int, dict[str, float]]:
    """Steps and each category's seconds summed over the run's steps."""
    [run] = analyze(path, jobs=1, no_cache=True, progress=False).runs
    steps = int(run["steps"])
    return steps, {k: v * steps for k, v in run["breakdown_s"].items()}


@pytest.mark.parametrize(
    ("units", "common", "spread", "steps"),
    [
        (2_000, {}, {"streams": 2_000}, 4),
        (2_000, {}, {"steps": 2_000}, 2_000),
        (200, {"groups": 1}, {"groups": 200}, 4),
    ],
    ids=["streams", "steps", "groups"],
)
def test_a_spread_shape_attributes_what_the_common_shape_does(
    tmp_path: Path, units: int, common: dict[str, Any], spread: dict[str, Any], steps: int
) -> None:
    base_steps, base = _totals(write_study(tmp_path / "common", units, **common))
    other_steps, other = _totals(write_study(tmp_path / "spread", units, **spread))
    assert (base_steps, other_steps) == (4, steps)
    assert base["compute"] == pytest.approx(units * 8e-6, rel=1e-9)
    for category, seconds in base.items():
        assert other[category] == pytest.approx(seconds, rel=1e-6, abs=1e-12), category
