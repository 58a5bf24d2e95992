"""The terminal report at 80 and 200 columns: never wider than the terminal, no wrapped cells.

Every shipped study (sample_traces/*) and the real ones beside the checkout (../shared) is
analyzed once and rendered at both widths; the text is kept under the test's tmp dir, or
under ``--artifacts-dir``/terminal (``$TRACESCALE_ARTIFACTS``) so a reviewer can read it.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from rich.cells import cell_len

from tracescale.report import render, render_compare
from tracescale.report.sections import Section
from tracescale.report.table import table_lines, terminal_width, wants_color

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ["ddp_cpu_strong", "ddp_cpu_weak", "sim_gpu_strong"]
SHARED = [
    "tb_plugin/resnet50_num_workers_0",
    "tb_plugin/resnet50_num_workers_4",
    "external/param_dlrm_8rank",
    "hta/trace_diff/control",
]
WIDTHS = (80, 200)
FIXTURE = ROOT / "tests" / "fixtures" / "study_strong.json"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def sample_docs(analyzed_doc) -> dict[str, dict[str, Any]]:
    return {name: analyzed_doc(ROOT / "sample_traces" / name) for name in SAMPLES}


@pytest.fixture(scope="module")
def shared_docs(analyzed_doc) -> dict[str, dict[str, Any]]:
    root = ROOT.parent / "shared" / "traces"
    if not root.is_dir():
        pytest.skip(f"real traces not found at {root} (they sit beside the checkout in CI)")
    return {name: analyzed_doc(root / name) for name in SHARED}


def _keep(folder: Path, name: str, text: str) -> None:
    """The rendered text as a test artifact (see the artifacts_dir fixture)."""
    out = folder / "terminal"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name.replace('/', '_')}.txt").write_text(text, encoding="utf-8")


def _check_width(text: str, width: int) -> list[str]:
    lines = text.splitlines()
    too_wide = [x for x in lines if cell_len(x) > width]
    assert not too_wide, f"{len(too_wide)} lines wider than {width}: {too_wide[:3]}"
    return lines


def _squeeze(lines: list[str]) -> list[str]:
    return [re.sub(r"\s+", " ", x).strip() for x in lines]


def _check_study_text(doc: dict[str, Any], width: int) -> list[str]:
    """Width, and the lines every study report must hold, at one width."""
    text = render(doc, "table", width=width)
    lines = _check_width(text, width)
    squeezed = _squeeze(lines)
    st = doc["studies"][0]
    assert f"Study: {st['path']}" in squeezed
    for title in ("Where each step's time goes (per step, mean over ranks)", "Scaling (measured)"):
        assert title in squeezed, title
    # Each run's mean step time is printed next to its label (in whichever split table).
    from tracescale.report import fmt

    means = [fmt.secs(r["step_time_s"]["mean"]) for r in st["runs"]]
    row_cells = " ".join(x for x in squeezed if x.startswith("Step time (mean)"))
    for m in means:
        assert m in row_cells, (m, row_cells)
    # A table row never continues on the next line: a value cell never starts a line.
    for x in squeezed:
        assert not re.fullmatch(r"\(\d+\.\d%\)", x), x
    # No rounding noise.
    noise = re.search(r"(?<![\w.])\d+\.\d{6,}(?![\w.])", text)
    assert not noise, noise
    assert not re.search(r"\d{5,}\.\dx", text)
    assert "=None" not in text
    return squeezed


@pytest.mark.parametrize("width", WIDTHS)
def test_shipped_studies_fit_the_terminal(
    sample_docs: dict[str, dict[str, Any]], width: int, artifacts_dir: Path
) -> None:
    for name, doc in sample_docs.items():
        squeezed = _check_study_text(doc, width)
        _keep(artifacts_dir, f"{name}_{width}", render(doc, "table", width=width))
        assert "World sizes measured: 1, 2, 4" + (", 8" if "sim" in name else "") in squeezed


@pytest.mark.parametrize("width", WIDTHS)
def test_real_studies_fit_the_terminal(
    shared_docs: dict[str, dict[str, Any]], width: int, artifacts_dir: Path
) -> None:
    for name, doc in shared_docs.items():
        _check_study_text(doc, width)
        _keep(artifacts_dir, f"{name}_{width}", render(doc, "table", width=width))


PAIRS = {
    "tb_plugin": ("tb_plugin/resnet50_num_workers_0", "tb_plugin/resnet50_num_workers_4"),
    "trace_diff": ("hta/trace_diff/control", "hta/trace_diff/test"),
}


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_real_compare_fits_the_terminal(
    shared_docs: dict[str, dict[str, Any]], analyzed_doc, width: int, pair: str, artifacts_dir: Path
) -> None:
    from tracescale.comparison import compare_docs

    root = ROOT.parent / "shared" / "traces"
    before, after = (analyzed_doc(root / name) for name in PAIRS[pair])
    text = render_compare(compare_docs(before, after, match="any"), "table", width=width)
    _keep(artifacts_dir, f"compare_{pair}_{width}", text)
    squeezed = _squeeze(_check_width(text, width))
    assert "Verdict" in squeezed and "Step time (mean per step)" in squeezed
    assert "Ops that changed most (per step, after − before)" in squeezed


def test_wide_layout_keeps_every_run_in_one_table(sample_docs: dict[str, dict[str, Any]]) -> None:
    lines = render(sample_docs["sim_gpu_strong"], "table", width=200).splitlines()
    header = next(x for x in lines if x.strip().startswith("N=1"))
    assert re.sub(r"\s+", " ", header).strip() == "N=1 N=2 N=4 N=8"
    # Prose is not cut at 120 on a wide terminal.
    doc = json.loads(FIXTURE.read_text())
    doc["studies"][0]["findings"][0]["text"] = "word " * 35
    out = render(doc, "table", width=200)
    assert "  1. " + "word " * 34 + "word" in out.splitlines()


def test_narrow_layout_exact(artifacts_dir: Path) -> None:
    """The hand-made study at 80 columns: the breakdown splits, prose wraps with an indent."""
    doc = json.loads(FIXTURE.read_text())
    text = render(doc, "table", width=80)
    _keep(artifacts_dir, "fixture_80", text)
    lines = text.splitlines()
    start = lines.index("Findings (biggest lever first)")
    assert lines[start : start + 8] == [
        "Findings (biggest lever first)",
        "  1. Data loading takes 60.9 ms per step (43%) at 8 GPUs; it does not shrink",
        "     with more GPUs (59.7 ms at 1 GPU). If it were taken off the critical path",
        "     (DataLoader workers, prefetching), steps would be 2.02x faster (119.0 ms →",
        "     59.0 ms per step) at 32 GPUs (projected).",
        "  2. Compute takes 50.8 ms per step (36%) at 8 GPUs. If its part that does not",
        "     shrink were parallel, steps would be 1.19x faster (119.0 ms → 99.6 ms per",
        "     step) at 32 GPUs (projected).",
    ]
    start = lines.index("Where each step's time goes (per step, mean over ranks)")
    assert lines[start + 1 : start + 4] == [
        "                                          N=1                N=2",
        " ───────────────────────────────────────────────────────────────",
        " Step time (mean)                    354.5 ms           230.8 ms",
    ]
    second = lines.index("                                          N=4                N=8")
    assert lines[second + 2] == " Step time (mean)                    173.4 ms           141.1 ms"
    start = lines.index("Scaling (measured)")
    assert lines[start : start + 7] == [
        "Scaling (measured)",
        " N  Step time  Speedup  Efficiency  Karp–Flatt",
        " ─────────────────────────────────────────────",
        " 1   354.5 ms    1.00x      100.0%           –",
        " 2   230.8 ms    1.54x       76.8%       0.302",
        " 4   173.4 ms    2.04x       51.1%       0.319",
        " 8   141.1 ms    2.51x       31.4%       0.312",
    ]


def test_headers_wrap_by_word_before_a_table_splits() -> None:
    sec = Section("t", "T", ["Category", "Alone caps speedup at"], [["Compute", "17.7x"]])
    assert [t.plain for t in table_lines(sec, 24)] == [
        "           Alone caps",
        " Category  speedup at",
        " ────────────────────",
        " Compute        17.7x",
    ]


def test_a_table_too_wide_for_any_split_becomes_records() -> None:
    form = "max(0, ring[2(N-1)*alpha + bytes-term/bandwidth] - overlap_window) + residual"
    sec = Section("m", "Models", ["Category", "Form", "Fit error"], [["Comm", form, "6.0 ms"]])
    sec.left_cols = 2
    lines = [t.plain for t in table_lines(sec, 60)]
    assert lines == [
        " Comm",
        "   Form       max(0, ring[2(N-1)*alpha +",
        "              bytes-term/bandwidth] - overlap_window) +",
        "              residual",
        "   Fit error  6.0 ms",
    ]
    assert all(cell_len(x) <= 60 for x in lines)


def test_colour_only_on_request_and_the_same_text() -> None:
    doc = json.loads(FIXTURE.read_text())
    plain = render(doc, "table", width=100)
    coloured = render(doc, "table", width=100, color=True)
    assert "\x1b[" not in plain and "\x1b[" in coloured
    assert [x.rstrip() for x in ANSI.sub("", coloured).splitlines()] == plain.splitlines()


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_colour_and_width_follow_the_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("NO_COLOR", "FORCE_COLOR", "TERM", "COLUMNS"):
        monkeypatch.delenv(var, raising=False)
    assert wants_color(_Tty()) and not wants_color(io.StringIO())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not wants_color(_Tty())
    monkeypatch.delenv("NO_COLOR")
    monkeypatch.setenv("TERM", "dumb")
    assert not wants_color(_Tty())
    assert terminal_width(io.StringIO()) == 120
    monkeypatch.setenv("COLUMNS", "80")
    assert terminal_width(io.StringIO()) == 80


@pytest.mark.parametrize("width", WIDTHS)
def test_cli_uses_columns_and_stays_plain_off_a_terminal(width: int) -> None:
    from tracescale.cli.main import cli

    res = CliRunner().invoke(cli, ["report", str(FIXTURE)], env={"COLUMNS": str(width)})
    assert res.exit_code == 0, res.output
    assert "\x1b[" not in res.stdout
    _check_width(res.stdout, width)
    assert res.stdout == render(json.loads(FIXTURE.read_text()), "table", width=width)


def test_long_labels_go_above_their_aligned_values() -> None:
    """Op names too long to sit beside the numbers: the name is a heading, values stay aligned."""
    op = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    sec = Section("top_ops", "Top", ["Category", "Op / kernel", "N=1", "N=2", "Share"])
    sec.rows = [
        ["Data loading", op, "31.9 ms", "17.0 ms", "100%"],
        ["", "aten::to", "1 ms", "2 ms", "3%"],
    ]
    sec.left_cols = 2
    lines = [t.plain for t in table_lines(sec, 66)]
    assert lines == [
        " Category / Op / kernel",
        "         N=1      N=2  Share",
        "     ───────────────────────",
        " Data loading",
        "   " + op,
        "     31.9 ms  17.0 ms   100%",
        "   aten::to",
        "        1 ms     2 ms     3%",
    ]


@pytest.mark.parametrize("width", WIDTHS)
def test_inspect_fits_the_terminal(width: int, artifacts_dir: Path) -> None:
    from tracescale.cli.main import cli

    path = ROOT / "sample_traces" / "ddp_cpu_strong"
    res = CliRunner().invoke(cli, ["inspect", str(path)], env={"COLUMNS": str(width)})
    assert res.exit_code == 0, res.output
    _keep(artifacts_dir, f"inspect_ddp_cpu_strong_{width}", res.stdout)
    squeezed = _squeeze(_check_width(res.stdout, width))
    assert f"{path}: world size 4 (ws4)" in " ".join(squeezed)
    rows = [x for x in squeezed if x.startswith("3/4 ")]
    assert any("vm_21164.1796039336464293282.pt.trace.json.gz" in x for x in rows), rows
    assert any("5 (#2-6), mean" in x for x in rows), rows
