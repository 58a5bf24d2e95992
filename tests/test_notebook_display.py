"""Reports inline in a notebook: ``Study._repr_html_`` / ``Comparison._repr_html_``.

Self-contained (no http/https) for every shipped study; in headless Chromium, two reports in
one page draw exactly what each draws alone (scoped ids, CSS and scripts), the host page's own
elements keep their styles, and the colours follow a dark or light notebook theme.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

import tracescale
from tests.headless import Browser
from tracescale.comparison import compare_docs
from tracescale.report.inline import inline_report, scope_css
from tracescale.study import Study

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "study_strong.json"
SAMPLES = ROOT / "sample_traces"

#: Runs after the reports' scripts (scripts execute in order): per report, what it drew.
_PROBE = """<script>
(function () {
  var out = {reports: [], ids: [], host: {}};
  document.querySelectorAll(".tracescale-report").forEach(function (r) {
    var cs = getComputedStyle(r), td = r.querySelector("td"), h3 = r.querySelector("h3");
    out.reports.push({uid: r.id, svgs: r.querySelectorAll("svg").length,
      ok: !!r.querySelector('[id="' + r.id + '-ts-ok"]'),
      error: !!r.querySelector('[id$="ts-error"]'),
      charts: Array.prototype.map.call(r.querySelectorAll(".charts"), function (c) {
        return c.innerHTML.split(r.id).join("UID"); }),
      color: cs.color, background: cs.backgroundColor,
      td_color: td ? getComputedStyle(td).color : null,
      marks: Array.prototype.map.call(r.querySelectorAll(".chart svg rect, .chart svg line"),
        function (m) { var st = getComputedStyle(m);
          return m.tagName === "line" ? st.stroke : st.fill; }),
      h3_color: h3 ? getComputedStyle(h3).color : null});
  });
  document.querySelectorAll("[id]").forEach(function (e) { out.ids.push(e.id); });
  var htd = document.getElementById("host-td");
  var hs = getComputedStyle(htd);
  out.host = {td_align: hs.textAlign, td_padding: hs.paddingLeft,
    body_bg: getComputedStyle(document.body).backgroundColor};
  var pre = document.createElement("pre");
  pre.id = "probe";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"""


def _host_page(fragments: list[str], body_attrs: str = "") -> str:
    return (
        '<!DOCTYPE html><html><head><meta charset="utf-8"></head>'
        f"<body {body_attrs}><table><tr><td id='host-td'>host cell</td></tr></table>"
        + "".join(f'<div class="cell-output">{f}</div>' for f in fragments)
        + _PROBE
        + "</body></html>"
    )


def _probe(
    browser: Browser, tmp: Path, name: str, page: str, *, dark: bool = False
) -> dict[str, Any]:
    """Load the host page (``dark``: in a dark OS theme); what its probe measured."""
    path = tmp / f"{name}.html"
    path.write_text(page, encoding="utf-8")
    loaded = browser.load(path, 800, 600, dark=dark)
    errors = [ln for ln in loaded.uncaught + loaded.console if "Uncaught" in ln]
    assert not errors, errors
    m = re.search(r'<pre id="probe">(.*?)</pre>', loaded.dom, re.S)
    assert m, "the probe script did not run"
    text = m.group(1).replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">")
    data: dict[str, Any] = json.loads(text.replace("&amp;", "&"))
    return data


def _fixture_study() -> Study:
    return Study(doc=json.loads(FIXTURE.read_text()))


def _compare() -> tracescale.Comparison:
    before = json.loads(FIXTURE.read_text())
    after = json.loads(FIXTURE.read_text())
    for run in after["studies"][0]["runs"]:
        run["breakdown_s"]["dataloader"] -= 0.04
    return tracescale.Comparison(doc=compare_docs(before, after))


@pytest.fixture(scope="module")
def shipped(analyzed_doc) -> list[Study]:  # type: ignore[no-untyped-def]
    """Every shipped sample study, each its own one-study document (conftest's analyzed_doc:
    analyzed once per session, shared with the layout and Chromium tests)."""
    return [Study(doc=analyzed_doc(d)) for d in sorted(SAMPLES.iterdir()) if d.is_dir()]


def test_every_shipped_study_is_self_contained(shipped: list[Study]) -> None:
    assert len(shipped) == 3
    for one in shipped:
        assert len(one.studies) == 1
        html = one._repr_html_()
        assert not re.search(r"https?:", html, re.I), "no network reference"
        assert html.startswith('<div class="tracescale-report"')
        assert "<body" not in html and "<html" not in html and "<main" not in html
        # Every table of the standalone report is there, with the same cell text.
        page = one.render("html")
        assert html.count("<table>") == page.count("<table>") > 3
        assert re.findall(r"<td[^>]*>([^<]*)</td>", html) == re.findall(
            r"<td[^>]*>([^<]*)</td>", page
        )
    html = _compare()._repr_html_()
    assert not re.search(r"https?:", html, re.I) and "Verdict" in html


def test_every_style_block_is_scoped_and_attributes_survive() -> None:
    page = (
        '<html><head><style>p { color: red }</style></head><body class="x">'
        '<main id="m" class="c"><style media="print">td { x: 1 }</style><p>hi</p></main>'
        "</body></html>"
    )
    out = inline_report(page, "u")
    assert out.count("<style>") == 1 and "#u p {color: red}" in out and "#u td {x: 1}" in out
    assert '<div data-ts-main id="u-m" class="c"><p>hi</p></div>' in out


def test_each_report_gets_its_own_ids() -> None:
    study = _fixture_study()
    a, b = study._repr_html_(), study._repr_html_()
    ids_a = re.findall(r'\bid="([^"]+)"', a)
    ids_b = re.findall(r'\bid="([^"]+)"', b)
    assert ids_a and not set(ids_a) & set(ids_b)
    uid = ids_a[0]
    assert all(i == uid or i.startswith(uid + "-") for i in ids_a)


def test_css_is_scoped_under_the_container() -> None:
    css = "body { margin: 0 } h2, main p { color: red } #ts-error { x: 1 }"
    css += (
        " @media (prefers-color-scheme: dark) { td { color: #fff } } @keyframes k { to { a: 1 } }"
    )
    out = scope_css(css, "#R", "R")
    assert "#R {margin: 0}" in out
    assert "#R h2, #R [data-ts-main] p {color: red}" in out
    assert "#R #R-ts-error {x: 1}" in out
    assert "@media (prefers-color-scheme: dark) {\n#R td {color: #fff}" in out
    assert "@keyframes k { to { a: 1 } }" in out


def test_two_reports_in_one_page_render_independently(browser: Browser, tmp_path: Path) -> None:
    study, cmp = _fixture_study(), _compare()
    alone_s = _probe(
        browser, tmp_path, "s", _host_page([inline_report(study.render("html"), "ts-a")])
    )
    alone_c = _probe(
        browser, tmp_path, "c", _host_page([inline_report(cmp.render("html"), "ts-b")])
    )
    both = _probe(browser, tmp_path, "both", _host_page([study._repr_html_(), cmp._repr_html_()]))
    reports = both["reports"]
    assert len(reports) == 2
    assert all(r["ok"] and not r["error"] for r in reports), "each chart script finished"
    assert reports[0]["svgs"] >= 7 and reports[1]["svgs"] >= 1
    # Each draws exactly what it draws alone: no script or data crossed over.
    assert reports[0]["charts"] == alone_s["reports"][0]["charts"]
    assert reports[1]["charts"] == alone_c["reports"][0]["charts"]
    assert len(both["ids"]) == len(set(both["ids"])), "ids unique in the page"
    # The host page keeps its own look: no report CSS leaked out of the container.
    assert both["host"]["td_align"] in ("start", "left")
    assert both["host"]["td_padding"] == alone_s["host"]["td_padding"] != "10px"


def _lum(css_rgb: str) -> float:
    r, g, b = (int(x) for x in re.findall(r"\d+", css_rgb)[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def test_colours_follow_the_notebook_theme(browser: Browser, tmp_path: Path) -> None:
    frag = _fixture_study()._repr_html_()
    dark_body = 'data-jp-theme-light="false" style="background:#111418;color:#d8dde3"'
    dark = _probe(browser, tmp_path, "dark", _host_page([frag], dark_body))["reports"][0]
    assert dark["td_color"] == "rgb(216, 221, 227)", "table text inherits the notebook's"
    assert dark["background"] == "rgba(0, 0, 0, 0)", "no light card on a dark notebook"
    assert _lum(dark["h3_color"]) > 140, "headings light enough on a dark background"
    marks = [m for m in dark["marks"] if m.startswith("rgb")]
    assert marks and not [m for m in marks if _lum(m) < 50], "no chart mark vanishes on dark"
    vscode_light = 'class="vscode-light" style="background:#fff;color:#1f1f1f"'
    light = _probe(browser, tmp_path, "light", _host_page([frag], vscode_light), dark=True)
    light = light["reports"][0]
    assert light["td_color"] == "rgb(31, 31, 31)"
    assert _lum(light["h3_color"]) < 110, "the notebook's light theme wins over the OS"
    # A page with no theme of its own, in a dark OS theme: a dark card, light text.
    plain = _probe(browser, tmp_path, "plain", _host_page([frag]), dark=True)["reports"][0]
    assert _lum(plain["background"]) < 60 and _lum(plain["td_color"]) > 180
