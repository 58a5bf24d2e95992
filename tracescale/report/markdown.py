"""Markdown renderer: the table report's content for pull requests and wikis."""

from __future__ import annotations

from typing import Any

from tracescale.report.sections import Block, Section, document_blocks, tool_line


def _esc(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def section_md(sec: Section, level: int = 3) -> list[str]:
    """One section as Markdown lines (heading, list and/or pipe table, note)."""
    out = ["#" * level + " " + sec.title, ""]
    if sec.items:
        for i, item in enumerate(sec.items, 1):
            out.append((f"{i}. " if sec.key == "findings" else "- ") + item)
        out.append("")
    if sec.rows:
        headers = sec.headers or [""] * len(sec.rows[0])
        out.append("| " + " | ".join(_esc(h) for h in headers) + " |")
        left = min(sec.left_cols, len(headers))
        out.append("|" + "|".join([":---"] * left + ["---:"] * (len(headers) - left)) + "|")
        out.extend("| " + " | ".join(_esc(c) for c in row) + " |" for row in sec.rows)
        out.append("")
    if sec.note:
        out += [f"_{sec.note}_", ""]
    return out


def blocks_md(blocks: list[Block], title: str, header: str) -> str:
    """Blocks as one Markdown document."""
    out = [f"# {title}", "", f"_{header}_", ""]
    for b in blocks:
        out += [f"## {_esc(b.title)}", ""]
        out += [f"- {line}" for line in b.lines]
        out.append("")
        for s in b.sections:
            out += section_md(s)
    return "\n".join(out).rstrip("\n") + "\n"


def render_markdown(doc: dict[str, Any]) -> str:
    """The analyze document as Markdown."""
    return blocks_md(document_blocks(doc), "tracescale report", tool_line(doc))
