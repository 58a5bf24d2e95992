"""Compare scaling section: assumed figures marked, speedups of other baselines not paired."""

from __future__ import annotations

import html
import json
from typing import Any

import pytest

from tests.test_compare import load, shifted
from tracescale.comparison import compare_docs
from tracescale.report import render_compare
from tracescale.report.schemas import validate

FORMATS = ["table", "markdown", "html", "json"]


def _text(doc: dict[str, Any], fmt: str) -> str:
    out = render_compare(doc, fmt, width=200)
    return html.unescape(out) if fmt == "html" else out


def _scaling_lines(text: str) -> list[str]:
    """Rows of the scaling table (HTML rows split at ``<tr``), not the embedded chart code."""
    rows = text.replace("<tr", "\n<tr").splitlines()
    keys = ("Serial fraction", "Projected speedup", "Projected step time")
    rows = [ln for ln in rows if ln.startswith("<tr>")] if "<tr" in text else rows
    return [ln for ln in rows if any(k in ln for k in keys)]


def _one_run_at(world_size: int, projected_at: int) -> dict[str, Any]:
    """The single-run fixture moved to ``world_size``, projected at ``projected_at``."""
    doc = load("single")
    study = doc["studies"][0]
    study["runs"][0]["world_size"] = world_size
    study["scaling"]["baseline_world_size"] = world_size
    study["scaling"]["projections"][0]["world_size"] = projected_at
    return doc


@pytest.mark.parametrize("fmt", FORMATS)
def test_single_runs_mark_assumed_scaling(fmt: str) -> None:
    before = load("single")
    cmp = compare_docs(before, shifted(before, "dataloader", -0.010))
    validate(cmp, "compare")
    st = cmp["studies"][0]
    assert st["assumed"] == {"before": True, "after": True}
    assert st["baseline_world_size"] == {"before": 4, "after": 4}
    assert st["speedups_comparable"] is True
    if fmt == "json":
        assert json.loads(render_compare(cmp, "json"))["studies"][0]["assumed"]["after"] is True
        return
    text = _text(cmp, fmt)
    lines = _scaling_lines(text)
    assert lines and all(ln.count("(assumed)") == 2 for ln in lines), lines
    assert "Assumed (before and after: one run)" in " ".join(text.split())


def test_measured_sides_carry_no_assumed_mark() -> None:
    before = load()
    cmp = compare_docs(before, shifted(before, "dataloader", -0.010))
    st = cmp["studies"][0]
    assert st["assumed"] == {"before": False, "after": False}
    text = _text(cmp, "table")
    assert "(assumed)" not in text and "Speedups over N=1 on both sides." in text


@pytest.mark.parametrize("fmt", ["table", "markdown", "html"])
def test_speedups_over_different_baselines_are_not_set_side_by_side(fmt: str) -> None:
    before, after = _one_run_at(8, 16), _one_run_at(2, 16)
    cmp = compare_docs(before, after, match="any")
    validate(cmp, "compare")
    st = cmp["studies"][0]
    assert st["speedups_comparable"] is False
    assert st["baseline_world_size"] == {"before": 8, "after": 2}
    step = load("single")["studies"][0]["scaling"]["projections"][0]["step_time_s"]
    assert st["projected_speedup"][0]["step_time_s"] == {"before": step, "after": step}
    text = _text(cmp, fmt)
    assert "Projected speedup" not in text
    assert any("Projected step time at N=16" in ln for ln in _scaling_lines(text))
    flat = " ".join(text.split())
    assert "Speedups are over different baselines (N=8 before, N=2 after)" in flat
