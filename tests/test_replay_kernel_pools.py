"""Kernel names that change with N (a library's tile pick) are fitted per launching op:
tiny hand-written traces and tables, exact numbers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tracescale.ingest import load_trace
from tracescale.ingest.steps import find_steps
from tracescale.replay.graph.build import build_graph
from tracescale.replay.laws.kernel_pools import (
    NO_OP,
    KernelTables,
    kernel_tables,
    main_pool,
    pooled_times,
    varying_kernel_laws,
    varying_names,
)
from tracescale.replay.laws.nodes import fit_law

NO_COLL = pd.DataFrame(columns=["start_ns", "end_ns", "collective", "seq", "group_size"])
MM = "kernel-pool:aten::mm"


def _x(name: str, cat: str, ts: float, dur: float, **args: object) -> dict[str, object]:
    pid, tid = (0, 7) if cat == "kernel" else (1, 1)
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
            "args": args}  # fmt: skip


def test_kernel_tables_count_and_time_per_launching_op(tmp_path: Path) -> None:
    """Two steps; in each, aten::mm launches tileA (then tileB in the second step) after a
    host gap inside the op; a bare launch (no op) launches tileA once more."""
    k = {"stream": 7, "device": 0}
    ev = [
        _x("ProfilerStep#1", "user_annotation", 0, 100),
        _x("ProfilerStep#2", "user_annotation", 100, 100),
        _x("aten::mm", "cpu_op", 10, 20),
        _x("cudaLaunchKernel", "cuda_runtime", 15, 5, correlation=1),
        _x("tileA", "kernel", 21, 30, correlation=1, **k),
        _x("cudaLaunchKernel", "cuda_runtime", 60, 5, correlation=2),
        _x("tileA", "kernel", 66, 10, correlation=2, **k),
        _x("aten::mm", "cpu_op", 110, 20),
        _x("cudaLaunchKernel", "cuda_runtime", 115, 5, correlation=3),
        _x("tileB", "kernel", 121, 40, correlation=3, **k),
    ]
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    t = load_trace(str(p))
    g = build_graph(t, find_steps(t), NO_COLL)
    steps = np.ones(len(g), dtype=np.bool_)
    got = kernel_tables(g, steps, 2)
    assert got.count == {"kernel:tileA": 1.0, "kernel:tileB": 0.5}
    assert got.by_op[("kernel:tileA", MM)] == pytest.approx(15e-6, abs=1e-15)
    assert got.by_op[("kernel:tileB", MM)] == pytest.approx(20e-6, abs=1e-15)
    # the bare launch follows the previous step's last gap, outside any op
    assert sum(v for (k, _), v in got.by_op.items() if k == "kernel:tileA") == pytest.approx(
        20e-6, abs=1e-15
    )
    assert main_pool(got, "kernel:tileB") == MM


def test_varying_names_and_their_pooled_law() -> None:
    """A GEMM moves from tile A (N=1: 4 launches of 2 ms) to tile B as it shrinks; C is a
    stable kernel; D exists only on multi-GPU runs (stable there)."""
    sizes = [1, 2, 4]
    tables = [
        KernelTables(
            {"kernel:A": 4, "kernel:C": 1}, {("kernel:A", MM): 8e-3, ("kernel:C", NO_OP): 1e-3}
        ),
        KernelTables(
            {"kernel:A": 2, "kernel:B": 2, "kernel:C": 1, "kernel:D": 3},
            {
                ("kernel:A", MM): 2e-3,
                ("kernel:B", MM): 2e-3,
                ("kernel:C", NO_OP): 1e-3,
                ("kernel:D", NO_OP): 3e-3,
            },
        ),
        KernelTables(
            {"kernel:B": 4, "kernel:C": 1, "kernel:D": 3},
            {("kernel:B", MM): 2e-3, ("kernel:C", NO_OP): 1e-3, ("kernel:D", NO_OP): 3e-3},
        ),
    ]
    varying = varying_names(sizes, tables)
    assert varying == {"kernel:A", "kernel:B"}
    pools = pooled_times(tables, varying, [1.0, 1.0, 2.0])
    assert pools == [{MM: 8e-3}, {MM: 4e-3}, {MM: 1e-3}]
    law = fit_law(sizes, [p[MM] for p in pools[:2]] + [2e-3])
    assert law.form == "b/N"
    assert law.coef == pytest.approx((8e-3,))
    # each name alone extrapolates nonsense: B's time stays from N=2 to 4
    assert fit_law(sizes[1:], [2e-3, 2e-3]).form == "a"
    laws = varying_kernel_laws(sizes, tables, [1.0, 1.0, 1.0])
    assert set(laws) == {"kernel:B"}  # A has no node left in the base (largest) run
    assert laws["kernel:B"].form == "b/N"
    assert laws["kernel:B"].coef == pytest.approx((8e-3,))  # the pool: 8, 4, 2 ms
