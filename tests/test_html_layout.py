"""Every chart of every shipped and ../shared study, laid out by headless Chromium at 1400 and
800 px: no two text elements overlap, none is clipped by its svg, text is drawn at its own size,
and every bar, dot and line stays inside the plotting area (no ideal line leaving the plot).

A probe script (run after the report's own) measures each visible ``<text>`` with
``getBoundingClientRect`` and reports overlaps, clipping and the svg's scale. Screenshots of
every page at both widths are kept (``--artifacts-dir``/``--screenshot-dir``, else the test's
tmp dir) for a person to look at. Needs chromium; skipped without it unless
``TRACESCALE_REQUIRE_ALL=1``.
"""

from __future__ import annotations

import copy
import html
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.headless import Browser, find_chromium
from tracescale.report import render, render_compare

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ["ddp_cpu_strong", "ddp_cpu_weak", "sim_gpu_strong"]
SHARED = [
    "tb_plugin/resnet50_num_workers_0",
    "tb_plugin/resnet50_num_workers_4",
    "external/param_dlrm_8rank",
    "hta/trace_diff/control",
]
WIDTHS = (1400, 800)
FIXTURE = ROOT / "tests" / "fixtures" / "study_strong.json"

PROBE = "<script>" + (Path(__file__).parent / "layout_probe.js").read_text() + "</script>"


def probe_layout(
    browser: Browser, page_html: str, width: int, tmp: Path, name: str
) -> dict[str, Any]:
    """Load the page at ``width`` px with the probe appended; its measurements as a dict."""
    page = tmp / f"{name}-{width}-probe.html"
    page.write_text(page_html.replace("</body>", PROBE + "</body>"), encoding="utf-8")
    loaded = browser.load(page, width, 1000)
    assert not [x for x in loaded.uncaught + loaded.console if "Uncaught" in x], loaded.uncaught
    assert 'id="ts-error"' not in loaded.dom, "the chart script failed"
    m = re.search(r'<pre id="ts-layout">(.*?)</pre>', loaded.dom, re.S)
    assert m, "the layout probe did not run"
    found: dict[str, Any] = json.loads(html.unescape(m.group(1)))
    return found


def screenshot(
    browser: Browser, page_html: str, width: int, height: int, tmp: Path, out: Path
) -> Path:
    """A PNG of the page's top ``height`` px (all its charts) at ``width`` px."""
    page = tmp / f"{out.stem}.html"
    page.write_text(page_html, encoding="utf-8")
    png = browser.load(page, width, height, screenshot=True).png
    assert png is not None
    out.write_bytes(png)
    return out


def check_page(
    browser: Browser, page_html: str, name: str, tmp: Path, shots: Path, min_charts: int
) -> None:
    """The layout rules at both widths, and a screenshot of each kept in ``shots``."""
    for width in WIDTHS:
        found = probe_layout(browser, page_html, width, tmp, name)
        charts = found["charts"]
        assert len(charts) >= min_charts, (name, width, [c["title"] for c in charts])
        assert not found["problems"], (name, width, found["problems"][:6])
        for c in charts:
            # Drawn at the box's own width: text neither doubled nor shrunk to nothing.
            assert 0.8 <= c["scale"] <= 1.001, (name, width, c["title"], c["scale"])
            assert all(9 <= px <= 14 for px in c["sizes"]), (name, width, c["title"], c["sizes"])
        height = int(min(max(found["bottom"] + 40, 600), 9000))
        png = screenshot(browser, page_html, width, height, tmp, shots / f"{name}-{width}.png")
        data = png.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(data[16:20], "big") == width
        assert len(data) > 30_000, f"{png} is nearly empty"


@pytest.fixture(scope="module")
def sample_docs(analyzed_doc) -> dict[str, dict[str, Any]]:
    find_chromium()  # skip (or fail in CI) before analyzing what no browser will draw
    return {name: analyzed_doc(ROOT / "sample_traces" / name) for name in SAMPLES}


@pytest.fixture(scope="module")
def shared_docs(analyzed_doc) -> dict[str, dict[str, Any]]:
    find_chromium()  # skip (or fail in CI) before analyzing what no browser will draw
    root = ROOT.parent / "shared" / "traces"
    if not root.is_dir():
        pytest.skip(f"real traces not found at {root} (they sit beside the checkout in CI)")
    return {name: analyzed_doc(root / name) for name in SHARED}


@pytest.fixture
def shots(artifacts_dir: Path) -> Path:
    out = artifacts_dir / "screenshots"
    out.mkdir(parents=True, exist_ok=True)
    return out


@pytest.mark.parametrize("name", SAMPLES)
def test_shipped_study_charts_have_no_overlapping_or_clipped_text(
    browser: Browser, sample_docs: dict[str, dict[str, Any]], name: str, tmp_path: Path, shots: Path
) -> None:
    check_page(browser, render(sample_docs[name], "html"), name, tmp_path, shots, min_charts=5)


@pytest.mark.parametrize("name", SHARED)
def test_real_study_charts_have_no_overlapping_or_clipped_text(
    browser: Browser, shared_docs: dict[str, dict[str, Any]], name: str, tmp_path: Path, shots: Path
) -> None:
    safe = name.replace("/", "_")
    check_page(browser, render(shared_docs[name], "html"), safe, tmp_path, shots, min_charts=3)


@pytest.mark.parametrize(
    ("name", "pair"),
    [
        ("tb_plugin", ("tb_plugin/resnet50_num_workers_0", "tb_plugin/resnet50_num_workers_4")),
        ("trace_diff", ("hta/trace_diff/control", "hta/trace_diff/test")),
    ],
)
def test_compare_charts_real_pairs(
    browser: Browser,
    shared_docs: dict[str, dict[str, Any]],
    analyzed_doc,
    name: str,
    pair: tuple[str, str],
    tmp_path: Path,
    shots: Path,
) -> None:
    from tracescale.comparison import compare_docs

    root = ROOT.parent / "shared" / "traces"
    before, after = (analyzed_doc(root / p) for p in pair)
    doc = compare_docs(before, after, match="any")
    check_page(browser, render_compare(doc, "html"), f"compare_{name}", tmp_path, shots, 1)


def _many_ranks(n: int) -> dict[str, Any]:
    """The hand-made study with its largest run at ``n`` ranks (rank labels must thin out)."""
    doc: dict[str, Any] = json.loads(FIXTURE.read_text())
    run = doc["studies"][0]["runs"][-1]
    proto = run["per_rank"][0]
    run["per_rank"] = [
        dict(copy.deepcopy(proto), rank=i, step_time_s=proto["step_time_s"] * (1 + 0.01 * (i % 7)))
        for i in range(n)
    ]
    run["stragglers"] = [{"rank": 17, "extra_s": 0.01, "category": "dataloader"}]
    return doc


def test_edge_cases_stay_readable(browser: Browser, tmp_path: Path, shots: Path) -> None:
    """32 and 256 ranks, a serial fraction above 100%, tiny step times, many world sizes."""
    from tracescale.comparison import compare_docs

    doc = _many_ranks(32)
    doc["studies"].append(_many_ranks(256)["studies"][0])
    sc = doc["studies"][0]["scaling"]
    sc["serial_fraction"]["total"] = 1.027
    sc["serial_fraction"]["ci90"] = [0.99, 1.097]
    sc["amdahl_limit"] = 0.97
    check_page(browser, render(doc, "html"), "edge_ranks", tmp_path, shots, min_charts=10)

    before = json.loads(FIXTURE.read_text())
    runs = before["studies"][0]["runs"]
    for k in range(4, 9):  # world sizes 16..256: eight pairs of bars in one compare chart
        extra = copy.deepcopy(runs[-1])
        extra["world_size"] = 2**k
        runs.append(extra)
    after = copy.deepcopy(before)
    for run in after["studies"][0]["runs"]:
        run["breakdown_s"]["dataloader"] *= 0.5
    page = render_compare(compare_docs(before, after), "html")
    check_page(browser, page, "edge_compare", tmp_path, shots, min_charts=1)


def test_the_probe_sees_overlap_clipping_and_marks_outside(
    browser: Browser, tmp_path: Path
) -> None:
    """The checks above can fail: a page with each flaw drawn on purpose is reported."""
    page = (
        '<!DOCTYPE html><html><body><div class="chart" style="width:400px"><h4>flawed</h4>'
        '<svg viewBox="0 0 300 100" width="300" height="100" data-plot="20 10 280 80">'
        '<text x="50" y="50">0.6000000000000001x</text><text x="60" y="52">speedup</text>'
        '<text x="290" y="30">102.7% (cap 1.0x)</text>'
        '<path d="M30,70L150,-20" stroke="#888"/></svg></div></body></html>'
    )
    found = probe_layout(browser, page, 800, tmp_path, "flawed")
    kinds = sorted({p["kind"] for p in found["problems"]})
    assert kinds == ["clipped", "mark outside the plot", "overlap"], found["problems"]
