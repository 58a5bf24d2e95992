"""Expert load imbalance on its own line: the wait at MoE's all-to-alls for the busiest expert
rank, apart from the transfers and from the waits at other collectives, at each projected N.

Truth: the generator's step with every rank's expert load drawn as the mean (no imbalance)
subtracted from its step with the drawn loads, at the same N and seed."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.independent import gen, moe
from tests.independent.variants import VARIANTS
from tracescale.api import analyze
from tracescale.report.render import render


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, dict[str, Any], Any]:
    p = replace(VARIANTS["moe/no-waits"](), layers=4, steps=4)
    where = tmp_path_factory.mktemp("moe")
    gen.build_study(p, str(where))
    got = analyze(where, project=list(p.targets), jobs=1, no_cache=True)
    return p, got.studies[0], got


def _balanced_step(p: Any, n: int, monkeypatch: pytest.MonkeyPatch) -> float:
    with monkeypatch.context() as m:
        m.setattr(moe, "_load", lambda s: np.ones(s.n))
        return gen.true_step(p, n, 1)


def test_the_imbalance_line_is_the_truths_within_two_points(
    study: tuple[Any, dict[str, Any], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    p, entry, _ = study
    t1 = gen.true_step(p, 1, 1)
    lines = {(o["source"], o["world_size"]): o["seconds"] for o in entry["scaling"]["overheads"]}
    for point in entry["scaling"]["projections"]:
        n = point["world_size"]
        truth = gen.true_step(p, n, 1) - _balanced_step(p, n, monkeypatch)
        got = point["expert_imbalance_s"]
        assert got > 0 and lines[("expert load imbalance", n)] == got
        assert abs(got - truth) <= 0.02 * t1, n
        assert abs(got - truth) <= 0.025 * point["step_time_s"], n
        rest = lines.get(("rank-to-rank variability", n), 0.0)
        assert got + rest == pytest.approx(point["rank_to_rank_variability_s"], rel=1e-12)


def test_the_report_names_the_line(study: tuple[Any, dict[str, Any], Any]) -> None:
    *_, got = study
    assert "Expert load imbalance" in render(got.doc, "table", width=160)


def test_a_job_without_all_to_all_has_no_such_line(tmp_path: Path) -> None:
    p = replace(gen.PATTERNS["tp"](), layers=2, steps=3)
    gen.build_study(p, str(tmp_path))
    entry = analyze(tmp_path, project=[16], jobs=1, no_cache=True).studies[0]
    assert all(o["source"] != "expert load imbalance" for o in entry["scaling"]["overheads"])
    assert all(pt["expert_imbalance_s"] == 0.0 for pt in entry["scaling"]["projections"])
