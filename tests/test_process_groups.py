"""Process groups smaller than the world: which group an instance belongs to, how each group's
size follows N, and an alpha-beta fit that one mismatched row cannot break."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tracescale.classify.collectives import process_group
from tracescale.ingest import load_trace
from tracescale.ingest.trace import RankTrace
from tracescale.replay.links.links import fit_comm, group_laws
from tracescale.scaling.comm import factors


def _rank(tmp_path: Path, rank: int, pgs: list[tuple[str, list[int]]]) -> RankTrace:
    """Rank ``rank`` of 4 with the given process groups (name, ranks) and one kernel."""
    doc = {
        "distributedInfo": {
            "backend": "nccl",
            "rank": rank,
            "world_size": 4,
            "pg_config": [
                {"pg_name": n, "pg_desc": "", "pg_size": len(r), "ranks": r} for n, r in pgs
            ],
        },
        "traceEvents": [
            {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 0, "dur": 1}
        ],
    }
    p = tmp_path / f"rank{rank}.json"
    p.write_text(json.dumps(doc))
    return load_trace(str(p))


def test_instance_group_is_named_and_told_apart_by_its_members(tmp_path: Path) -> None:
    # tensor-parallel pairs {0,1},{2,3} are both "1"; data parallel {0,2},{1,3} both "2"
    def pgs(r: int) -> list[tuple[str, list[int]]]:
        pair = [r - r % 2, r - r % 2 + 1]
        return [("0", [0, 1, 2, 3]), ("1", pair), ("2", [r % 2, r % 2 + 2])]

    r0, r3 = _rank(tmp_path, 0, pgs(0)), _rank(tmp_path, 3, pgs(3))
    assert process_group(r0, "1", 2) == "1:0,1"
    assert process_group(r3, "1", 2) == "1:2,3"  # another pair: another instance
    assert process_group(r3, "2", 2) == "2:1,3"
    assert process_group(r0, "0", 4) == "0:0-3"
    # no Process Group Name: the only group of that size names it; two of one size cannot
    assert process_group(r0, "", 4) == "0:0-3"
    assert process_group(r0, "", 2) == ""
    # the args' own ranks win over pg_config; ranks that leave out the rank itself do not
    assert process_group(r3, "1", 2, '"[2, 3]"') == "1:2,3"
    assert process_group(r3, "1", 2, '"[0, 1]"') == "1:2,3"


def test_group_sizes_follow_n_or_stay() -> None:
    rows = pd.DataFrame(
        {
            "world_size": [4, 4, 8, 8, 16, 16, 8],
            "pg": ["1:0,1", "2:0,2", "1:6,7", "2:1-7/2", "1:2,3", "2:0-14/2", "0:0-7"],
            "group": [2, 2, 2, 4, 2, 8, 8],
        }
    )
    assert group_laws(rows) == {"1": False, "2": True, "0": True}


def test_alpha_beta_fit_ignores_a_row_far_off_the_rest() -> None:
    # AllReduce over 2 and 4 ranks, alpha 20 us, 50 GB/s; one row carries another instance's
    # 20x shorter transfer: without dropping it the relative fit read the bandwidth infinite
    alpha, inv_bw = 20e-6, 1 / 50e9
    rng = np.random.default_rng(0)
    rows = []
    for g, nbytes in [(2, 4e6), (4, 83e6), (2, 4e6), (4, 83e6), (4, 40e6), (2, 1e6)] * 4:
        lat, bw = factors("allreduce", np.asarray([float(g)]), nbytes, "ring")
        t = (alpha * lat[0] + inv_bw * bw[0]) * (1 + 0.01 * rng.standard_normal())
        world = 4 if g == 4 else 8
        rows.append({"world_size": world, "collective": "allreduce", "algo": "RING_SIMPLE",
                     "bytes": nbytes, "group": g, "transfer": t, "pg": f"{g}"})  # fmt: skip
    rows[1]["transfer"] = rows[1]["transfer"] / 20
    model = fit_comm(pd.DataFrame(rows), None)
    fit = model.fits[("allreduce", "RING_SIMPLE", "intra")]
    assert fit.alpha_s == pytest.approx(alpha, rel=0.1)
    assert 1 / fit.inv_bw == pytest.approx(50e9, rel=0.05)
    # seen in one run each: the group spanning its world grows like N, the pair does not
    assert model.group_at(4, "4", 4, 64) == 64
    assert model.group_at(2, "2", 8, 64) == 2
