"""Terminal renderer: the same sections as Markdown, laid out for the terminal's width.

No line is ever wider than the width and no table cell is ever wrapped: a table that does
not fit first wraps its header words, then is split into several tables that repeat the row
label columns; when long labels (op names) leave no room for the numbers, each label goes on
a line of its own above its aligned values; only when that fails too does each row become a
small "header value" record. Prose (findings, warnings, notes) wraps at the width with a
hanging indent. Colour is optional and only ever added on top of the plain text.
"""

from __future__ import annotations

import io
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

from tracescale.report.sections import Block, Section, document_blocks, tool_line
from tracescale.report.terminal import (  # the width and colour rules, re-exported here too
    DEFAULT_WIDTH,  # noqa: F401
    MIN_WIDTH,
    terminal_width,
    wants_color,  # noqa: F401
)
from tracescale.text import clean

_STYLE_TITLE = "bold cyan"
_STYLE_HEAD = "bold"


@dataclass(frozen=True)
class _Cols:
    """Column widths of one laid-out table and the header lines (headers may wrap by word)."""

    widths: list[int]
    header_lines: list[list[str]]


def _wrap_header(text: str, width: int) -> list[str]:
    return textwrap.wrap(text, width, break_long_words=False) or [""]


def _fit_columns(
    headers: Sequence[str], rows: Sequence[Sequence[str]], budget: int, gap: int
) -> _Cols | None:
    """Widths so the table fits ``budget`` cells without wrapping a value, or None."""
    n = len(headers)
    value_w = [max((cell_len(r[i]) for r in rows if i < len(r)), default=0) for i in range(n)]
    head_w = [cell_len(h) for h in headers]
    word_w = [max((cell_len(w) for w in h.split()), default=0) for h in headers]
    widths = [max(v, h) for v, h in zip(value_w, head_w, strict=True)]
    total = sum(widths) + gap * (n - 1)
    # Narrow the columns whose header is wider than their values, widest first, by wrapping
    # the header at word boundaries (never narrower than its longest word or its values).
    order = sorted(range(n), key=lambda i: widths[i] - max(value_w[i], word_w[i]), reverse=True)
    for i in order:
        if total <= budget:
            break
        floor = max(value_w[i], word_w[i], 1)
        lines = _wrap_header(headers[i], max(floor, widths[i] - (total - budget)))
        new = max(floor, *(cell_len(x) for x in lines))
        total -= widths[i] - new
        widths[i] = new
    if total > budget:
        return None
    wrapped = [_wrap_header(h, w) for h, w in zip(headers, widths, strict=True)]
    return _Cols(widths, wrapped)


def _pad(text: str, width: int, left: bool) -> str:
    space = " " * max(width - cell_len(text), 0)
    return text + space if left else space + text


def _table_lines(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    cols: _Cols,
    left_cols: int | Sequence[bool],
    gap: int,
) -> list[Text]:
    """Header lines, a rule and one line per row; ``left_cols``: how many leading columns (or
    which columns) are text, left-aligned; the rest are numbers, right-aligned."""
    left = (
        [i < left_cols for i in range(len(headers))]
        if isinstance(left_cols, int)
        else list(left_cols)
    )
    sep = " " * gap
    out: list[Text] = []
    if any(headers):
        depth = max(len(h) for h in cols.header_lines)
        for k in range(depth):
            cells = []
            for i, (lines, w) in enumerate(zip(cols.header_lines, cols.widths, strict=True)):
                # Headers sit on the line next to the rule, like the values they name.
                at = k - (depth - len(lines))
                cells.append(_pad(lines[at] if at >= 0 else "", w, left[i]))
            out.append(Text(" " + sep.join(cells).rstrip(), style=_STYLE_HEAD))
        out.append(Text(" " + "─" * (sum(cols.widths) + gap * (len(cols.widths) - 1))))
    for row in rows:
        cells = [
            _pad(row[i] if i < len(row) else "", w, left[i]) for i, w in enumerate(cols.widths)
        ]
        out.append(Text(" " + sep.join(cells).rstrip()))
    return out


def _split_columns(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    keep: int,
    budget: int,
    gap: int,
    left_cols: int,
) -> list[list[Text]] | None:
    """Several tables repeating the first ``keep`` (label) columns, each with as many value
    columns as fit beside them."""
    if keep < 1 or len(headers) - keep < 2:
        return None
    rest = list(range(keep, len(headers)))
    chunks: list[list[int]] = []
    current: list[int] = []
    for i in rest:
        trial = [*range(keep), *current, i]
        if _fit(headers, rows, trial, budget, gap) is not None:
            current.append(i)
            continue
        if not current:
            return None
        chunks.append(current)
        current = [i]
        if _fit(headers, rows, [*range(keep), i], budget, gap) is None:
            return None
    chunks.append(current)
    tables = []
    for chunk in chunks:
        idx = [*range(keep), *chunk]
        sub_h, sub_r = _take(headers, rows, idx)
        cols = _fit_columns(sub_h, sub_r, budget, gap)
        if cols is None:
            return None
        tables.append(_table_lines(sub_h, sub_r, cols, [i < left_cols for i in idx], gap))
    return tables


def _take(
    headers: Sequence[str], rows: Sequence[Sequence[str]], idx: Sequence[int]
) -> tuple[list[str], list[list[str]]]:
    sub_h = [headers[i] for i in idx]
    sub_r = [[r[i] if i < len(r) else "" for i in idx] for r in rows]
    return sub_h, sub_r


def _fit(
    headers: Sequence[str], rows: Sequence[Sequence[str]], idx: list[int], budget: int, gap: int
) -> _Cols | None:
    sub_h, sub_r = _take(headers, rows, idx)
    return _fit_columns(sub_h, sub_r, budget, gap)


def _label_lines(
    headers: Sequence[str], rows: Sequence[Sequence[str]], keep: int, width: int, gap: int
) -> list[Text] | None:
    """Each row's label columns on lines of their own, its values aligned on the next one.

    For tables whose labels (op names) are too long to sit beside the numbers: the numbers
    still line up under their headers, and the labels read as nested headings. A label column
    before the last groups rows (a category over its ops; an empty cell means "as above"), so
    its heading is printed only when it changes.
    """
    indent = 2 * keep
    vh, vr = _take(headers, rows, range(keep, len(headers)))
    cols = _fit_columns(vh, vr, width - 1 - indent, gap)
    if cols is None:
        return None
    pad = " " * indent
    value_lines = _table_lines(vh, vr, cols, 0, gap)
    head_count = len(value_lines) - len(rows)
    label_head = " / ".join(h for h in headers[:keep] if h)
    out = [Text(x, style=_STYLE_HEAD) for x in wrap_prose(label_head, width, " ", "   ")]
    out.extend(Text(pad + t.plain, style=t.style) for t in value_lines[:head_count])
    prev: list[str] = [""] * keep
    for row, values in zip(rows, value_lines[head_count:], strict=True):
        cells = [row[c] if c < len(row) else "" for c in range(keep)]
        current = [cells[c] or prev[c] for c in range(keep)]
        changed = next((c for c in range(keep - 1) if current[c] != prev[c]), keep - 1)
        for c in range(changed, keep):
            if current[c]:
                first = " " + "  " * c
                style = _STYLE_HEAD if c < keep - 1 else ""
                lines = wrap_prose(current[c], width, first, first + "  ")
                out.extend(Text(x, style=style) for x in lines)
        out.append(Text(pad + values.plain))
        prev = current
    return out


def _records(headers: Sequence[str], rows: Sequence[Sequence[str]], width: int) -> list[Text]:
    """Each row as its label line and 'header  value' lines; long values wrap as prose."""
    names = [h or "value" for h in headers[1:]]
    name_w = min(max((cell_len(n) for n in names), default=0), max(width // 3, 8))
    out: list[Text] = []
    for row in rows:
        out.append(Text(" " + (row[0] if row else ""), style=_STYLE_HEAD))
        for name, value in zip(names, row[1:], strict=False):
            lead = "   " + _pad(name, name_w, True) + "  "
            if cell_len(lead) + 8 > width:
                lead = "   "
            for line in wrap_prose(value, width, lead, " " * cell_len(lead)):
                out.append(Text(line))
    return out


def wrap_prose(text: str, width: int, first: str, rest: str) -> list[str]:
    """Prose at ``width`` with a first-line prefix and a hanging indent (long words broken);
    ``text`` is :func:`~tracescale.text.clean`-ed first (names in it are trace data)."""
    return textwrap.wrap(
        clean(text),
        width,
        initial_indent=first,
        subsequent_indent=rest,
        break_on_hyphens=False,
        break_long_words=True,
    ) or [first.rstrip()]


def table_lines(sec: Section, width: int) -> list[Text]:
    """One section's table, laid out for ``width`` (whole, split, or as records)."""
    headers = list(sec.headers) or [""] * max((len(r) for r in sec.rows), default=0)
    rows = [list(r) for r in sec.rows]
    gap = 3 if width >= 120 else 2
    budget = width - 1  # one leading space
    cols = _fit_columns(headers, rows, budget, gap)
    if cols is not None:
        return _table_lines(headers, rows, cols, sec.left_cols, gap)
    labels = min(max(sec.left_cols, 1), len(headers))
    split = _split_columns(headers, rows, labels, budget, gap, sec.left_cols)
    if split is None and labels > 1 and len(headers) - labels >= 2:
        stacked = _label_lines(headers, rows, labels, width, gap)
        if stacked is not None:
            return stacked
    if split is None:
        split = _split_columns(headers, rows, 1, budget, gap, sec.left_cols)
    if split is not None:
        out: list[Text] = []
        for k, t in enumerate(split):
            if k:
                out.append(Text(""))
            out.extend(t)
        return out
    return _records(headers, rows, width)


def clean_section(sec: Section) -> Section:
    """``sec`` with every string :func:`~tracescale.text.clean`: laid out after cleaning, so
    widths count what is printed."""
    return replace(
        sec,
        title=clean(sec.title),
        headers=[clean(h) for h in sec.headers],
        rows=[[clean(c) for c in row] for row in sec.rows],
        items=[clean(i) for i in sec.items],
        note=clean(sec.note),
    )


def section_lines(sec: Section, width: int) -> list[Text]:
    """Title, wrapped items, the table laid out for ``width``, the note (all text cleaned)."""
    sec = clean_section(sec)
    out = [Text(sec.title, style=_STYLE_TITLE)] if cell_len(sec.title) <= width else []
    if not out:
        out = [Text(x, style=_STYLE_TITLE) for x in wrap_prose(sec.title, width, "", "")]
    numbered = sec.key == "findings"
    item_style = "yellow" if sec.key == "warnings" else ""
    for i, item in enumerate(sec.items, 1):
        bullet = f"  {i}. " if numbered else "  • "
        lines = wrap_prose(item, width, bullet, " " * cell_len(bullet))
        for k, line in enumerate(lines):
            t = Text(line, style=item_style)
            if numbered and k == 0:
                t.stylize("bold", 0, cell_len(bullet))
            t.highlight_regex(r"`[^`]+`", "cyan")
            out.append(t)
    if sec.headers or sec.rows:
        if sec.items:
            out.append(Text(""))
        out.extend(table_lines(sec, width))
    if sec.note:
        out.append(Text(""))
        out.extend(Text(x, style="dim") for x in wrap_prose(sec.note, width, "", ""))
    out.append(Text(""))
    return out


def blocks_lines(blocks: list[Block], header: str, width: int) -> list[Text]:
    """Every block's title, summary lines and sections as terminal lines."""
    width = max(width, MIN_WIDTH)
    out = [Text(x, style="dim") for x in wrap_prose(header, width, "", "")]
    out.append(Text(""))
    for b in blocks:
        out.extend(Text(x, style="bold") for x in wrap_prose(b.title, width, "", "  "))
        for line in b.lines:
            out.extend(Text(x) for x in wrap_prose(line, width, "", "  "))
        out.append(Text(""))
        for s in b.sections:
            out.extend(section_lines(s, width))
    while out and not out[-1].plain:
        out.pop()
    return out


def lines_to_string(lines: list[Text], color: bool = False) -> str:
    """Plain text, or the same text with ANSI colour codes for a terminal.

    A line that still holds a control character (a caller that built its own Text) is
    cleaned here, losing its colour spans: the only escape codes printed are rich's own.
    """
    lines = [t if t.plain.isprintable() else Text(clean(t.plain), style=t.style) for t in lines]
    if not color:
        return "".join(t.plain.rstrip() + "\n" for t in lines)
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, color_system="standard", width=10_000)
    for t in lines:
        console.print(t, soft_wrap=True, crop=False)
    return buf.getvalue()


def blocks_text(
    blocks: list[Block], header: str, width: int | None = None, color: bool = False
) -> str:
    """Blocks as terminal text at ``width`` (default: :func:`terminal_width`)."""
    return lines_to_string(blocks_lines(blocks, header, width or terminal_width()), color)


def render_table(doc: dict[str, Any], width: int | None = None, color: bool = False) -> str:
    """The analyze document as terminal text, ``width`` columns at most."""
    return blocks_text(document_blocks(doc), tool_line(doc), width, color)
