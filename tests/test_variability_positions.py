"""A collective's position within the step keys the pool of rank-to-rank offsets it waits on:
the same collective must keep its number in every step of a rank, or the slowest replica's
wait is read at a neighbour's number in some steps and lost."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tracescale.api import analyze
from tracescale.replay.arrivals import variability
from tracescale.simulate import pattern_params
from tracescale.simulate.pattern_run import write_run
from tracescale.simulate.runner import run
from tracescale.simulate.spec import parse_pattern


def test_a_pipelines_data_parallel_allreduce_keeps_its_position(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With per-rank loader delays a stage's send/recv count varies from step to step (a
    transfer merged with its neighbour or not); numbering the transfers apart keeps each
    stage's gradient AllReduce at one position (it had moved between two, by step)."""
    spec = parse_pattern("pp,heavy_tail")
    params = pattern_params(spec)
    for n in (4, 8):  # the measured runs alone: the truth's expectation is not needed here
        e = run(spec, params, n, "strong", 6, 1, record=True)
        write_run(e, params, tmp_path / f"ws{n}", 1, 1, lambda _: None)
    seen: list[Any] = []
    real = variability.arrival_offsets

    def keep(run: Any, rank: int) -> Any:
        got = real(run, rank)
        seen.append(got[0])
        return got

    # the engine looks it up on ``variability`` at call time, so the spy is seen there
    monkeypatch.setattr(variability, "arrival_offsets", keep)
    analyze(tmp_path, jobs=1, no_cache=True)
    checked = 0
    for c in seen:
        if len(c) == 0:
            continue
        kind = np.asarray(c.col("collective")).astype(str)
        size = np.asarray(c.col("group_size"), dtype=np.float64)
        data_parallel = (kind != "sendrecv") | (size > 2)
        ranks, steps = c.col("rank")[data_parallel], c.col("step")[data_parallel]
        pos = c.col("position")[data_parallel]
        for r in np.unique(ranks).tolist():
            mine = ranks == r
            per_step = {
                s: tuple(sorted(pos[mine & (steps == s)].tolist()))
                for s in np.unique(steps[mine]).tolist()
            }
            assert len(set(per_step.values())) == 1, (r, per_step)
            checked += 1
    assert checked >= 8
