"""The replay's per-node wait (``pre``): a collective's wait for the slowest rank is absorbed
where its stream is busy longer. Tiny hand-written trace, exact microseconds."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tracescale.ingest import load_trace
from tracescale.ingest.steps import find_steps
from tracescale.replay.engine.schedule import replay
from tracescale.replay.graph.build import DCOLL, DEV, build_graph

#: a and b are collective instances (a device collective ends on every rank together)
COLL = pd.DataFrame(
    {
        "start_ns": [5_000, 105_000, 305_000],
        "end_ns": [105_000, 205_000, 405_000],
        "collective": ["allreduce", "allreduce", "allreduce"],
        "seq": [0, 1, 2],
        "group_size": [2, 2, 2],
    }
)


def _ev(name: str, cat: str, ts: float, dur: float, **args: object) -> dict[str, object]:
    pid, tid = (0, int(args.get("stream", 0))) if cat == "kernel" else (1, 1)
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
            "args": args}  # fmt: skip


def test_wait_before_a_node_is_absorbed_by_its_busy_stream(tmp_path: Path) -> None:
    """Collectives a (5-105 us) and b (queued behind a, 105-205 us) on stream 52, all
    launched early; then kernel c (205-305 us) and collective d (305-405 us) queued behind."""
    ev = [_ev("ProfilerStep#1", "user_annotation", 0, 500)]
    nodes = (("a", 0, 5), ("b", 10, 105), ("c", 20, 205), ("d", 30, 305))
    for corr, (name, ts, start) in enumerate(nodes, 1):
        ev.append(_ev("cudaLaunchKernel", "cuda_runtime", ts, 1, correlation=corr))
        ev.append(_ev(name, "kernel", start, 100, correlation=corr, stream=52, device=0))
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    t = load_trace(str(p))
    g = build_graph(t, find_steps(t), COLL)
    a, b, c, d = (
        int(np.flatnonzero((g.kind >= DEV) & (g.start == s * 1000))[0]) for s in (5, 105, 205, 305)
    )
    assert g.kind[a] == g.kind[b] == g.kind[d] == DCOLL and g.kind[c] == DEV
    base = replay(g)
    assert base.step_time.tolist() == pytest.approx([500e-6], abs=1e-12)
    pre = np.zeros(len(g))
    pre[b] = 60e-6  # b's ranks all arrive when a ends: its wait vanishes behind a
    out = replay(g, None, pre)
    assert out.start[b] == pytest.approx(base.start[b], abs=1e-12)
    pre[a] = 30e-6  # a waits 30 us for a late rank, and b follows a
    out = replay(g, None, pre)
    assert out.start[a] == pytest.approx(base.start[a] + 30e-6, abs=1e-12)
    assert out.start[b] == pytest.approx(out.end[a], abs=1e-12)
    pre[b] = 200e-6  # a wait longer than what the stream absorbs shows past the launch
    out = replay(g, None, pre)
    assert out.start[b] == pytest.approx(base.start[b] - 105e-6 + 10e-6 + 5e-6 + 200e-6, abs=1e-9)
    pre[:] = 0.0
    pre[d] = 20e-6  # behind a compute kernel (its end is the rank's own), d waits in full
    assert replay(g, None, pre).start[d] == pytest.approx(base.start[d] + 20e-6, abs=1e-12)
