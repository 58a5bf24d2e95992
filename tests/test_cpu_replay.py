"""CPU-only (gloo) studies are projected by the replay: the runloop threads' collectives are
tied to the main thread (``replay.waits.host_collectives``), the replay gives back every
measured run, and the projections and the serial fraction say their source is the replay."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.minitrace import MiniTrace
from tracescale.api import analyze
from tracescale.classify.rank import classify_rank
from tracescale.classify.rules import load_rules
from tracescale.ingest import load_trace
from tracescale.ingest.steps import find_steps
from tracescale.replay.engine.schedule import measured_step_times, replay
from tracescale.replay.graph.build import build_graph
from tracescale.replay.waits.host_collectives import host_collective_edges

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


@pytest.fixture(scope="module", params=["ddp_cpu_strong", "ddp_cpu_weak"])
def cpu_study(request: pytest.FixtureRequest) -> dict[str, Any]:
    doc = analyze(SAMPLES / str(request.param), jobs=1, no_cache=True).to_dict()
    study: dict[str, Any] = doc["studies"][0]
    return study


def test_cpu_studies_are_projected_by_the_replay(cpu_study: dict[str, Any]) -> None:
    sc = cpu_study["scaling"]
    assert {r["world_size"] for r in cpu_study["runs"]} == {1, 2, 4}
    for run in cpu_study["runs"]:
        assert run["replay_error"] <= 0.02, run["world_size"]
    assert sc["projections_source"] == "replay"
    assert "replay" in sc and sc["replay"]["replay_error"]
    for p in sc["projections"]:  # the closed form only beside, labelled
        assert "closed_form_step_time_s" in p
    assert any("gloo" in a for a in sc["replay"]["assumptions"])
    if sc["mode"] == "strong":
        sf = sc["serial_fraction"]
        assert sf["source"] == "replay"
        assert sum(sf["by_category"].values()) == pytest.approx(sf["total"], abs=1e-9)
    assert not any("closed form" in w and "CPU" in w for w in cpu_study["warnings"])


def test_a_faster_gloo_collective_shortens_the_replayed_step() -> None:
    """The graph rewritten for gloo replays its measured timeline exactly, infers the main
    thread's waits, and halving the collectives' time shortens the step."""
    path = next((SAMPLES / "ddp_cpu_strong" / "ws2").glob("*.json.gz"))
    trace = load_trace(str(path))
    rules = load_rules()
    coll = classify_rank(trace, rules).collectives
    raw = build_graph(trace, find_steps(trace), coll, rules)
    g, waits = host_collective_edges(raw)
    assert waits >= 1
    measured = measured_step_times(raw)
    assert np.allclose(replay(g).step_time, measured, rtol=1e-9)
    dur = g.dur / 1e9
    nodes = g.collectives["node"].to_numpy()
    fast = dur.copy()
    fast[nodes] *= 0.5
    gain = measured.mean() - replay(g, fast).step_time.mean()
    assert gain > 0.01 * measured.mean()


ALPHA_US, BYTES_PER_US, NBYTES = 50.0, 1e3, 4_000_000  # per hop, 1 GB/s, the message


def _comm_us(n: int) -> float:
    return 0.0 if n == 1 else 2 * (n - 1) * ALPHA_US + 2 * (n - 1) / n * NBYTES / BYTES_PER_US


def _step_us(n: int) -> float:
    """1 ms loader, 60 ms / N of compute, enqueue, ring AllReduce, 0.1 ms, 2 ms optimizer."""
    return 1000 + 60_000 / n + 50 + _comm_us(n) + 100 + 2000


def _gloo_study(root: Path) -> None:
    for n in (1, 2, 4):
        for r in range(n):
            t = MiniTrace(rank=r, world_size=n)
            o = 0.0
            for s in range(5):
                t.step(s, o, _step_us(n)).dataloader(o, 1000)
                t.host("aten::mm", o + 1000, 60_000 / n)
                e = o + 1000 + 60_000 / n
                if n > 1:
                    t.host("c10d::allreduce_", e, 50).gloo("gloo:all_reduce", e + 50, _comm_us(n))
                    t.events[-1]["args"] = {"Input Dims": [[NBYTES // 4]], "Input type": ["float"]}
                t.annotation("Optimizer.step#SGD.step", e + 150 + _comm_us(n), 2000)
                o += _step_us(n)
            t.write(root / f"ws{n}" / f"rank{r}.json")


def test_a_gloo_study_is_projected_and_its_serial_fraction_replayed(tmp_path: Path) -> None:
    """A CPU DDP study with a ring AllReduce on the gloo runloop: the replay projects 8 and 16
    ranks and gives the serial fraction (loader, enqueue, optimizer over T(1)) exactly."""
    _gloo_study(tmp_path)
    doc = analyze(tmp_path, project=[8, 16], jobs=1, no_cache=True).to_dict()
    sc = doc["studies"][0]["scaling"]
    assert sc["projections_source"] == "replay"
    for p in sc["projections"]:
        n = int(p["world_size"])
        assert p["step_time_s"] == pytest.approx(_step_us(n) * 1e-6, rel=0.01), n
    sf = sc["serial_fraction"]
    assert sf["source"] == "replay"
    assert sf["total"] == pytest.approx(3150 / _step_us(1), rel=0.01)
    assert sf["by_category"]["idle"] == pytest.approx(0.0, abs=1e-6)
