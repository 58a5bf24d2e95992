"""One self-contained HTML file: tables rendered here, charts drawn by inline JS as inline SVG.

No external resource of any kind (no CDN, fonts or images), so the page opens offline and can be
attached to a ticket. The charts read a trimmed copy of the document embedded as JSON.
"""

from __future__ import annotations

import html
import json
import re
from importlib import resources
from typing import Any

from tracescale.report import fmt
from tracescale.report.jsonsafe import finite
from tracescale.report.sections import Block, Section, document_blocks, tool_line

_RUN_KEYS = ("world_size", "step_time_s", "breakdown_s", "per_rank", "stragglers")
_SCALING_KEYS = (
    "baseline_world_size",
    "assumed",
    "points",
    "serial_fraction",
    "amdahl_limit",
    "projections",
    "what_if",
    "curve",
)


def _asset(name: str) -> str:
    return resources.files("tracescale.report").joinpath("assets", name).read_text("utf-8")


def chart_data(doc: dict[str, Any]) -> dict[str, Any]:
    """The parts of an analyze document the charts draw (file lists left out to keep it small)."""
    studies = []
    for st in doc.get("studies") or []:
        if not isinstance(st, dict):
            continue
        runs = [
            {k: r.get(k) for k in _RUN_KEYS if k in r}
            for r in st.get("runs") or []
            if isinstance(r, dict)
        ]
        raw = st.get("scaling")
        sc: dict[str, Any] = raw if isinstance(raw, dict) else {}
        scaling = {k: sc.get(k) for k in _SCALING_KEYS if k in sc}
        studies.append(
            {
                "categories": st.get("categories"),
                "runs": runs,
                "scaling": scaling,
                "unit": fmt.unit_of(st).plural,  # the x axes count GPUs, or ranks (CPU-only)
            }
        )
    return {"kind": "study", "studies": studies}


def _json_script(data: dict[str, Any]) -> str:
    """JSON safe inside <script>: '<', '>' and '&' escaped so no '</script>' can appear."""
    text = json.dumps(finite(data), separators=(",", ":"), allow_nan=False)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return f'<script type="application/json" id="ts-data">{text}</script>'


_CODE = re.compile(r"`([^`]+)`")


def prose(text: str) -> str:
    """Escaped text with Markdown code spans (op and kernel names in findings) as <code>."""
    return _CODE.sub(r"<code>\1</code>", html.escape(text))


def section_html(sec: Section) -> str:
    """One section as a heading, an optional list and an optional table."""
    e = html.escape
    out = [f'<section id="{e(sec.key)}"><h3>{e(sec.title)}</h3>']
    if sec.items:
        tag, cls = ("ol", "findings") if sec.key == "findings" else ("ul", "items")
        if sec.key == "warnings":
            cls = "warnings"
        out.append(f'<{tag} class="{cls}">' + "".join(f"<li>{prose(i)}</li>" for i in sec.items))
        out.append(f"</{tag}>")
    if sec.rows:
        out.append("<table>")
        if any(sec.headers):
            ths = "".join(
                f'<th class="{"l" if i < sec.left_cols else ""}">{e(h)}</th>'
                for i, h in enumerate(sec.headers)
            )
            out.append(f"<thead><tr>{ths}</tr></thead>")
        out.append("<tbody>")
        for row in sec.rows:
            tds = "".join(
                f'<td class="{"l" if i < sec.left_cols else ""}">{e(c)}</td>'
                for i, c in enumerate(row)
            )
            out.append(f"<tr>{tds}</tr>")
        out.append("</tbody></table>")
    if sec.note:
        out.append(f'<p class="note">{prose(sec.note)}</p>')
    out.append("</section>")
    return "".join(out)


def page(
    title: str, blocks: list[Block], data: dict[str, Any], *, kind: str, meta: str = ""
) -> str:
    """The full page: a header, per block its charts slot and its sections, data and script."""
    e = html.escape
    body = []
    for i, b in enumerate(blocks):
        body.append(f"<h2>{e(b.title)}</h2>")
        if b.lines:
            body.append(
                '<ul class="lines">' + "".join(f"<li>{e(x)}</li>" for x in b.lines) + "</ul>"
            )
        lead = [s for s in b.sections if s.key in ("findings", "warnings", "verdict")]
        rest = [s for s in b.sections if s not in lead]
        body.extend(section_html(s) for s in lead)
        body.append(f'<div class="charts" data-index="{i}"></div>')
        body.extend(section_html(s) for s in rest)
    payload = dict(data)
    payload["kind"] = kind
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(title)}</title><style>{_asset('report.css')}</style></head>\n"
        f'<body><header><h1>{e(title)}</h1><div class="meta">{e(meta)}</div></header>\n'
        f"<main>{''.join(body)}</main>\n"
        f"{_json_script(payload)}\n"
        f"<script>{_asset('report.js')}</script>\n"
        "</body></html>\n"
    )


def render_html(doc: dict[str, Any]) -> str:
    """The analyze document as one offline HTML page."""
    return page(
        "tracescale report",
        document_blocks(doc),
        chart_data(doc),
        kind="study",
        meta=tool_line(doc),
    )
