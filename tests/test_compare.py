"""compare_docs: matching, bootstrap significance, verdicts both ways, the gate, all formats."""

from __future__ import annotations

import copy
import html
import json
from pathlib import Path
from typing import Any

import pytest

from tracescale.comparison import bootstrap_change_pct, compare_docs, gate_exit_code
from tracescale.errors import EXIT_OK, EXIT_REGRESSION, UsageError
from tracescale.report import render_compare
from tracescale.report.schemas import validate

FIXTURES = Path(__file__).parent / "fixtures"


def load(name: str = "strong") -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((FIXTURES / f"study_{name}.json").read_text())
    return doc


def shifted(
    doc: dict[str, Any], category: str, delta_s: float, *, sizes: tuple[int, ...] = ()
) -> dict[str, Any]:
    """A copy where ``category`` costs ``delta_s`` more per step (all runs, or only ``sizes``)."""
    out = copy.deepcopy(doc)
    for st in out["studies"]:
        for run in st["runs"]:
            if sizes and run["world_size"] not in sizes:
                continue
            run["breakdown_s"][category] += delta_s
            for k in run["step_time_s"]:
                run["step_time_s"][k] += delta_s
            run["step_times_s"] = [t + delta_s for t in run["step_times_s"]]
            for pr in run["per_rank"]:
                pr["step_time_s"] += delta_s
                pr["breakdown_s"][category] += delta_s
    return out


def test_improved_names_data_loading() -> None:
    before = load()
    after = shifted(before, "dataloader", -0.040)
    cmp = compare_docs(before, after)
    validate(cmp, "compare")
    assert cmp["verdict"] == "improved"
    assert [r["world_size"] for r in cmp["runs"]] == [1, 2, 4, 8]
    r8 = cmp["runs"][-1]
    assert r8["verdict"] == "improved"
    assert r8["step_time_s"]["significant"] is True
    assert r8["step_time_s"]["change_pct"] == pytest.approx(-0.040 / 0.141116 * 100, rel=1e-3)
    lo, hi = r8["step_time_s"]["ci90"]
    assert lo <= r8["step_time_s"]["change_pct"] <= hi < 0
    assert r8["main_change"]["category"] == "dataloader"
    assert r8["breakdown_delta_s"]["dataloader"] == pytest.approx(-0.040)
    assert "biggest change: data loading -40.0 ms per step" in cmp["summary"][-1]
    assert cmp["gate"] == {
        "fail_on_regression_pct": None,
        "failed": False,
        "exit_code": 0,
        "reasons": [],
    }


def test_regressed_both_ways_and_gate_exit_codes() -> None:
    before = load()
    after = shifted(before, "communication", 0.020, sizes=(8,))
    cmp = compare_docs(before, after, fail_on_regression_pct=5)
    validate(cmp, "compare")
    assert cmp["verdict"] == "regressed"
    assert [r["verdict"] for r in cmp["runs"]] == ["unchanged"] * 3 + ["regressed"]
    assert cmp["gate"]["failed"] and cmp["gate"]["exit_code"] == EXIT_REGRESSION
    assert cmp["gate"]["reasons"][0].startswith("N=8: step time +14.2%")
    assert gate_exit_code(cmp, 5) == EXIT_REGRESSION
    assert gate_exit_code(cmp, 20) == EXIT_OK  # slower, but by less than the threshold
    assert gate_exit_code(cmp, None) == EXIT_OK
    reverse = compare_docs(after, before, fail_on_regression_pct=5)
    assert reverse["verdict"] == "improved"
    assert reverse["gate"]["exit_code"] == EXIT_OK


def test_unchanged_when_within_noise() -> None:
    before = load()
    after = copy.deepcopy(before)
    for run in after["studies"][0]["runs"]:
        run["step_times_s"] = list(reversed(run["step_times_s"]))
    cmp = compare_docs(before, after, fail_on_regression_pct=0)
    assert cmp["verdict"] == "unchanged"
    assert all(r["verdict"] == "unchanged" for r in cmp["runs"])
    assert gate_exit_code(cmp, 0) == EXIT_OK


def test_tiny_significant_change_is_unchanged() -> None:
    before = load()
    after = shifted(before, "host", 0.0012)  # +0.85% at N=8: significant, below the 1% floor
    cmp = compare_docs(before, after, fail_on_regression_pct=0.1)
    assert cmp["runs"][-1]["verdict"] == "unchanged"
    assert cmp["gate"]["exit_code"] == EXIT_REGRESSION  # the gate uses its own threshold


def test_insignificant_slowdown_does_not_fail_the_gate() -> None:
    before = load()
    after = copy.deepcopy(before)
    run = after["studies"][0]["runs"][-1]
    times = run["step_times_s"]
    run["step_times_s"] = [times[0] * 3, *times[1:]]  # one outlier step: mean +33%, noisy
    run["step_time_s"]["mean"] = sum(run["step_times_s"]) / len(times)
    cmp = compare_docs(before, after)
    st = cmp["runs"][-1]["step_time_s"]
    assert st["change_pct"] > 30 and st["significant"] is False
    assert gate_exit_code(cmp, 10) == EXIT_OK


def test_without_step_times_falls_back_to_spread() -> None:
    before = load()
    after = shifted(before, "dataloader", -0.040)
    for d in (before, after):
        for run in d["studies"][0]["runs"]:
            del run["step_times_s"]
    cmp = compare_docs(before, after)
    st = cmp["runs"][-1]["step_time_s"]
    assert st["ci90"] is None and st["significant"] is True
    assert st["method"].startswith("p10-p90")
    assert cmp["verdict"] == "improved"


def test_single_run_side_matches_same_world_size() -> None:
    before = load()
    after = shifted(before, "dataloader", -0.040)
    after["studies"][0]["runs"] = [after["studies"][0]["runs"][-1]]
    cmp = compare_docs(before, after)
    assert [r["world_size"] for r in cmp["runs"]] == [8]
    assert "N=1 only measured before: not compared" in cmp["warnings"]
    assert cmp["studies"][0]["unmatched"][0] == {"side": "before", "world_size": 1}


def test_no_common_world_size_is_a_usage_error() -> None:
    before, after = load(), load("single")
    after["studies"][0]["runs"][0]["world_size"] = 3
    with pytest.raises(UsageError, match="no world size is measured on both sides"):
        compare_docs(before, after)


def test_several_studies_matched_by_order_and_said_so() -> None:
    before = load()
    before["studies"].append(load("weak")["studies"][0])
    after = shifted(before, "dataloader", -0.010)
    after["studies"][0]["path"] = "traces/strong_v2"
    cmp = compare_docs(before, after)
    assert any(w.startswith("studies matched by order") for w in cmp["warnings"])
    assert {r["study"] for r in cmp["runs"]} == {0, 1}
    same = compare_docs(before, copy.deepcopy(before))
    assert any("matched by path" in w for w in same["warnings"])


def test_scaling_before_after() -> None:
    before = load()
    after = copy.deepcopy(before)
    after["studies"][0]["scaling"]["serial_fraction"]["total"] = 0.12
    after["studies"][0]["scaling"]["projections"][-1]["speedup"] = 5.0
    st = compare_docs(before, after)["studies"][0]
    assert st["serial_fraction"] == {"before": 0.282097, "after": 0.12}
    last = st["projected_speedup"][-1]
    assert {k: last[k] for k in ("world_size", "before", "after")} == {
        "world_size": 64,
        "before": 3.029812,
        "after": 5.0,
    }


def test_bootstrap_is_deterministic_and_brackets_the_change() -> None:
    b = [1.0, 1.1, 0.9, 1.05, 0.95]
    a = [x * 0.8 for x in b]
    ci = bootstrap_change_pct(b, a, seed=3)
    assert ci == bootstrap_change_pct(b, a, seed=3)
    assert ci is not None and ci[0] < -20 < ci[1] < 0
    assert bootstrap_change_pct([1.0], a) is None


@pytest.mark.parametrize("fmt", ["table", "markdown", "html", "json"])
def test_compare_renders_in_every_format(fmt: str) -> None:
    before = load()
    cmp = compare_docs(before, shifted(before, "dataloader", -0.040), fail_on_regression_pct=5)
    out = render_compare(cmp, fmt)
    if fmt == "html":
        out = html.unescape(out)
    if fmt == "json":
        validate(json.loads(out), "compare")
        return
    assert "Overall: improved" in out
    assert "Data loading" in out
    assert "Regression gate (>5% slower, significant): passed, exit code 0" in out
    if fmt == "markdown":
        assert "| 8 | 141.1 ms | 101.1 ms | -28.3% |" in out
    if fmt == "html":
        assert "http://" not in out and "https://" not in out
        assert len(out.encode()) < 5 * 1024 * 1024
