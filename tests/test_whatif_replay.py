"""What-ifs through the replay checked against the simulator run with that change: the
data loader freed (``dataloader=0``), at the measured world sizes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tracescale.api import analyze
from tracescale.simulate import SimParams, simulate, true_step_time


def test_a_free_loader_matches_the_simulator_without_one(tmp_path: Path) -> None:
    p = replace(SimParams(), layers=4, jitter=0.0)
    simulate([1, 2, 4], tmp_path, steps=5, params=p)
    doc = analyze(
        tmp_path, project=[1, 2, 4], what_if={"dataloader": 0.0}, jobs=1, no_cache=True
    ).to_dict()
    (entry,) = doc["studies"][0]["scaling"]["what_if"]
    assert entry["projections_source"] == "replay"
    assert entry["serial_fraction_source"] == "replay"
    free = replace(p, dl_serial=0.0, dl_parallel=0.0)
    for proj in entry["projections"]:
        n = int(proj["world_size"])
        assert proj["step_time_s"] == pytest.approx(true_step_time(free, "strong", n), rel=0.05)
