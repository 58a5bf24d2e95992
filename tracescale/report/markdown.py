"""Markdown renderer: the table report's content for pull requests and wikis.

Trace names are untrusted text and Markdown passes raw HTML through, so ``<`` outside code
spans becomes ``&lt;``: no tag can start, and a kernel named ``<script>`` stays text (``>`` and
``&`` alone are harmless and stay readable in the raw file). Inside a code span Markdown shows
everything literally already. Control characters and bidirectional overrides are no markup
but act on the terminal that shows the file (``cat report.md``), so every text first goes
through :func:`~tracescale.text.clean`.
"""

from __future__ import annotations

import re
from typing import Any

from tracescale.report.sections import Block, Section, document_blocks, tool_line
from tracescale.text import clean

_CODE_SPAN = re.compile(r"(`[^`]+`)")
_HTML = str.maketrans({"<": "&lt;"})


def _text(text: str) -> str:
    """``text`` cleaned, with HTML outside code spans escaped, on one line."""
    parts = _CODE_SPAN.split(clean(text))
    return "".join(p if i % 2 else p.translate(_HTML) for i, p in enumerate(parts))


def _esc(text: str) -> str:
    """A table cell: escaped text with ``|`` escaped too."""
    return _text(text).replace("|", "\\|")


def section_md(sec: Section, level: int = 3) -> list[str]:
    """One section as Markdown lines (heading, list and/or pipe table, note)."""
    out = ["#" * level + " " + _text(sec.title), ""]
    if sec.items:
        for i, item in enumerate(sec.items, 1):
            out.append((f"{i}. " if sec.key == "findings" else "- ") + _text(item))
        out.append("")
    if sec.rows:
        headers = sec.headers or [""] * len(sec.rows[0])
        out.append("| " + " | ".join(_esc(h) for h in headers) + " |")
        left = min(sec.left_cols, len(headers))
        out.append("|" + "|".join([":---"] * left + ["---:"] * (len(headers) - left)) + "|")
        out.extend("| " + " | ".join(_esc(c) for c in row) + " |" for row in sec.rows)
        out.append("")
    if sec.note:
        out += [f"_{_text(sec.note)}_", ""]
    return out


def blocks_md(blocks: list[Block], title: str, header: str) -> str:
    """Blocks as one Markdown document."""
    out = [f"# {_text(title)}", "", f"_{_text(header)}_", ""]
    for b in blocks:
        out += [f"## {_esc(b.title)}", ""]
        out += [f"- {_text(line)}" for line in b.lines]
        out.append("")
        for s in b.sections:
            out += section_md(s)
    return "\n".join(out).rstrip("\n") + "\n"


def render_markdown(doc: dict[str, Any]) -> str:
    """The analyze document as Markdown."""
    return blocks_md(document_blocks(doc), "tracescale report", tool_line(doc))
