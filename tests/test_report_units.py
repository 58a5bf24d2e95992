"""A study with no GPU work counts ranks, not GPUs: findings and report say "4 ranks"."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tracescale.findings import top_findings
from tracescale.report.fmt import GPU, RANK, unit_of
from tracescale.report.render import render

FIXTURES = Path(__file__).parent / "fixtures"


def _doc(kinds: list[str] | None) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((FIXTURES / "study_strong.json").read_text())
    study = doc["studies"][0]
    for run, kind in zip(study["runs"], kinds or [], strict=False):
        run["kind"] = kind
    study["findings"] = top_findings(study)
    return doc


def test_unit_follows_the_runs_kinds() -> None:
    assert unit_of({"runs": [{"kind": "cpu"}, {"kind": "cpu"}]}) is RANK
    assert unit_of({"runs": [{"kind": "cpu"}, {"kind": "gpu"}]}) is GPU
    assert unit_of({"runs": [{}]}) is GPU  # documents from before ``kind``: as they were
    assert unit_of({"runs": "damaged"}) is GPU
    counts = [RANK.of(1), RANK.of(4), GPU.of(1), GPU.of(8)]
    assert counts == ["1 rank", "4 ranks", "1 GPU", "8 GPUs"]


def test_cpu_only_findings_count_ranks() -> None:
    study = _doc(["cpu"] * 4)["studies"][0]
    assert study["findings"][0]["text"] == (
        "Data loading takes 60.9 ms per step (43%) at 8 ranks; it does not shrink with more "
        "ranks (59.7 ms at 1 rank). If it were taken off the critical path (DataLoader workers, "
        "prefetching), steps would be 2.02x faster (119.0 ms → 59.0 ms per step) at 32 ranks "
        "(projected)."
    )
    assert not any("GPU" in f["text"] for f in study["findings"])


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_cpu_only_report_never_says_gpu(fmt: str) -> None:
    cpu = render(_doc(["cpu"] * 4), fmt, width=400)
    assert "GPU" not in cpu
    assert "Baseline: 1 rank" in cpu
    assert "Serial fraction (the part that does not shrink with more ranks)" in cpu
    assert "Speedup over 1 rank. Karp–Flatt: " in cpu and "over the one-rank step" in cpu
    gpu = render(_doc(None), fmt, width=400)
    assert "Baseline: 1 GPU" in gpu and "over the one-GPU step" in gpu
    mixed = render(_doc(["cpu", "gpu", "cpu", "cpu"]), fmt, width=400)
    assert mixed.replace("GPU", "rank") != mixed


def test_weak_optimum_wording_counts_ranks() -> None:
    study = copy.deepcopy(_doc(["cpu"] * 4)["studies"][0])
    study["scaling"]["optimal_world_size"] = 24
    texts = [f["text"] for f in top_findings(study, limit=10)]
    assert "Step time is lowest at 24 ranks: beyond it, more ranks make each step slower." in texts


def test_html_charts_count_ranks_for_cpu_only_studies() -> None:
    from tracescale.report.html import chart_data

    assert [s["unit"] for s in chart_data(_doc(["cpu"] * 4))["studies"]] == ["ranks"]
    assert [s["unit"] for s in chart_data(_doc(None))["studies"]] == ["GPUs"]
    page = render(_doc(["cpu"] * 4), "html")
    assert '"unit":"ranks"' in page and '(st.unit || "GPUs") + " (N, log scale)"' in page


def test_serial_lines_of_modern_parallelism_have_plain_names() -> None:
    """The replay's own serial-fraction lines print as words, not their JSON keys."""
    from tracescale.report.sections import serial_section

    study = {
        "mode": "strong",
        "runs": [],
        "scaling": {
            "serial_fraction": {
                "total": 0.05,
                "by_category": {
                    "compute": 0.03,
                    "pipeline_bubble": 0.015,
                    "expert_imbalance": 0.005,
                },
            },
            "amdahl_limit": 20.0,
        },
    }
    names = [row[0] for row in serial_section(study).rows]
    assert names == ["Compute", "Pipeline bubble", "Expert load imbalance", "Total"]
