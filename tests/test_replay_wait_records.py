"""Which record a host-only ``cudaStreamWaitEvent`` awaits when the next transfer and its record
were issued before the wait (a prefetch): tiny hand-written traces, exact microseconds."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.test_replay_cross_stream import _graph, _host, _kernel, _launch
from tracescale.ingest import load_trace
from tracescale.ingest.steps import find_steps
from tracescale.replay.engine.schedule import replay
from tracescale.replay.graph.build import DEV, Graph, build_graph
from tracescale.replay.waits.event_records import _reading

COMM, COMPUTE = 52, 7
#: the AllReduce below as classify finds it (40-60 us)
ALLREDUCE = pd.DataFrame(
    {"start_ns": [40_000], "end_ns": [60_000], "collective": ["allreduce"], "seq": [0],
     "group_size": [2]}
)  # fmt: skip


def _prefetch(tmp_path: Path, gather3: tuple[float, float] = (65, 5)) -> Graph:
    """Gathers ag0..ag3 on the NCCL stream, each followed by its event record; gemm k (compute
    stream) waits for ag k, but ag k+1 and its record are issued before that wait. ag1 and ag2
    were still running when gemm0 and gemm1 started (the most recent record cannot be theirs);
    gemm2 started after ag2 and ag3 had both ended (timing alone cannot tell)."""
    ev = [_host("ProfilerStep#1", 0, 130)]
    ev += [*_launch("ag0", 1, 5, 20, COMM, 1), _host("cudaEventRecord", 2, 0.5)]
    ev += [*_launch("ag1", 3, 25, 20, COMM, 2), _host("cudaEventRecord", 4, 0.5)]
    ev += [_host("cudaStreamWaitEvent", 5, 0.5), *_launch("gemm0", 6, 25, 20, COMPUTE, 3)]
    ev += [*_launch("ag2", 7, 45, 20, COMM, 4), _host("cudaEventRecord", 8, 0.5)]
    ev += [_host("cudaStreamWaitEvent", 9, 0.5), *_launch("gemm1", 10, 45, 45, COMPUTE, 5)]
    ev += [*_launch("ag3", 11, *gather3, COMM, 6), _host("cudaEventRecord", 12, 0.5)]
    ev += [_host("cudaStreamWaitEvent", 13, 0.5), *_launch("gemm2", 14, 90, 20, COMPUTE, 7)]
    ev += [_host("cudaStreamWaitEvent", 15, 0.5), *_launch("gemm3", 16, 110, 10, COMPUTE, 8)]
    return _graph(tmp_path, ev)


def test_each_compute_kernel_waits_for_its_own_gather_not_the_prefetched_one(
    tmp_path: Path,
) -> None:
    g = _prefetch(tmp_path)
    for k in range(4):
        assert g.dep2[_kernel(g, f"gemm{k}")] == _kernel(g, f"ag{k}"), k
    assert replay(g).step_time.tolist() == pytest.approx([130e-6], abs=1e-12)


def test_a_longer_gather_delays_only_the_kernel_that_waits_for_it(tmp_path: Path) -> None:
    """ag2 ends at 100 us instead of 65: gemm2 starts then (the prefetched ag3 ends at 105 us,
    which gemm2 does not wait for; it did when the wait took the most recent record)."""
    g = _prefetch(tmp_path)
    ag2, gemm2 = _kernel(g, "ag2"), _kernel(g, "gemm2")
    dur = g.dur / 1e9
    dur[ag2] = 55e-6
    out = replay(g, dur)
    assert out.end[ag2] == pytest.approx(100e-6)
    assert out.start[gemm2] == pytest.approx(100e-6)
    assert out.end[_kernel(g, "ag3")] == pytest.approx(105e-6)


def test_waits_right_after_their_record_keep_the_most_recent_one(tmp_path: Path) -> None:
    """stream.wait_stream(other): an older record nobody waits on (after g_old) stays unused
    while every wait's most recent record is possible, even where the older one is too."""
    ev = [_host("ProfilerStep#1", 0, 100)]
    ev += [*_launch("g_old", 1, 2, 8, COMM, 1), _host("cudaEventRecord", 2, 0.5)]
    ev += [*_launch("g_new", 3, 10, 30, COMM, 2), _host("cudaEventRecord", 4, 0.5)]
    ev += [_host("cudaStreamWaitEvent", 4.6, 0.3), *_launch("gemm", 6, 50, 20, COMPUTE, 3)]
    g = _graph(tmp_path, ev)
    assert g.dep2[_kernel(g, "gemm")] == _kernel(g, "g_new")


def test_a_deeper_reading_needs_to_explain_every_wait() -> None:
    assert _reading([3, 0, 0]) == 1  # the prefetch: skipping one record contradicts nothing
    assert _reading([3, 1, 0]) == 2
    assert _reading([0, 0, 0]) == 0  # nothing contradicts the most recent record
    # every reading leaves waits unexplained (their next kernel is not what waited): keep 0
    assert _reading([22, 7, 6]) == 0


def _optimizer_after_allreduce(tmp_path: Path, adam_start: float, wait: bool = False) -> Graph:
    """Backward GEMM (compute stream, 5-40 us), the gradients' AllReduce (NCCL stream, 40-60
    us), then ``Optimizer.step#AdamW.step`` (host 90-100 us) launching adam at 92 us. No
    stream-wait record (unless ``wait``: one unrelated wait call elsewhere)."""
    ev = [_host("ProfilerStep#1", 0, 130)]
    ev += _launch("gemm", 1, 5, 35, COMPUTE, 1)
    ev += _launch("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 10, 40, 20, COMM, 2)
    if wait:
        ev.append(_host("cudaStreamWaitEvent", 12, 0.5))
    ev.append({"ph": "X", "cat": "user_annotation", "name": "Optimizer.step#AdamW.step",
               "pid": 1, "tid": 1, "ts": 90, "dur": 10, "args": {}})  # fmt: skip
    ev += _launch("adam", 92, adam_start, 10, COMPUTE, 3)
    tmp_path.mkdir(exist_ok=True)
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": ev}))
    t = load_trace(str(path))
    return build_graph(t, find_steps(t), ALLREDUCE)


def _join_producers(g: Graph, consumer: int) -> list[int]:
    """Producers of the zero-duration join nodes sharing the consumer's stream and start."""
    joins = np.flatnonzero(
        (g.dur == 0) & (g.res == g.res[consumer]) & (g.start == g.start[consumer]) & (g.kind >= DEV)
    )
    return sorted(int(g.dep2[j]) for j in joins)


def test_without_wait_records_the_optimizer_waits_for_the_gradient_collective(
    tmp_path: Path,
) -> None:
    """Adam started 35 us after the AllReduce ended (no time shows the wait); projected, where
    the AllReduce outgrows backward, adam must not overlap it."""
    g = _optimizer_after_allreduce(tmp_path, 95)
    adam = _kernel(g, "adam")
    ar = int(np.flatnonzero(g.coll >= 0)[0])
    assert _join_producers(g, adam) == [ar]
    assert g.inferred_waits == 1
    assert replay(g).step_time.tolist() == pytest.approx([130e-6], abs=1e-12)
    dur = g.dur / 1e9
    dur[ar] = 110e-6  # ends at 150 us
    out = replay(g, dur)
    assert out.start[adam] == pytest.approx(150e-6)


def test_the_optimizer_rule_needs_a_trace_without_wait_records_and_causality(
    tmp_path: Path,
) -> None:
    g = _optimizer_after_allreduce(tmp_path / "w", 95, wait=True)
    assert g.inferred_waits == 0
    assert _join_producers(g, _kernel(g, "adam")) == []
    # adam started while the AllReduce ran: it did not wait for it
    g = _optimizer_after_allreduce(tmp_path / "early", 50)
    assert g.inferred_waits == 0
