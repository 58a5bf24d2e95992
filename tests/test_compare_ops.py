"""Compare by op (added, removed, faster, slower, significance) and pairing runs of any size."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tracescale.cli.main import cli
from tracescale.comparison import compare_docs
from tracescale.comparison.core import _pair_runs
from tracescale.comparison.ops import op_changes
from tracescale.report import render_compare


def _run(n: int, ops: dict[str, list[tuple[str, float, float]]]) -> dict[str, Any]:
    top = {
        cat: [{"name": a, "seconds": s, "step_sd_s": sd, "steps": 4} for a, s, sd in rows]
        for cat, rows in ops.items()
    }
    return {
        "world_size": n,
        "step_time_s": {"mean": 0.1, "p10": 0.099, "p90": 0.101},
        "step_times_s": [0.1, 0.1, 0.1, 0.1],
        "breakdown_s": {"compute": 0.1},
        "top_ops": top,
    }


def test_op_changes_exact() -> None:
    before = _run(2, {"compute": [("gemm", 0.050, 0.001), ("relu", 0.004, 0.0), ("old", 0.003, 0)]})
    after = _run(2, {"compute": [("gemm", 0.030, 0.001), ("relu", 0.0041, 0.0), ("new", 0.002, 0)]})
    rows = op_changes(before, after)["compute"]
    got = [(r["name"], r["change"], round(r["delta_s"], 6), r["significant"]) for r in rows]
    assert got == [
        ("gemm", "faster", -0.02, True),
        ("old", "removed", -0.003, True),
        ("new", "added", 0.002, True),
        ("relu", "slower", 0.0001, False),  # under 1% of the step
    ]


def test_noise_makes_a_change_insignificant() -> None:
    before = _run(2, {"compute": [("gemm", 0.050, 0.02)]})
    after = _run(2, {"compute": [("gemm", 0.040, 0.02)]})
    [row] = op_changes(before, after)["compute"]
    # bound: 1.645 * sqrt(2 * 0.02^2 / 4) = 0.0233 > 0.01
    assert (row["change"], row["significant"]) == ("faster", False)


def test_pairing_rules() -> None:
    one, two, four = ({"world_size": n} for n in (1, 2, 4))
    warns: list[str] = []
    assert _pair_runs({2: two, 4: four}, {4: four, 1: one}, "size", warns)[0] == [(4, 4)]
    assert warns == []
    pairs, unmatched = _pair_runs({2: two, 4: four}, {1: one, 4: four}, "any", warns)
    assert pairs == [(2, 1), (4, 4)] and unmatched == []
    assert warns == [
        "N=2 before compared with N=1 after: different world sizes, so step times and "
        "categories compare but scaling does not"
    ]
    # Two single runs of different sizes are compared even without --match any.
    assert _pair_runs({8: four}, {2: two}, "size", [])[0] == [(8, 2)]


def test_compare_document_names_the_op_in_every_format() -> None:
    before = {"schema_version": 1, "studies": [{"path": "b", "runs": [_run(2, {})]}]}
    after = {"schema_version": 1, "studies": [{"path": "a", "runs": [_run(4, {})]}]}
    before["studies"][0]["runs"][0] = _run(2, {"compute": [("gemm", 0.05, 0.0)]})
    after["studies"][0]["runs"][0] = _run(4, {"compute": [("gemm", 0.08, 0.0)]})
    after["studies"][0]["runs"][0]["step_times_s"] = [0.13, 0.131, 0.129, 0.13]
    after["studies"][0]["runs"][0]["step_time_s"]["mean"] = 0.13
    doc = compare_docs(before, after)
    [run] = doc["runs"]
    assert (run["world_size_before"], run["world_size"]) == (2, 4)
    assert doc["summary"] == [
        "N=2 -> N=4: regressed, step time +30.0%; biggest change: compute +0.0 ms per step; "
        "biggest op change: `gemm` (slower, +30.0 ms per step)"
    ]
    for fmt in ("table", "markdown", "html"):
        out = render_compare(doc, fmt)
        assert "Ops that changed most" in out and "gemm" in out and "+30.0 ms" in out
    with pytest.raises(Exception, match="--match must be"):
        compare_docs(before, after, match="nearest")


def test_op_table_note_explains_only_the_words_it_shows() -> None:
    before = {"schema_version": 1, "studies": [{"path": "b", "runs": [_run(2, {})]}]}
    after = {"schema_version": 1, "studies": [{"path": "a", "runs": [_run(2, {})]}]}
    before["studies"][0]["runs"][0] = _run(2, {"compute": [("gemm", 0.05, 0.0), ("old", 0.01, 0)]})
    after["studies"][0]["runs"][0] = _run(2, {"compute": [("gemm", 0.03, 0.0)]})
    doc = compare_docs(before, after)
    changes = {r["change"] for r in doc["runs"][0]["op_changes"]["compute"]}
    assert changes == {"faster", "removed"}
    text = " ".join(render_compare(doc, "table").split())
    assert "added / removed: absent from the other side" in text
    assert "new in top" not in text
    assert "need not add up to the category change above" in text


def test_single_traces_compare_directly_by_op(shared_traces: Path) -> None:
    trace_diff = shared_traces / "hta" / "trace_diff"
    args = [str(trace_diff / "control"), str(trace_diff / "test"), "-j1", "--no-cache"]
    res = CliRunner().invoke(cli, ["compare", *args, "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    [run] = doc["runs"]
    assert (run["world_size_before"], run["world_size"]) == (8, 2)
    assert any("different world sizes" in w for w in doc["warnings"])
    memcpy = run["op_changes"]["memcpy"][0]
    assert (memcpy["name"], memcpy["change"], memcpy["significant"]) == (
        "Memcpy DtoD (Device -> Device)",
        "slower",
        True,
    )
    assert memcpy["delta_s"] == pytest.approx(0.0150, abs=0.0005)
