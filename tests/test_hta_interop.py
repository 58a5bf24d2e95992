"""HTA interop: ``tracescale.from_hta`` agrees with ``tracescale.analyze`` on the same files.

The conversion itself (µs -> ns, symbol ids, pid/tid labels, HTA's 0 defaults) is tested
against a stand-in for ``hta.common.trace.Trace`` so it runs without the extra; the agreement
tests load real HTA objects (``require_module``: skipped locally, required in CI).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import require_module

import tracescale
from tracescale.categories import CATEGORIES
from tracescale.errors import UsageError
from tracescale.hta_interop import (
    HTA_CATEGORY_MAP,
    HTA_IDLE_CATEGORIES,
    HTA_KERNEL_TYPES,
    HTA_TEMPORAL,
    hta_trace_to_rank_trace,
    to_hta_frames,
)

REL_TOL = 0.001  # the agreement bar: the same breakdown within 0.1% (of the step time)


def _hta() -> Any:
    require_module("hta", "HTA interop needs the hta extra (pip install 'tracescale[hta]')")
    logging.getLogger("hta").setLevel(logging.ERROR)
    from hta.trace_analysis import TraceAnalysis

    return TraceAnalysis


def _assert_same_breakdown(got: tracescale.Study, ref: tracescale.Study, tol: float) -> None:
    assert [r["world_size"] for r in got.runs] == [r["world_size"] for r in ref.runs]
    for g, r in zip(got.runs, ref.runs, strict=True):
        assert g["ranks"] == r["ranks"]
        assert g["steps"] == r["steps"]
        step = r["step_time_s"]["mean"]
        assert g["step_time_s"]["mean"] == pytest.approx(step, rel=tol)
        for c in CATEGORIES:
            diff = abs(g["breakdown_s"][c] - r["breakdown_s"][c])
            assert diff <= tol * step, (
                r["world_size"],
                c,
                g["breakdown_s"][c],
                r["breakdown_s"][c],
            )


# -- without HTA: the conversion on a stand-in Trace ------------------------------------------


class _Symbols:
    def __init__(self, table: list[str]) -> None:
        self.sym_table = table


class _FakeTrace:
    """The attributes of ``hta.common.trace.Trace`` that from_hta reads."""

    def __init__(self, frames: dict[int, pd.DataFrame], table: list[str], min_ts: int) -> None:
        self.traces = frames
        self.symbol_table = _Symbols(table)
        self.min_ts = min_ts
        self.trace_path = "/nowhere/run"
        self.trace_files = {r: f"/nowhere/run/rank{r}.json" for r in frames}
        self.meta_data = {r: {"distributedInfo": {"rank": r, "world_size": 2}} for r in frames}

    def get_ranks(self) -> list[int]:
        return sorted(self.traces)

    def get_trace(self, rank: int) -> pd.DataFrame:
        return self.traces[rank]


class _FakeAnalysis:
    def __init__(self, t: _FakeTrace) -> None:
        self.t = t


def _fake_frame() -> tuple[pd.DataFrame, list[str]]:
    table = ["cpu_op", "kernel", "ProfilerStep#3", "aten::mm", "sgemm", "ncclKernel_AllReduce"]
    df = pd.DataFrame(
        {
            "index": [2, 0, 1, 3],
            "cat": [0, 0, 1, 1],
            "name": [3, 2, 4, 5],
            "pid": ["7", "7", 0, "GPU 0"],
            "tid": [7, 7, 7, "stream 7"],
            "ts": [10, 0, 12, 30],
            "dur": [5.0, 100.0, 2.5, 0.0015],
            "stream": [-1, -1, 7, 7],
            "correlation": [11, -1, 11, 12],
            "external_id": [1, 2, -1, -1],
            "collective_name": ["", "", "", "allreduce"],
            "in_msg_nelems": [0, 0, 0, 1024],
            "out_msg_nelems": [0, 0, 0, 1024],
            "group_size": [0, 0, 0, 2],
            "msg_dtype": ["", "", "", "Float"],
            "bytes": [-1, -1, -1, -1],
            "input_dims": ["-1", "-1", [[2, 3]], "-1"],
            "input_type": ["-1", "-1", ["float"], "-1"],
        }
    )
    return df, table


def test_conversion_matches_ingest_conventions() -> None:
    df, table = _fake_frame()
    t = _FakeTrace({0: df}, table, min_ts=1_700_000_000_000_000)
    rt = hta_trace_to_rank_trace(_FakeAnalysis(t), 0)
    ev = rt.events
    names = rt.names(ev.name)
    # File order (HTA's "index") then start: the step first, then the op, kernel, collective.
    assert names == ["ProfilerStep#3", "aten::mm", "sgemm", "ncclKernel_AllReduce"]
    base = 1_700_000_000_000_000 * 1000
    assert ev.start.tolist() == [base, base + 10_000, base + 12_000, base + 30_000]
    assert ev.dur.tolist() == [100_000, 5_000, 2_500, 2]  # µs -> ns, rounded
    assert ev.start.dtype == np.int64 and ev.dur.dtype == np.int64
    assert ev.pid.tolist()[:3] == [7, 7, 0]  # numeric strings are ints, as in ingest
    assert ev.pid[3] < 0 and ev.tid[3] < 0  # labels get negative ids
    assert rt.pid_names[int(ev.pid[3])] == "GPU 0"
    assert ev.is_device.tolist() == [False, False, True, True]
    # HTA's defaults (0 nelems / group size, '' / '-1' strings) are tracescale's -1.
    assert ev.in_nelems.tolist() == [-1, -1, -1, 1024]
    assert ev.group_size.tolist() == [-1, -1, -1, 2]
    assert rt.strings[ev.coll_name[3]] == "allreduce"
    assert ev.coll_name[:3].tolist() == [-1, -1, -1]
    assert rt.strings[ev.dtype[3]] == "Float"
    assert rt.strings[ev.input_dims[2]] == "[[2,3]]"
    assert ev.input_dims[0] == -1
    assert ev.seq.tolist() == [-1, -1, -1, -1]
    assert rt.meta.rank == 0 and rt.meta.world_size == 2
    assert rt.meta.path == "/nowhere/run/rank0.json"


def test_decoded_symbol_columns_are_accepted() -> None:
    """After ``Trace.decode_symbol_ids()`` the cat/name columns hold strings, not ids."""
    df, table = _fake_frame()
    df = df.assign(cat=[table[i] for i in df["cat"]], name=[table[i] for i in df["name"]])
    rt = hta_trace_to_rank_trace(_FakeAnalysis(_FakeTrace({0: df}, table, 0)), 0)
    assert rt.names(rt.events.name)[0] == "ProfilerStep#3"
    assert rt.events.is_device.sum() == 2


def test_from_hta_rejects_what_is_not_hta() -> None:
    with pytest.raises(UsageError, match="at least one"):
        tracescale.from_hta()
    with pytest.raises(UsageError, match="get_ranks"):
        tracescale.from_hta(object())


def test_category_mapping_is_complete_and_uses_hta_names() -> None:
    assert list(HTA_CATEGORY_MAP) == list(CATEGORIES)
    assert set(HTA_TEMPORAL.values()) == {"compute_time", "non_compute_time", "idle_time"}
    assert {v for v in HTA_IDLE_CATEGORIES.values() if v} <= {"host_wait", "kernel_wait", "other"}
    assert {v for v in HTA_KERNEL_TYPES.values() if v} == {"COMPUTATION", "MEMORY", "COMMUNICATION"}
    for c in CATEGORIES:  # GPU busy <=> a kernel type; GPU idle <=> an idle category
        busy = HTA_TEMPORAL[c] != "idle_time"
        assert (HTA_KERNEL_TYPES[c] is not None) == busy
        assert (HTA_IDLE_CATEGORIES[c] is None) == busy
    import tracescale.hta_interop as mod

    for c in CATEGORIES:  # the docstring table lists every category
        assert f"\n{c} " in (mod.__doc__ or "")


@pytest.fixture(scope="module")
def sim_study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small simulated strong-scaling study (ws1, ws2, ws4)."""
    from tracescale.cli.main import cli

    out = tmp_path_factory.mktemp("hta") / "sim"
    res = CliRunner().invoke(
        cli, ["simulate", "--out", str(out), "--world-sizes", "1,2,4", "--steps", "4"]
    )
    assert res.exit_code == 0, res.output
    return out


def test_to_hta_frames_uses_the_gpu_measures(sim_study: Path) -> None:
    study = tracescale.analyze(sim_study, jobs=1)
    frames = to_hta_frames(study)
    temporal = frames["temporal_breakdown"]
    assert list(temporal.columns) == [
        "study",
        "world_size",
        "rank",
        "idle_time(us)",
        "compute_time(us)",
        "non_compute_time(us)",
        "kernel_time(us)",
        "idle_time_pctg",
        "compute_time_pctg",
        "non_compute_time_pctg",
    ]
    by = temporal.set_index(["world_size", "rank"])
    for run in study.runs:
        for pr in run["per_rank"]:
            gpu = pr["gpu_time_s"]
            row = by.loc[(run["world_size"], pr["rank"])]
            assert row["kernel_time(us)"] == pytest.approx(gpu["span"] * 1e6)
            assert row["compute_time(us)"] == pytest.approx(gpu["compute"] * 1e6)
            assert row["idle_time(us)"] == pytest.approx((gpu["span"] - gpu["busy"]) * 1e6)
            assert row["idle_time_pctg"] == pytest.approx(pr["gpu_idle_pct"], abs=0.005)
    parts = temporal[["idle_time(us)", "compute_time(us)", "non_compute_time(us)"]].sum(axis=1)
    np.testing.assert_allclose(parts, temporal["kernel_time(us)"])
    idle = frames["idle_time_breakdown"]
    assert set(idle["idle_category"]) == {"host_wait", "kernel_wait", "other"}
    sums = idle.groupby(["world_size", "rank"])["idle_time"].sum()
    np.testing.assert_allclose(sums.to_numpy(), by["idle_time(us)"].loc[sums.index])
    kt = frames["kernel_type_breakdown"]
    assert set(kt["kernel_type"]) == {"COMPUTATION", "MEMORY", "COMMUNICATION"}
    for _, grp in kt.groupby("world_size"):
        assert grp["percentage"].sum() == pytest.approx(100.0, abs=0.05)
    ws1 = kt[kt["world_size"] == 1].set_index("kernel_type")["sum"]
    assert ws1["COMMUNICATION"] == 0.0  # one rank: no collective kernels


def test_to_hta_frames_without_gpu_measures_maps_categories(sim_study: Path) -> None:
    """A study JSON without ``gpu_time_s`` (CPU runs, older files): the category mapping."""
    import copy

    study = tracescale.analyze(sim_study / "ws2", jobs=1)
    doc = copy.deepcopy(study.doc)
    for pr in doc["studies"][0]["runs"][0]["per_rank"]:
        del pr["gpu_time_s"]
    temporal = to_hta_frames(tracescale.study.Study(doc=doc))["temporal_breakdown"]
    long = study.breakdown()
    per_rank = long.groupby("rank")["seconds"].sum() * 1e6
    got = temporal.set_index("rank")["kernel_time(us)"]
    np.testing.assert_allclose(got.loc[per_rank.index].to_numpy(), per_rank.to_numpy())
    # Compute without the waits cause attribution moved into it (on this rank: a collective).
    rows = tracescale.study.rows_frame(doc["studies"][0]["runs"][0]).groupby("rank").sum()
    compute = (rows["compute"] - rows["caused_compute"]) * 1e6
    np.testing.assert_allclose(
        temporal.set_index("rank")["compute_time(us)"].loc[compute.index], compute.to_numpy()
    )
    assert (rows["caused_compute"] > 0).any()  # the case is exercised


# -- with HTA: agreement with analyze ----------------------------------------------------------


def test_from_hta_equals_analyze_on_trace_filter_all_steps(shared_traces: Path) -> None:
    TraceAnalysis = _hta()
    path = shared_traces / "hta" / "trace_filter"
    analysis = TraceAnalysis(trace_dir=str(path), include_last_profiler_step=True)
    got = tracescale.from_hta(analysis)
    ref = tracescale.analyze(path, jobs=1)
    _assert_same_breakdown(got, ref, REL_TOL)
    assert got.runs[0]["world_size"] == 128  # from distributedInfo, as discovery does
    assert got.runs[0]["steps"] == 2
    # The per-step rows agree too, not just the means.
    a = got.breakdown().drop(columns="study")
    b = ref.breakdown().drop(columns="study")
    merged = a.merge(b, on=["world_size", "rank", "step", "category"], suffixes=("", "_ref"))
    assert len(merged) == len(a) == len(b)
    np.testing.assert_allclose(merged["seconds"], merged["seconds_ref"], atol=1e-6)
    assert got.runs[0]["paths"] == ref.runs[0]["paths"]


def test_from_hta_default_loader_drops_the_last_step(shared_traces: Path) -> None:
    """HTA's default drops the last ProfilerStep; analyze with steps ':-1' sees the same."""
    TraceAnalysis = _hta()
    path = shared_traces / "hta" / "trace_filter"
    got = tracescale.from_hta(TraceAnalysis(trace_dir=str(path)))
    ref = tracescale.analyze(path, jobs=1, steps=":-1")
    _assert_same_breakdown(got, ref, REL_TOL)
    assert got.runs[0]["steps"] == 1


def test_from_hta_several_world_sizes_gives_the_same_scaling(sim_study: Path) -> None:
    TraceAnalysis = _hta()
    from tracescale.ingest.sniff import sniff

    out = sim_study
    ref = tracescale.analyze(out, jobs=1)
    analyses = []
    for ws in (1, 2, 4):
        # HTA finds ranks by the regex '"rank":\s+(\d+)' (Kineto writes a space); name them.
        files = {
            sniff(str(p), strict=True).rank: str(p) for p in sorted((out / f"ws{ws}").glob("*.gz"))
        }
        analyses.append(
            TraceAnalysis(
                trace_files=files, trace_dir=str(out / f"ws{ws}"), include_last_profiler_step=True
            )
        )
    got = tracescale.from_hta(*analyses)
    # HTA rounds ts down to whole µs; the simulator writes ns, so allow that rounding.
    _assert_same_breakdown(got, ref, 0.005)
    # The replay rebuilds each representative rank's graph from HTA's frames (they hold every
    # event): the serial fraction and the projections are the replay's, as analyze's are.
    got_sc, ref_sc = got.studies[0]["scaling"], ref.studies[0]["scaling"]
    assert got_sc["projections_source"] == ref_sc["projections_source"] == "replay"
    assert got_sc["serial_fraction"]["source"] == "replay"
    assert got_sc["serial_fraction"]["total"] == pytest.approx(
        ref_sc["serial_fraction"]["total"], abs=0.005
    )
    for g, r in zip(got_sc["projections"], ref_sc["projections"], strict=True):
        assert g["world_size"] == r["world_size"]
        assert g["speedup"] == pytest.approx(r["speedup"], rel=0.01)
    for run in got.runs:
        assert run["replay_error"] < 0.01
    assert got.scaling.mode == ref.scaling.mode
    # The Study renders like any other.
    assert "serial" in got.render("markdown").lower()
    # And world_sizes= overrides distributedInfo.
    relabeled = tracescale.from_hta(analyses[0], world_sizes=[1])
    assert relabeled.runs[0]["world_size"] == 1
