"""Weak scaling grows the work with N: no Amdahl cap and no T_inf/T(1) "serial fraction" of a
fixed problem anywhere in its document or report, and throughput wording in findings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tracescale import api
from tracescale.findings import top_findings
from tracescale.report.render import render
from tracescale.simulate import simulate


@pytest.fixture(scope="module")
def weak(tmp_path_factory: pytest.TempPathFactory) -> api.Study:
    out: Path = tmp_path_factory.mktemp("weak") / "sim"
    simulate([1, 2, 4], out, steps=3, mode="weak")
    return api.analyze(str(out), jobs=1, no_cache=True, project=[16, 32])


def test_no_amdahl_cap_or_replay_serial_fraction_in_weak_mode(weak: api.Study) -> None:
    study: dict[str, Any] = weak.doc["studies"][0]
    sc = study["scaling"]
    assert study["mode"] == "weak"
    assert sc["amdahl_limit"] is None and weak.scaling.amdahl_limit is None
    assert sc["replay"]["serial_fraction"] is None
    assert 0 < sc["serial_fraction"]["total"] < 0.5  # the measured category share stands
    assert sc["serial_fraction"]["source"] == "attribution"
    speedups = [p["speedup"] for p in sc["projections"]]
    assert max(speedups) > 10  # throughput keeps growing: a cap of 1/f would contradict it
    text = render(weak.doc, "table", width=200)
    assert "caps speedup" not in text and "Amdahl's cap does not apply" in text


def test_weak_optimum_speaks_of_throughput(weak: api.Study) -> None:
    study = weak.doc["studies"][0]
    study["scaling"]["optimal_world_size"] = 10_000
    study["scaling"].pop("curve", None)
    texts = [f["text"] for f in top_findings(study, limit=10) if f["kind"] == "context"]
    assert "The model puts the highest throughput at 10000 GPUs, 2500x beyond the largest " in (
        " ".join(texts)
    )
    assert not any("lowest step time" in t for t in texts)
