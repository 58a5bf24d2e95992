"""What-ifs through the replay checked against the simulator run with that change: the
data loader freed (``dataloader=0``), the syncs' host time gone (``sync=0``) and both, at the
measured world sizes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tracescale.api import analyze
from tracescale.simulate import SimParams, simulate, true_step_time


def test_a_free_loader_and_free_syncs_match_the_simulator_without_them(tmp_path: Path) -> None:
    p = replace(SimParams(), layers=4, jitter=0.0)
    simulate([1, 2, 4], tmp_path, steps=5, params=p, compresslevel=1)
    what_if = {"dataloader": 0.0, "sync": 0.0}
    doc = analyze(tmp_path, project=[1, 2, 4], what_if=what_if, jobs=1, no_cache=True)
    entries = {e["scenario"]: e for e in doc.to_dict()["studies"][0]["scaling"]["what_if"]}
    truth = {
        "dataloader=0": replace(p, dl_serial=0.0, dl_parallel=0.0),
        "sync=0": replace(p, sync_stall=0.0),
        "dataloader=0, sync=0": replace(p, dl_serial=0.0, dl_parallel=0.0, sync_stall=0.0),
    }
    assert set(entries) == set(truth)
    for name, free in truth.items():
        entry = entries[name]
        assert entry["projections_source"] == "replay"
        assert entry["serial_fraction_source"] == "replay"
        for proj in entry["projections"]:
            n = int(proj["world_size"])
            want = true_step_time(free, "strong", n)
            assert proj["step_time_s"] == pytest.approx(want, rel=0.05), (name, n)


RUN = Path(__file__).resolve().parents[1] / "sample_traces" / "sim_gpu_strong" / "ws1"


def test_a_single_run_is_replayed_under_its_assumptions() -> None:
    """One world size fits no law: the replay takes the stated assumptions per category, so a
    serial compute (``--assume compute=serial``) keeps the kernels' time at every N."""
    plain = analyze(RUN, jobs=1, no_cache=True).to_dict()["studies"][0]["scaling"]
    serial = analyze(RUN, assumptions={"compute": "serial"}, jobs=1, no_cache=True).to_dict()
    sc = serial["studies"][0]["scaling"]
    for s in (plain, sc):
        assert s["projections_source"] == "replay"
        assert s["serial_fraction"]["source"] == "replay"
        for p in s["projections"]:  # the closed form's figure only beside, labelled
            rel = p["step_time_s"] / p["closed_form_step_time_s"] - 1
            assert abs(rel) < 0.05, (p["world_size"], rel)
    assert plain["serial_fraction"]["by_category"]["compute"] == 0.0
    assert sc["serial_fraction"]["by_category"]["compute"] > 0.5
    assert sc["projections"][-1]["step_time_s"] > 4 * plain["projections"][-1]["step_time_s"]
