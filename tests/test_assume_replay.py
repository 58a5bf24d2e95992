"""``--assume CATEGORY=serial|parallel`` on a study of several runs: the replay's laws of that
category's nodes follow the statement, checked against the simulator run with the category's
work made parallel (or kept whole) at every world size."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tracescale.api import analyze
from tracescale.simulate import SimParams, simulate, true_step_time

SIZES = [1, 2, 4]
TARGETS = [1, 2, 4, 8, 16]


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> tuple[SimParams, Path]:
    p = replace(SimParams(), layers=4, jitter=0.0, sync_stall=0.006, dl_serial=0.004)
    out = tmp_path_factory.mktemp("assume")
    simulate(SIZES, out, steps=5, params=p, compresslevel=1)
    return p, out


def _steps(doc: dict[str, Any]) -> dict[int, float]:
    points = doc["studies"][0]["scaling"]["projections"]
    return {int(q["world_size"]): float(q["step_time_s"]) for q in points}


def _analyze(where: Path, **assume: str) -> dict[str, Any]:
    return analyze(where, project=TARGETS, assumptions=assume, jobs=1, no_cache=True).to_dict()


def test_parallel_sync_and_loader_match_the_simulator_with_that_work_divided(
    study: tuple[SimParams, Path],
) -> None:
    p, where = study
    truths = {
        "sync": lambda n: replace(p, sync_stall=p.sync_stall / n),
        "dataloader": lambda n: replace(p, dl_serial=0.0, dl_parallel=p.dl_parallel + p.dl_serial),
    }
    for cat, changed in truths.items():
        doc = _analyze(where, **{cat: "parallel"})
        got = _steps(doc)
        for n in TARGETS:
            want = true_step_time(changed(n), "strong", n)
            tol = 0.05 if n in SIZES else 0.10
            assert got[n] == pytest.approx(want, rel=tol), (cat, n, got[n], want)
        replay = doc["studies"][0]["scaling"]["replay"]
        (said,) = [a for a in replay["assumptions"] if a.startswith(f"--assume {cat}=parallel")]
        assert "(a + b)/N" in said


def test_the_serial_fraction_follows_the_statement(study: tuple[SimParams, Path]) -> None:
    _, where = study
    plain = _analyze(where)["studies"][0]["scaling"]["serial_fraction"]
    freed = _analyze(where, sync="parallel")["studies"][0]["scaling"]["serial_fraction"]
    kept = _analyze(where, compute="serial")["studies"][0]["scaling"]["serial_fraction"]
    assert plain["by_category"]["sync"] > 0.01
    assert freed["by_category"]["sync"] < 0.1 * plain["by_category"]["sync"]
    assert freed["total"] < plain["total"]
    # compute kept whole at every N: its serial part is compute's whole share of T(1)
    assert kept["by_category"]["compute"] > 5 * plain["by_category"]["compute"]


def test_a_statement_without_nodes_is_said_not_applied(study: tuple[SimParams, Path]) -> None:
    _, where = study
    doc = _analyze(where, communication="serial")
    entry = doc["studies"][0]
    assert _steps(doc) == _steps(_analyze(where))
    assert (
        "--assume communication=serial is not applied: collective transfers follow their link "
        "model, not a fitted law"
    ) in entry["warnings"]
