"""Projections through the execution-graph replay, end to end on shipped and real studies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracescale.cli.main import cli
from tracescale.pipeline import analyze

ROOT = Path(__file__).resolve().parents[1]
SIM = ROOT / "sample_traces" / "sim_gpu_strong"


@pytest.fixture(scope="module")
def sim_study() -> dict[str, object]:
    return analyze(str(SIM), jobs=1, project=[16, 32, 64], no_cache=True).studies[0]


def test_replay_error_is_small_on_every_run(sim_study: dict[str, object]) -> None:
    runs = sim_study["runs"]
    assert [r["world_size"] for r in runs] == [1, 2, 4, 8]
    for r in runs:
        assert 0.0 <= r["replay_error"] <= 0.02


def test_replayed_projection_holds_the_truth(sim_study: dict[str, object]) -> None:
    truth = json.loads((SIM / "truth.json").read_text())["speedup"]
    scaling = sim_study["scaling"]
    assert scaling["replay"]["base_world_size"] == 8
    for p in scaling["projections"]:
        true = truth[str(p["world_size"])]
        assert p["speedup"] == pytest.approx(true, rel=0.10)
        lo, hi = p["speedup_ci90"]
        assert lo <= true <= hi, (p["world_size"], lo, true, hi)
        assert p["closed_form_step_time_s"] > 0
        assert sum(p["breakdown_s"].values()) == pytest.approx(p["step_time_s"], rel=1e-9)
    f = scaling["replay"]["serial_fraction"]
    assert 0.0 <= f <= 1.0
    truth_f = json.loads((SIM / "truth.json").read_text())["serial_fraction"]
    assert f == pytest.approx(truth_f, abs=0.02)


def test_headline_serial_fraction_is_the_replays(sim_study: dict[str, object]) -> None:
    """T_inf/T(1) is the headline, reproducible from the JSON; its categories are the replayed
    step at infinite N cut by category, summing to it; the closed form is a labelled field."""
    sc = sim_study["scaling"]
    sf = sc["serial_fraction"]
    assert sf["source"] == "replay"
    assert sf["total"] == sc["replay"]["serial_fraction"]
    assert sf["total"] == pytest.approx(sf["t_inf_s"] / sf["t1_s"], rel=1e-12)
    assert sc["amdahl_limit"] == pytest.approx(1 / sf["total"], rel=1e-12)
    lo, hi = sf["ci90"]
    truth_f = json.loads((SIM / "truth.json").read_text())["serial_fraction"]
    assert lo <= truth_f <= hi
    assert sum(sf["by_category"].values()) == pytest.approx(sf["total"], rel=1e-9)
    closed = sf["closed_form_by_category"]
    assert sum(closed.values()) == pytest.approx(sf["closed_form_total"], rel=1e-9)
    assert "cross-check" in sf["closed_form_note"]


def test_serial_fraction_parts_are_the_replays_and_the_closed_form_is_kept_apart() -> None:
    from tracescale.replay.apply import _headline_serial

    def scaling(closed: float) -> dict[str, object]:
        by = {"sync": closed / 4, "host": 3 * closed / 4}
        return {"serial_fraction": {"total": closed, "ci90": [closed, closed], "by_category": by}}

    doc = scaling(0.08)
    parts = {"sync": 0.004, "dataloader": 0.006}
    _headline_serial(doc, (0.01, 0.009, 0.011), (0.1, 0.1, 0.1), parts)
    sf = doc["serial_fraction"]
    assert sf["total"] == pytest.approx(0.1)
    assert sf["by_category"]["sync"] == pytest.approx(0.04)
    assert sf["by_category"]["dataloader"] == pytest.approx(0.06)
    assert sf["by_category"]["host"] == 0.0
    assert sf["ci90"] == pytest.approx([0.09, 0.11])
    assert doc["amdahl_limit"] == pytest.approx(10.0)
    assert sf["closed_form_total"] == 0.08
    assert sf["closed_form_by_category"] == pytest.approx({"sync": 0.02, "host": 0.06})


def test_unmeasured_inter_node_tier_is_named_and_can_be_supplied() -> None:
    base = ["analyze", str(SIM), "--project", "16", "-j1", "--no-cache", "--format", "json"]
    plain = CliRunner().invoke(cli, [*base, "--gpus-per-node", "8"])
    assert plain.exit_code == 0, plain.output
    doc = json.loads(plain.output)["studies"][0]
    assert any("no inter-node collective was measured" in w for w in doc["warnings"])
    slow = CliRunner().invoke(
        cli,
        [
            *base,
            "--gpus-per-node",
            "8",
            "--inter-node-bandwidth",
            "2",
            "--inter-node-latency",
            "50",
        ],
    )
    assert slow.exit_code == 0, slow.output
    sdoc = json.loads(slow.output)["studies"][0]
    t_plain = doc["scaling"]["projections"][0]["step_time_s"]
    t_slow = sdoc["scaling"]["projections"][0]["step_time_s"]
    assert t_slow > t_plain
    assert any("given inter-node latency 50 us" in w for w in sdoc["warnings"])


def test_cpu_study_is_replayed_and_projected_by_the_replay() -> None:
    study = analyze(str(ROOT / "sample_traces" / "ddp_cpu_strong"), jobs=1, no_cache=True).studies[
        0
    ]
    for r in study["runs"]:
        assert r["replay_error"] <= 0.02
    assert study["scaling"]["projections_source"] == "replay"


def test_real_8_rank_nccl_trace_replays(shared_traces: Path) -> None:
    study = analyze(str(shared_traces / "external" / "param_dlrm_8rank"), jobs=1, no_cache=True)
    (run,) = study.studies[0]["runs"]
    assert run["replay_error"] <= 0.02
