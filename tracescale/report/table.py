"""Terminal renderer (rich): the same sections as Markdown, drawn as boxed tables."""

from __future__ import annotations

import io
from typing import Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from tracescale.report.sections import Block, Section, document_blocks, tool_line


def _section(sec: Section) -> RenderableType:
    parts: list[RenderableType] = [Text(sec.title, style="bold cyan")]
    if sec.items:
        numbered = sec.key == "findings"
        for i, item in enumerate(sec.items, 1):
            bullet = f"{i}. " if numbered else "• "
            style = "yellow" if sec.key == "warnings" else ""
            parts.append(Text(f"  {bullet}{item}", style=style))
    if sec.headers or sec.rows:
        t = Table(box=box.SIMPLE_HEAD, show_header=any(sec.headers), pad_edge=False)
        for i, h in enumerate(sec.headers):
            t.add_column(h, justify="left" if i < sec.left_cols else "right", no_wrap=i == 0)
        for row in sec.rows:
            t.add_row(*row)
        parts.append(t)
    if sec.note:
        parts.append(Text(sec.note, style="dim"))
    parts.append(Text(""))
    return Group(*parts)


def blocks_renderable(blocks: list[Block], header: str) -> RenderableType:
    """All blocks as one rich renderable (for printing straight to a terminal console)."""
    parts: list[RenderableType] = [Text(header, style="dim"), Text("")]
    for b in blocks:
        parts.append(Text(b.title, style="bold"))
        parts.extend(Text(line) for line in b.lines)
        parts.append(Text(""))
        parts.extend(_section(s) for s in b.sections)
    return Group(*parts)


def to_string(renderable: RenderableType, width: int = 120) -> str:
    """Render without colour to plain text (files, pipes, tests)."""
    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=None, force_terminal=False)
    console.print(renderable)
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines()) + "\n"


def table_renderable(doc: dict[str, Any]) -> RenderableType:
    """The analyze document as a rich renderable."""
    return blocks_renderable(document_blocks(doc), tool_line(doc))


def render_table(doc: dict[str, Any], width: int = 120) -> str:
    """The analyze document as plain terminal text."""
    return to_string(table_renderable(doc), width)
