"""Property: random well-formed mini traces: categories sum to each step, none negative."""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.minitrace import MiniTrace
from tests.test_classify_rules import assert_sums
from tracescale.classify.rank import classify_rank
from tracescale.classify.rules import load_rules
from tracescale.ingest.decode import load_trace

HOST_NAMES = (
    ("aten::add", "cpu_op"),
    ("aten::item", "cpu_op"),
    ("cudaStreamSynchronize", "cuda_runtime"),
    ("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "user_annotation"),
    ("reduce_metrics", "user_annotation"),
    ("c10d::barrier", "cpu_op"),
    ("python_glue", "python_function"),
)
STEP_US = 2000
span = st.tuples(st.integers(0, 2 * STEP_US), st.integers(1, 800))
host_op = st.tuples(st.sampled_from(HOST_NAMES), span)
device_op = st.tuples(
    st.sampled_from(("kernel", "memcpy", "nccl", "wait")), span, st.integers(0, 3)
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    hosts=st.lists(host_op, max_size=12),
    devices=st.lists(device_op, max_size=12),
    gloo=st.lists(span, max_size=3),
    seed=st.integers(0, 2**16),
    nsteps=st.integers(1, 3),
)
def test_random_traces_sum_to_steps(
    hosts: list[tuple[tuple[str, str], tuple[int, int]]],
    devices: list[tuple[str, tuple[int, int], int]],
    gloo: list[tuple[int, int]],
    seed: int,
    nsteps: int,
) -> None:
    t = MiniTrace(rank=0, world_size=2)
    for k in range(nsteps):
        t.step(k, k * STEP_US, STEP_US)
    for (name, cat), (ts, dur) in hosts:
        t.host(name, ts, dur, cat=cat)
    for kind, (ts, dur), lag in devices:
        launch = max(ts - lag * 100, 0)  # launched up to 300 µs before it runs
        if kind == "kernel":
            t.kernel("k", ts, dur, launch=launch, stream=7 + lag)
        elif kind == "memcpy":
            t.memcpy(ts, dur, launch=launch)
        elif kind == "nccl":
            t.nccl(ts, dur, launch=launch)
        else:
            t.gpu_wait(ts, dur)
    for ts, dur in gloo:
        t.gloo("gloo:all_reduce", ts, dur)
    random.Random(seed).shuffle(t.events)  # traces are not sorted by time
    with tempfile.TemporaryDirectory() as tmp:
        path = t.write(Path(tmp) / "rank0.json")
        result = classify_rank(load_trace(str(path)), load_rules())
    assert len(result.steps) == nsteps
    assert_sums(result.steps)
    # Windows tile: each starts where the previous ended, and holds at least its host window.
    start, dur = result.steps["start"].to_numpy(), result.steps["duration"].to_numpy()
    assert (abs(start[1:] - (start[:-1] + dur[:-1])) < 1e-12).all()
    assert (dur >= 0).all()
    comm = result.steps
    assert (comm["overlapped_communication"] <= comm["comm_transfer"] + 1e-12).all()
