"""Ingest on tiny hand-written traces: exact arrays, every real-trace quirk in KINETO_NOTES."""

from __future__ import annotations

import numpy as np
import pytest

from tracescale.errors import InvalidTraceError
from tracescale.ingest import load_trace
from tracescale.ingest.discover import RankFile, RunGroup
from tracescale.ingest.group import load_group, merge_windows


def X(name, ts, dur, *, cat="cpu_op", pid=1, tid=1, **args):
    ev = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    if args:
        ev["args"] = args
    return ev


def test_unsorted_input_is_sorted_by_start(write_trace):
    p = write_trace([X("b", 30, 5), X("a", 10, 5), X("c", 20, 1)])
    t = load_trace(str(p))
    assert t.events.start.tolist() == [10_000, 20_000, 30_000]
    assert t.names(t.events.name) == ["a", "c", "b"]
    assert t.events.dur.tolist() == [5_000, 1_000, 5_000]


def test_fractional_ts_is_ns_exact(tmp_path):
    # Written by hand: json.dumps of a float would already have lost the last digits.
    p = tmp_path / "t.json"
    p.write_text(
        '{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7,'
        ' "ts": 1712195495519689.047, "dur": 0.001, "args": {"device": 0, "stream": 7}}]}'
    )
    t = load_trace(str(p))
    assert t.events.start.tolist() == [1712195495519689047]
    assert t.events.dur.tolist() == [1]
    assert t.events.is_device.tolist() == [True]
    assert t.events.stream.tolist() == [7]


def test_exponent_and_integer_spellings(tmp_path):
    p = tmp_path / "t.json"
    p.write_text(
        '[{"ph": "X", "name": "a", "ts": 1.5e3, "dur": 2}, {"ph": "X", "name": "b", "ts": -3.25,'
        ' "dur": 1.0004}]'
    )
    t = load_trace(str(p))
    assert sorted(t.events.start.tolist()) == [-3250, 1_500_000]
    assert sorted(t.events.dur.tolist()) == [1000, 2000]


def test_string_pids_get_negative_ids_and_numeric_strings_ints(write_trace):
    p = write_trace([X("a", 1, 1, pid="Spans", tid="x"), X("b", 2, 1, pid="25738", tid=3)])
    t = load_trace(str(p))
    assert t.events.pid.tolist() == [-1, 25738]
    assert t.events.tid.tolist() == [-2, 3]
    assert t.pid_names[-1] == "Spans"


def test_old_2021_categories_and_lowercase_external_id(write_trace):
    p = write_trace(
        [
            X("aten::conv2d", 10, 50, cat="Operator", **{"external id": 7}),
            X("cudaLaunchKernel", 20, 5, cat="Runtime", correlation=99, **{"external id": 7}),
            X("k", 40, 30, cat="Kernel", pid=0, tid=7, correlation=99, device=0, stream=7),
            X("Memcpy HtoD", 80, 3, cat="Memcpy", pid=0, tid=7, device=0, stream=7, bytes=64),
        ]
    )
    t = load_trace(str(p))
    ev = t.events
    assert ev.external_id.tolist() == [7, 7, -1, -1]
    assert ev.is_device.tolist() == [False, False, True, True]
    assert ev.correlation.tolist() == [-1, 99, 99, -1]
    assert ev.nbytes.tolist() == [-1, -1, -1, 64]


def test_bare_array_of_events(tmp_path):
    p = tmp_path / "bare.json"
    p.write_text('[{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 2}]')
    t = load_trace(str(p))
    assert len(t.events) == 1 and t.meta.rank is None and t.meta.world_size is None


SHAPES = {"Input Dims": [[4, 2]], "Input type": ["float"]}
PG = {"pg_name": "0", "pg_size": 8, "ranks": list(range(8))}


def test_metadata_and_collective_args(write_trace):
    coll = {
        "Collective name": "allreduce", "In msg nelems": 1024, "Out msg nelems": 1024,
        "Group size": 8, "dtype": "Float", "Seq": 3, "correlation": 5, "device": 0, "stream": 20,
    }  # fmt: skip
    p = write_trace(
        [
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}},
            X("ncclDevKernel_AllReduce_Sum_f32", 5, 10, cat="kernel", pid=0, tid=20, **coll),
            X("gloo:all_reduce", 1, 2, cat="user_annotation", **SHAPES),
            {"ph": "s", "name": "ac2g", "pid": 1, "tid": 1, "ts": 1, "id": 5},
            {"ph": "i", "name": "mark", "pid": 1, "tid": 1, "ts": 1},
        ],
        gz=True,
        name="anything.bin",
        distributedInfo={"backend": "nccl", "rank": 3, "world_size": 8, "pg_config": [PG]},
        deviceProperties=[{"name": "NVIDIA H100"}],
        schemaVersion=1,
        baseTimeNanoseconds=1700000000000000000,
    )
    t = load_trace(str(p))
    m = t.meta
    assert (m.rank, m.world_size, m.backend) == (3, 8, "nccl")
    assert m.pg_config[0].ranks == tuple(range(8)) and m.pg_config[0].size == 8
    assert m.device_names == ("NVIDIA H100",) and m.schema_version == 1
    assert m.base_time_ns == 1700000000000000000 and m.total_events == 5
    assert m.thread_names == {(1, 1): "main"}
    ev = t.events
    assert len(ev) == 2  # flows and instants are not kept
    assert t.names(ev.coll_name) == ["", "allreduce"]
    assert ev.in_nelems.tolist() == [-1, 1024] and ev.group_size.tolist() == [-1, 8]
    assert ev.seq.tolist() == [-1, 3] and t.names(ev.dtype) == ["", "Float"]
    assert t.names(ev.input_dims) == ["[[4, 2]]", ""]  # raw JSON text as written
    assert t.names(ev.input_type) == ['["float"]', ""]


def test_malformed_events_are_skipped_and_counted(write_trace):
    p = write_trace(
        [X("ok", 1, 1), {"ph": "X", "name": "nodur", "ts": 1}, {"ph": "X", "dur": 1},
         {"name": "noph", "ts": 1, "dur": 1}, X("neg", 1, -5), X("huge", 1, 1e15)]
    )  # fmt: skip
    t = load_trace(str(p))
    assert t.names(t.events.name) == ["ok"]
    assert t.meta.skipped == {
        "events without ph": 1,
        "events without ts": 1,
        "events without dur": 1,
        "events with negative dur": 1,
        "events with absurd dur": 1,
    }


def test_successive_windows_merge_and_overlap_is_an_error(write_trace, tmp_path):
    a = write_trace([X("ProfilerStep#1", 10, 10), X("x", 12, 1)], "worker0.1.pt.trace.json")
    b = write_trace([X("ProfilerStep#5", 100, 10), X("y", 101, 1)], "worker0.2.pt.trace.json")
    c = write_trace([X("ProfilerStep#9", 105, 10)], "worker0.3.pt.trace.json")
    merged = merge_windows([load_trace(str(b)), load_trace(str(a))], rank=0)
    assert merged.events.start.tolist() == [10_000, 12_000, 100_000, 101_000]
    assert merged.names(merged.events.name) == ["ProfilerStep#1", "x", "ProfilerStep#5", "y"]
    assert merged.meta.rank == 0 and merged.meta.path == str(a)
    group = RunGroup(
        str(tmp_path), (RankFile(str(b), 0, 1, "file name"), RankFile(str(c), 0, 1, "file name"))
    )
    with pytest.raises(InvalidTraceError, match="overlapping") as info:
        load_group(group)
    assert "worker0.2.pt.trace.json" in str(info.value) and "worker0.3" in str(info.value)


def test_load_group_reports_bad_files(write_trace, tmp_path):
    good = write_trace([X("a", 1, 1)], "rank0.json")
    bad = tmp_path / "rank1.json"
    bad.write_text("{not json")
    group = RunGroup(
        str(tmp_path),
        (RankFile(str(good), 0, 1, "file name"), RankFile(str(bad), 1, 1, "file name")),
    )
    seen = []
    traces = load_group(group, on_error=lambda rf, exc: seen.append((rf.rank, exc.message)))
    assert [t.meta.path for t in traces] == [str(good)]
    assert seen and seen[0][0] == 1 and "not valid JSON" in seen[0][1]
    with pytest.raises(InvalidTraceError):
        load_group(group)


def test_memory_budget_fails_early(write_trace):
    p = write_trace([X("a", 1, 1)] * 50, gz=True)
    with pytest.raises(InvalidTraceError, match="memory budget"):
        load_trace(str(p), memory_budget=100)
    plain = write_trace([X("a", 1, 1)] * 50, "plain.json")
    with pytest.raises(InvalidTraceError, match="memory budget"):
        load_trace(str(plain), memory_budget=100)


def test_every_shared_trace_loads_or_gives_one_line_error(shared_traces):
    from tracescale.ingest.steps import find_steps

    files = sorted(p for p in shared_traces.rglob("*") if p.is_file() and ".json" in p.name)
    assert len(files) > 20
    for p in files:
        try:
            t = load_trace(str(p))
        except InvalidTraceError as exc:
            assert "\n" not in str(exc) and str(p) in str(exc)
            continue
        steps = find_steps(t)
        assert len(t.events) > 0 and len(steps) >= 1
        assert np.all(np.diff(t.events.start) >= 0) and np.all(t.events.dur >= 0)


def test_float_counts_in_args_are_read(tmp_path):
    """Regression: a writer put ``"In msg nelems": 6250000.0``; the size was lost (-1)."""
    import json

    from tracescale.ingest import load_trace

    ev = [
        {
            "ph": "X",
            "cat": "kernel",
            "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
            "pid": 0,
            "tid": 7,
            "ts": 10.5,
            "dur": 5.25,
            "args": {"In msg nelems": 6250000.0, "Group size": 2, "dtype": "Float", "stream": 7},
        }
    ]
    path = tmp_path / "float_args.json"
    path.write_text(json.dumps({"traceEvents": ev}))
    trace = load_trace(str(path))
    assert trace.events.in_nelems.tolist() == [6250000]
    assert trace.events.group_size.tolist() == [2]
    assert trace.events.stream.tolist() == [7]
