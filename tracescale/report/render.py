"""One entry point per document kind: ``render(doc, fmt)`` and ``render_compare(doc, fmt)``.

The CLI picks the format from ``--format`` or from ``-o``'s extension via :func:`guess_format`.
This module is the top of the report package: it dispatches to the renderers (and joins the
compare sections to each format's writer), and no renderer imports it back, so the package's
import graph has no cycle. The renderers load on first use, keeping ``--format json`` light.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracescale.errors import UsageError
from tracescale.report.jsonsafe import dumps
from tracescale.text import json_escape

FORMATS: tuple[str, ...] = ("table", "json", "markdown", "html")

_EXTENSIONS: dict[str, str] = {
    ".json": "json",
    ".md": "markdown",
    ".markdown": "markdown",
    ".html": "html",
    ".htm": "html",
    ".txt": "table",
}


def guess_format(path: str | Path | None) -> str | None:
    """The format an output file's extension asks for, or None when it says nothing."""
    if path is None:
        return None
    return _EXTENSIONS.get(Path(str(path)).suffix.lower())


def known_extensions() -> list[str]:
    """The -o extensions that pick a format, for error messages."""
    return list(_EXTENSIONS)


def render_json(doc: dict[str, Any]) -> str:
    """The document itself, indented, strictly valid JSON (names exact, controls escaped)."""
    text = dumps(doc, indent=2)
    return json_escape(text) + "\n"


def _check(fmt: str) -> None:
    if fmt not in FORMATS:
        raise UsageError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")


def render(doc: dict[str, Any], fmt: str, *, width: int | None = None, color: bool = False) -> str:
    """An analyze (study) document in one of :data:`FORMATS`.

    ``width`` and ``color`` shape the terminal table only (default: the terminal's width,
    or 120 columns off a terminal; no colour); the other formats do not depend on them.
    """
    _check(fmt)
    if fmt == "json":
        return render_json(doc)
    if fmt == "markdown":
        from tracescale.report.markdown import render_markdown

        return render_markdown(doc)
    if fmt == "html":
        from tracescale.report.html import render_html

        return render_html(doc)
    from tracescale.report.table import render_table

    return render_table(doc, width, color)


def render_compare(
    doc: dict[str, Any], fmt: str, *, width: int | None = None, color: bool = False
) -> str:
    """A compare document in one of :data:`FORMATS` (``width``/``color`` as in :func:`render`)."""
    _check(fmt)
    if fmt == "json":
        return render_json(doc)
    from tracescale.report.compare_sections import compare_blocks, compare_header

    blocks = compare_blocks(doc)
    if fmt == "markdown":
        from tracescale.report.markdown import blocks_md

        return blocks_md(blocks, "tracescale compare", compare_header(doc))
    if fmt == "html":
        from tracescale.report.html import page

        data = {"runs": doc.get("runs"), "studies": doc.get("studies")}
        return page("tracescale compare", blocks, data, kind="compare", meta=compare_header(doc))
    from tracescale.report.table import blocks_text

    return blocks_text(blocks, compare_header(doc), width, color)
