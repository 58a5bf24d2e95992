"""Report sections for top contributors, stragglers and honestly bounded scaling numbers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tracescale.report import render
from tracescale.report.bounds import karp_flatt_cell
from tracescale.report.contributors import stragglers_section, top_ops_section
from tracescale.report.sections import serial_section

FIXTURES = Path(__file__).parent / "fixtures"
LAUNCH = "cudaLaunchKernel"
KERNEL = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>(int, float*)"
)


def _run(n: int, host_launch: float, kernel: float, stragglers: list[Any]) -> dict[str, Any]:
    return {
        "world_size": n,
        "step_time_s": {"mean": 0.1},
        "breakdown_s": {"compute": 0.05, "host": 0.05},
        "per_rank": [{"rank": r} for r in range(n)],
        "top_ops": {
            "host": [
                {
                    "name": LAUNCH,
                    "seconds": host_launch,
                    "share": 0.6,
                    "category_s": host_launch / 0.6,
                    "law": {},
                }
            ],
            "compute": [{"name": KERNEL, "seconds": kernel, "share": 0.004}],
        },
        "stragglers": stragglers,
    }


def _study() -> dict[str, Any]:
    late = {"rank": 3, "extra_s": 0.0105, "category": "compute", "own_s": 0.0656}
    late.update(median_own_s=0.0551, noise_s=0.0003)
    runs = [_run(2, 0.001, 0.02, []), _run(4, 0.004, 0.01, [late])]
    law = {"form": "grows ~N^2.00", "exponent": 2.0, "flagged": True}
    for r in runs:
        r["top_ops"]["host"][0]["law"] = law
    return {"mode": "strong", "runs": runs, "scaling": {}}


def test_top_ops_rows_show_every_n_share_and_flag() -> None:
    sec = top_ops_section(_study())
    assert sec is not None
    assert sec.headers == ["Category", "Op / kernel", "N=2", "N=4", "Share", "Law across N"]
    # The kernel is under 1% of compute: not listed, so compute has no row. The category's
    # own-timeline total, the basis of the shares, is printed above its ops at every N.
    assert sec.rows == [
        ["Host overhead", "(whole, own timelines)", "1.7 ms", "6.7 ms", "100%", ""],
        ["", LAUNCH, "1.0 ms", "4.0 ms", "60%", "grows ~N^2.00 (!)"],
    ]
    assert "(!): does not shrink with N." in sec.note


def test_stragglers_rows_and_none_found() -> None:
    sec = stragglers_section(_study())
    assert sec is not None
    assert sec.rows == [["4", "3", "65.6 ms", "55.1 ms", "10.5 ms", "Compute", "300 µs"]]
    quiet = _study()
    quiet["runs"][1]["stragglers"] = []
    sec = stragglers_section(quiet)
    assert sec is not None and sec.items == [
        "None at N=2, 4: no rank's own time (step minus waiting for others) exceeds the "
        "median rank's by more than the step-to-step noise."
    ]


def test_karp_flatt_is_bounded_marked_and_never_from_one_run() -> None:
    assert karp_flatt_cell({"karp_flatt": 0.1234}, 3) == "0.123"
    assert karp_flatt_cell({"karp_flatt": 0.1234, "karp_flatt_estimated": True}, 3) == (
        "0.123 (est.)"
    )
    assert karp_flatt_cell({"karp_flatt": 1.7}, 2) == ">1 (slower)"
    assert karp_flatt_cell({"karp_flatt": -0.386, "karp_flatt_estimated": True}, 1) == "–"
    assert karp_flatt_cell({"karp_flatt": -0.386}, 2) == "<0 (superlinear)"


def test_serial_section_says_a_slowdown_and_marks_estimates() -> None:
    study = {
        "mode": "strong",
        "runs": [{"world_size": 2}, {"world_size": 4}],
        "scaling": {
            "serial_fraction": {"total": 1.0, "by_category": {"host": 1.0}, "t1_estimated": True},
            "points": [{"world_size": 4, "speedup": 0.8}],
        },
    }
    sec = serial_section(study)
    assert sec.headers[1] == "Share of T(1) (T(1) est.)"
    assert "This job slows down with more ranks: overheads grow faster than the work shrinks" in (
        sec.note
    )


def test_weak_scaling_has_no_amdahl_cap_column() -> None:
    """In weak scaling the work grows with N: an Amdahl cap of 12.4x beside projected 31x
    speedups would contradict them."""
    sf = {"total": 0.081, "by_category": {"host": 0.081}, "ci90": [0.07, 0.09]}
    study = {
        "mode": "weak",
        "runs": [{"world_size": 1}, {"world_size": 8}],
        "scaling": {"serial_fraction": sf, "amdahl_limit": 12.4},
    }
    sec = serial_section(study)
    assert sec.headers == ["Category", "Share of T(1)"]
    assert all(len(r) == 2 for r in sec.rows) and "12.4x" not in str(sec.rows)
    assert "Amdahl's cap does not apply" in sec.note
    study["mode"] = "strong"
    assert serial_section(study).headers[-1] == "Alone caps speedup at"


def test_every_format_shows_the_new_sections() -> None:
    doc = json.loads((FIXTURES / "study_strong.json").read_text())
    study = doc["studies"][0]
    study["runs"] = _study()["runs"]
    for fmt_name, needle in (("table", "Top contributors"), ("markdown", "### Top contributors")):
        out = render(doc, fmt_name)
        assert needle in out and LAUNCH in out and "Stragglers" in out
    html = render(doc, "html")
    assert 'id="top_ops"' in html and 'id="stragglers"' in html


def test_one_step_runs_are_said_not_checked_for_stragglers() -> None:
    study = _study()
    for r in study["runs"]:
        r["steps"] = 1
        r["stragglers"] = []
    sec = stragglers_section(study)
    assert sec is not None and sec.items == [
        "Not checked at N=2, 4: one step per rank, so the step-to-step noise a straggler must "
        "exceed cannot be measured."
    ]


def test_a_damaged_per_rank_field_gives_no_straggler_section() -> None:
    """A cached document whose ``per_rank`` is not a list (found by the cache fuzz test) is
    rendered without the section, not a TypeError."""
    study = {"runs": [{"world_size": 2, "per_rank": 1, "stragglers": []}]}
    assert stragglers_section(study) is None
