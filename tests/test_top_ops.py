"""Top contributors: who owns each category's time, per rank, per run and across runs."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tests.minitrace import MiniTrace
from tracescale.classify.rank import classify_rank
from tracescale.classify.rules import load_rules
from tracescale.classify.top_ops import attach_laws, run_op_table, run_top_ops
from tracescale.ingest.decode import load_trace

US = 1e-6


def _ops(t: MiniTrace, tmp_path: Path) -> dict[tuple[str, str], float]:
    path = t.write(tmp_path / "mini.json")
    r = classify_rank(load_trace(str(path)), load_rules(None))
    grouped = r.op_seconds.groupby(["category", "name"])["seconds"].sum()
    return {k: round(float(v) / US, 6) for k, v in grouped.items()}


def test_each_instant_has_one_owner(tmp_path: Path) -> None:
    # Host: aten::mm (0-300) holds cudaLaunchKernel (100-150): mm's self time is 250 us.
    # The GPU runs two kernels (300-600, 600-700); the DataLoader op (700-900) has a child op.
    t = MiniTrace().step(1, 0, 1000)
    t.host("aten::mm", 0, 300).runtime("cudaLaunchKernel", 100, 50)
    t.kernel("sgemm", 300, 300, launch=120).kernel("relu_kernel", 600, 100, launch=130)
    t.dataloader(700, 200).host("aten::stack", 750, 100)
    got = _ops(t, tmp_path)
    assert got == {
        ("compute", "sgemm"): 300.0,
        ("compute", "relu_kernel"): 100.0,
        ("host", "aten::mm"): 250.0,
        ("host", "cudaLaunchKernel"): 50.0,
        ("dataloader", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"): 200.0,
    }


def test_run_table_and_laws() -> None:
    rank_tables = [
        pd.DataFrame(
            {
                "step": [1, 2, 1],
                "category": ["host", "host", "compute"],
                "name": ["launch", "launch", "gemm"],
                "seconds": [0.002, 0.004, 0.010],
            }
        )
    ]
    table = run_op_table(rank_tables, rank_steps=2, category_s={"host": 0.006, "compute": 0.005})
    row = table.set_index(["category", "name"]).loc[("host", "launch")]
    assert row["seconds"] == pytest.approx(0.003)
    assert row["step_sd"] == pytest.approx(0.0014142135623730952)
    top = run_top_ops(table)
    assert top["host"][0]["share"] == pytest.approx(0.5)
    assert top["compute"][0]["share"] == 1.0  # capped: never more than the category
    # Work only rank 0 does: its seconds are the mean over both ranks (the category's basis),
    # so seconds never exceed the category and share = seconds / category; the seconds on the
    # rank that runs it are kept for its law.
    only_rank0 = pd.DataFrame(
        {
            "step": [1, 2],
            "category": ["reduction"] * 2,
            "name": ["reduce"] * 2,
            "seconds": [0.004, 0.004],
        }
    )
    empty = only_rank0.iloc[0:0]
    table = run_op_table([only_rank0, empty], rank_steps=4, category_s={"reduction": 0.003})
    row = table.set_index(["category", "name"]).loc[("reduction", "reduce")]
    assert (row["seconds"], row["ranks"], row["share"]) == pytest.approx((0.002, 1, 2 / 3))
    assert (row["seconds_on_its_ranks"], row["category_s"]) == pytest.approx((0.004, 0.003))
    assert row["seconds"] <= row["category_s"]
    runs = [
        {
            "world_size": n,
            "top_ops": {
                "host": [{"name": "launch", "seconds": 0.003}],
                "compute": [{"name": "gemm", "seconds": 0.008 / n}],
            },
        }
        for n in (1, 2, 4)
    ]
    # A rank-0-only op: its all-rank mean falls as 1/N, its own rank's time does not.
    for run in runs:
        n = run["world_size"]
        run["top_ops"]["reduction"] = [
            {"name": "reduce", "seconds": 0.004 / n, "seconds_on_its_ranks": 0.004}
        ]
    attach_laws(runs, "strong")
    red_law = runs[0]["top_ops"]["reduction"][0]["law"]
    assert (red_law["form"], red_law["flagged"]) == ("flat", True)
    host_law = runs[0]["top_ops"]["host"][0]["law"]
    comp_law = runs[0]["top_ops"]["compute"][0]["law"]
    assert (host_law["form"], host_law["flagged"]) == ("flat", True)
    assert (comp_law["form"], comp_law["flagged"]) == ("shrinks ~1/N", False)
    assert comp_law["exponent"] == pytest.approx(-1.0)
