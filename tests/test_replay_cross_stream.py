"""Cross-stream waits recorded only as host ``cudaEventRecord``/``cudaStreamWaitEvent`` calls
(no correlation args): tiny hand-written traces, exact microseconds."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tracescale.ingest import load_trace
from tracescale.ingest.steps import find_steps
from tracescale.replay.engine.schedule import replay
from tracescale.replay.graph.build import DEV, Graph, build_graph

NO_COLL = pd.DataFrame(columns=["start_ns", "end_ns", "collective", "seq", "group_size"])


def _host(name: str, ts: float, dur: float, **args: object) -> dict[str, object]:
    cat = "user_annotation" if name.startswith("ProfilerStep") else "cuda_runtime"
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
            "args": args}  # fmt: skip


def _launch(
    name: str, ts: float, start: float, dur: float, stream: int, corr: int
) -> list[dict[str, object]]:
    kernel = {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": start,
              "dur": dur, "args": {"correlation": corr, "stream": stream, "device": 0}}  # fmt: skip
    return [_host("cudaLaunchKernel", ts, 1, correlation=corr), kernel]


def _graph(tmp_path: Path, events: list[dict[str, object]]) -> Graph:
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": events}))
    t = load_trace(str(p))
    return build_graph(t, find_steps(t), NO_COLL)


def _kernel(g: Graph, name: str) -> int:
    """The kernel node called ``name`` (join nodes have no duration)."""
    label = np.array([g.groups[k] == "kernel:" + name for k in g.group.tolist()])
    hit = np.flatnonzero((g.kind == DEV) & label & (g.dur > 0))
    assert len(hit) == 1
    return int(hit[0])


def _two_groups(tmp_path: Path) -> Graph:
    """P1 (stream 52, 10-40 us) and P2 (stream 61, 12-60 us), each followed by its event
    record; then two consecutive waits and the consumer (stream 7, 60-80 us)."""
    ev = [_host("ProfilerStep#1", 0, 100)]
    ev += [*_launch("p1", 5, 10, 30, 52, 1), _host("cudaEventRecord", 7, 1)]
    ev += [*_launch("p2", 9, 12, 48, 61, 2), _host("cudaEventRecord", 11, 1)]
    ev += [_host("cudaStreamWaitEvent", 13, 1), _host("cudaStreamWaitEvent", 15, 1)]
    ev += _launch("consumer", 20, 60, 20, 7, 3)
    return _graph(tmp_path, ev)


def test_consecutive_waits_make_the_consumer_wait_on_both_producers(tmp_path: Path) -> None:
    g = _two_groups(tmp_path)
    assert replay(g).step_time.tolist() == pytest.approx([100e-6], abs=1e-12)
    p1, cons = _kernel(g, "p1"), _kernel(g, "consumer")
    dur = g.dur / 1e9
    dur[p1] = 90e-6  # the earlier producer now ends at 100 us, after the later one
    out = replay(g, dur)
    assert out.start[cons] == pytest.approx(100e-6 + (out.start[p1] - 10e-6))
    assert out.start[cons] == pytest.approx(out.end[p1])


def test_shorter_producers_let_the_consumer_start_at_the_later_one(tmp_path: Path) -> None:
    g = _two_groups(tmp_path)
    p2, cons = _kernel(g, "p2"), _kernel(g, "consumer")
    dur = np.where(g.kind == DEV, g.dur / 2e9, g.dur / 1e9)
    out = replay(g, dur)
    assert out.start[cons] == pytest.approx(out.end[p2])
    assert out.end[p2] == pytest.approx(out.start[p2] + 24e-6)


def test_the_waiting_stream_is_found_past_a_collective_launched_in_between(
    tmp_path: Path,
) -> None:
    """The compute stream waits on a tensor-parallel AllReduce (stream 61, 10-30 us); before
    its next GEMM is launched the data-parallel AllReduce (stream 52) is: the GEMM, which
    started as the AllReduce ended, is the wait's consumer all the same."""
    ev = [_host("ProfilerStep#1", 0, 100)]
    ev += [*_launch("tp_allreduce", 5, 10, 20, 61, 1), _host("cudaEventRecord", 7, 1)]
    ev += [_host("cudaStreamWaitEvent", 9, 1), _host("cudaEventRecord", 11, 1)]
    ev += [_host("cudaStreamWaitEvent", 13, 1)]
    ev += _launch("dp_allreduce", 15, 30, 40, 52, 2) + _launch("gemm", 18, 30, 20, 7, 3)
    g = _graph(tmp_path, ev)
    assert replay(g).step_time.tolist() == pytest.approx([100e-6], abs=1e-12)
    tp, gemm = _kernel(g, "tp_allreduce"), _kernel(g, "gemm")
    dur = g.dur / 1e9
    dur[tp] = 40e-6  # ends at 50 us
    assert replay(g, dur).start[gemm] == pytest.approx(50e-6)


def test_unrecorded_waits_are_found_when_most_idle_kernels_waited(tmp_path: Path) -> None:
    """No record or wait call at all and the host far ahead: k0 (stream 7) -> c0 (stream 52)
    -> k1 -> c1 -> k2 each start exactly when the previous one ends, long after their launch.
    Only k0 and k3 started a launch latency (2 and 3 us) after their launch; the waits must not
    count as launch latencies (their median, ~1.5 ms, hid every wait)."""
    ev = [_host("ProfilerStep#1", 0, 3000)]
    ev += _launch("k0", 5, 7, 993, 7, 1)
    ev += _launch("c0", 10, 1000, 500, 52, 2)
    ev += _launch("k1", 15, 1500, 400, 7, 3)
    ev += _launch("c1", 20, 1900, 300, 52, 4)
    ev += _launch("k2", 25, 2200, 100, 7, 5)
    ev += _launch("k3", 2500, 2503, 10, 7, 6)
    g = _graph(tmp_path, ev)
    node = {k: _kernel(g, k) for k in ("k0", "c0", "k1", "c1", "k2", "k3")}
    for consumer, producer in (("c0", "k0"), ("k1", "c0"), ("c1", "k1"), ("k2", "c1")):
        assert g.dep2[node[consumer]] == node[producer], consumer
    assert g.dep2[node["k3"]] == -1
    assert replay(g).step_time.tolist() == pytest.approx([3000e-6], abs=1e-12)
    dur = g.dur / 1e9
    dur[node["k0"]] += 700e-6  # every waiting kernel moves with the first producer
    out = replay(g, dur)
    assert out.start[node["k2"]] == pytest.approx(2900e-6, abs=1e-12)
    assert out.start[node["k3"]] == pytest.approx(3000e-6, abs=1e-12)  # its stream freed at 3000
