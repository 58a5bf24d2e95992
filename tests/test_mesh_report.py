"""The parallelism mesh read from the process groups, per measured run (``replay.links.mesh``),
in the study JSON, the terminal report and ``tracescale inspect``; and the replay's rule for
kernels a collective held without a stream-wait record, counted and named in the assumptions.

Each study is a small simulated one (tests/independent) built and analyzed once per module.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tests.independent.gen as gen
from tests.independent.gen import PATTERNS, _p, build_study
from tests.independent.hsdp import hsdp
from tests.independent.pipeline import PipePattern
from tests.independent.pipeline import build_study as build_pipeline
from tests.independent.variants import VARIANTS
from tests.replay_capture import analyze_keeping_replay
from tracescale.cli.inspect import inspect_path
from tracescale.replay.graph.device import counted_launch_lags
from tracescale.replay.links.mesh import meshes_into_runs
from tracescale.report.sections import mesh_section


def _dim(dimension: str, group: str, size: int, colls: list[str], spans: bool, grows: bool,
         told: str, inferred: bool = False) -> dict[str, Any]:  # fmt: skip
    return {"dimension": dimension, "group": group, "size": size, "collectives": colls,
            "spans_nodes": spans, "grows": grows, "told_by": told,
            "size_inferred": inferred}  # fmt: skip


_analyze = analyze_keeping_replay


def _study(tmp: pytest.TempPathFactory, name: str, p: Any) -> tuple[dict[str, Any], Any, Path]:
    where = tmp.mktemp(name)
    build_study(p, str(where))
    entry, rs = _analyze(where, [2 * max(p.sizes)])
    return entry, rs, where


@pytest.fixture(scope="module")
def ddp(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Any, Path]:
    return _study(tmp_path_factory, "ddp", _p("ddp", (1, 2, 4), layers=2, steps=2))


@pytest.fixture(scope="module")
def hsdp4(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Any, Path]:
    return _study(tmp_path_factory, "hsdp", replace(hsdp(4, (2, 4, 8)), layers=2, steps=2))


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Any, Path]:
    return _study(tmp_path_factory, "hybrid", replace(PATTERNS["hybrid"](), layers=2, steps=2))


def test_ddp_is_one_data_parallel_dimension(ddp: tuple[dict[str, Any], Any, Path]) -> None:
    """DDP's gradient AllReduce on the world group: data parallel, read from its size law (the
    group's name says nothing), growing with N; the one-GPU run has no dimension."""
    entry, _, _ = ddp
    mesh = entry["scaling"]["replay"]["mesh"]
    dp = ["allreduce"]
    assert mesh == {
        "runs": {
            "1": [],
            "2": [_dim("DP", "default_pg", 2, dp, False, True, "size law")],
            "4": [_dim("DP", "default_pg", 4, dp, False, True, "size law")],
        },
        "warnings": [],
    }
    # the rule for kernels a collective held never fired: it is not named
    assert not any("0-5 us" in a for a in entry["scaling"]["replay"]["assumptions"])


def test_hsdp_shard_inside_replicate_across(hsdp4: tuple[dict[str, Any], Any, Path]) -> None:
    """HSDP with 4 GPUs per node: the shard group fills a node and stays; the replicate group,
    across nodes from N=8, is the one that grows."""
    entry, rs, _ = hsdp4
    shard = ["allgather", "reducescatter"]
    runs = entry["scaling"]["replay"]["mesh"]["runs"]
    assert runs == {
        "2": [_dim("DP-shard", "mesh_dp_shard", 2, shard, False, False, "name")],
        "4": [_dim("DP-shard", "mesh_dp_shard", 4, shard, False, False, "name")],
        "8": [
            _dim("DP-replicate", "mesh_dp_replicate", 2, ["allreduce"], True, True, "name"),
            _dim("DP-shard", "mesh_dp_shard", 4, shard, False, False, "name"),
        ],
    }
    # the same reading as the links' size laws
    assert rs.comm.proportional == {"mesh_dp_replicate": True, "mesh_dp_shard": False}
    sec = mesh_section(entry)
    assert sec is not None and sec.items[-1] == (
        "N=8: DP-replicate 2 [mesh_dp_replicate] (grows, across nodes) x "
        "DP-shard 4 [mesh_dp_shard] (inside a node)"
    )


def test_tp_by_dp(hybrid: tuple[dict[str, Any], Any, Path]) -> None:
    """Tensor-parallel pairs (fixed) and data parallel across them (grows), both named."""
    entry, _, _ = hybrid
    ar = ["allreduce"]
    tp = _dim("TP", "tp_group", 2, ar, False, False, "name")
    assert entry["scaling"]["replay"]["mesh"] == {
        "runs": {
            "2": [tp],
            "4": [_dim("DP", "dp_group", 2, ar, False, True, "name"), tp],
            "8": [_dim("DP", "dp_group", 4, ar, False, True, "name"), tp],
        },
        "warnings": [],
    }


def test_runs_entries_and_inspect_carry_the_same_mesh(
    hybrid: tuple[dict[str, Any], Any, Path],
) -> None:
    """``runs[i].mesh`` is the replay's mesh of that run; ``tracescale inspect`` reads the same
    mesh from the traces alone (every rank's groups, no replay)."""
    entry, _, where = hybrid
    runs = [dict(r) for r in entry["runs"]]
    meshes_into_runs(runs, entry["scaling"])
    want = entry["scaling"]["replay"]["mesh"]["runs"]
    assert [r["mesh"] for r in runs] == [want["2"], want["4"], want["8"]]
    (doc,) = inspect_path(str(where))
    assert [r["mesh"] for r in doc["runs"]] == [want["2"], want["4"], want["8"]]
    assert doc["mesh_warnings"] == []


def test_pipeline_by_dp(tmp_path: Path) -> None:
    """PP x DP (rank = stage x DP + replica): the send/recv pairs are the pipeline, its stage
    count the world size over data parallel (inferred); data parallel measured in one run only
    stays (the size laws' reading, which the assumptions state)."""
    p = replace(PipePattern(), microbatches=8, dp_sizes=(1, 2), dp_targets=(4,), steps=2)
    build_pipeline(p, str(tmp_path))
    entry, _ = _analyze(tmp_path, [16])
    pp = _dim("PP", "pipeline_pair", 4, ["sendrecv"], False, False, "collectives", True)
    dp = _dim("DP", "data_parallel", 2, ["allreduce"], False, False, "name")
    assert entry["scaling"]["replay"]["mesh"] == {
        "runs": {"4": [pp], "8": [dp, pp]},
        "warnings": [],
    }


def test_equal_groups_without_names_are_ambiguous(tmp_path: Path) -> None:
    """TP x DP whose groups carry no description: at N=4 both hold 2 ranks inside a node and
    all-reduce; only the size law tells one (it grows: data parallel) from the other (a neutral
    group), and the warning says the mesh cannot tell them apart."""
    mp = pytest.MonkeyPatch()
    mp.setitem(gen._PG_DESC, "1", "undefined")
    mp.setitem(gen._PG_DESC, "2", "undefined")
    try:
        build_study(replace(PATTERNS["hybrid"](), layers=2, steps=2), str(tmp_path))
    finally:
        mp.undo()
    entry, _ = _analyze(tmp_path, [16])
    mesh = entry["scaling"]["replay"]["mesh"]
    ar = ["allreduce"]
    pair = _dim("group of 2 (allreduce)", "1", 2, ar, False, False, "")
    assert mesh["runs"] == {
        "2": [pair],
        "4": [pair, _dim("DP", "2", 2, ar, False, True, "size law")],
        "8": [pair, _dim("DP", "2", 4, ar, False, True, "size law")],
    }
    warning = (
        "groups 1 and 2 hold as many ranks each inside a node (2 at N=4) and run the same "
        "collectives (allreduce), and their names do not say which mesh dimension each is: the "
        "mesh cannot tell them apart (read as group of 2 (allreduce) and DP from their size laws)"
    )
    assert mesh["warnings"] == [warning]
    assert warning in entry["warnings"]


US = 1000


def test_held_by_collective_is_counted() -> None:
    """test_moe_zero's hand-written case: one kernel (node 5) waited for the collective (node 4)
    by the rule; the recorded producer of node 11 and the plain kernel's neighbour are not it."""
    start = [0, 5, 20, 35, 50, 82, 100, 122, 140, 177, 200, 250]
    dur = [300, 2, 2, 2, 30, 10, 20, 10, 30, 10, 47, 5]
    lag = [0, 5, 5, 5, 5, 15, 5, 15, 5, 15, 5, 40]
    c = {
        "start": np.array(start, dtype=np.int64) * US,
        "dur": np.array(dur, dtype=np.int64) * US,
        "lag": np.array(lag, dtype=np.int64) * US,
        "res": np.array([0, 1, 1, 1, 2, 1, 3, 1, 2, 1, 3, 1], dtype=np.int64),
        "dep": np.array([-1] + [0] * 11, dtype=np.int64),
        "dep2": np.array([-1] * 11 + [10], dtype=np.int64),
        "coll": np.array([-1, -1, -1, -1, 0, -1, -1, -1, 1, -1, -1, -1], dtype=np.int64),
    }
    _, held = counted_launch_lags(c, np.arange(12) > 0)
    assert held == 1


def test_moe_no_waits_names_the_held_rule(tmp_path: Path) -> None:
    """MoE without stream-wait records (test_moe_zero's study, seed 1): at N=8 three kernels are
    linked to the collective that held them by the rule alone, and the assumptions name it with
    that count; the mesh reads the all-to-all group as expert parallel though its description
    says tensor parallel, and says so."""
    p = replace(VARIANTS["moe/no-waits"](), layers=4, steps=4)
    build_study(p, str(tmp_path))
    entry, rs = _analyze(tmp_path, [16])
    assert [(r.world_size, r.graph.held_waits) for r in rs.runs] == [(1, 0), (2, 0), (4, 3), (8, 3)]
    held = rs.base.graph.held_waits
    said = [a for a in entry["scaling"]["replay"]["assumptions"] if "0-5 us" in a]
    assert said == [
        "a kernel ready (launched, plus the typical launch latency) before a collective on "
        "another stream ends and starting 0-5 us after that end waited for it: the trace "
        f"records no stream wait around the collective ({held} waits inferred)"
    ]
    mesh = entry["scaling"]["replay"]["mesh"]
    assert mesh["runs"]["8"] == [
        _dim("DP", "default_pg", 8, ["allreduce"], False, True, "size law"),
        _dim("EP", "tp_group", 8, ["alltoall"], False, True, "collectives"),
    ]
    assert mesh["warnings"] == [
        "group tp_group (named like TP) runs all-to-all: read as expert parallel (EP)"
    ]
