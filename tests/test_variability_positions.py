"""A collective's position within the step keys the pool of rank-to-rank offsets it waits on:
the same collective must keep its number in every step of a rank, or the slowest replica's
wait is read at a neighbour's number in some steps and lost."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.measured_runs import record_arrival_offsets, write_measured_runs
from tracescale.api import analyze


def test_a_pipelines_data_parallel_allreduce_keeps_its_position(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With per-rank loader delays a stage's send/recv count varies from step to step (a
    transfer merged with its neighbour or not); numbering the transfers apart keeps each
    stage's gradient AllReduce at one position (it had moved between two, by step)."""
    # the measured runs alone: the truth's expectation is not needed here
    write_measured_runs(tmp_path, "pp,heavy_tail", (4, 8), 6, 1)
    seen = record_arrival_offsets(monkeypatch)
    analyze(tmp_path, jobs=1, no_cache=True)
    checked = 0
    for c, _pools in seen:
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
