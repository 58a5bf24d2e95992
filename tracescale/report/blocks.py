"""The building blocks every renderer draws: titled sections grouped into blocks, and the
generic section any unknown (newer) key of the document falls back to.

Kept apart from the sections themselves so modules that build sections (study, compare,
contributors) share them without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tracescale.categories import CATEGORIES
from tracescale.report import fmt


@dataclass
class Section:
    """One titled block: a table (headers + rows), a bullet list (items), or both empty."""

    key: str
    title: str
    headers: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    items: list[str] = field(default_factory=list)
    note: str = ""
    left_cols: int = 1  # leading text columns; the rest are numbers, right-aligned


@dataclass
class Block:
    """One study (or one compare pair): a heading, a few summary lines and its sections."""

    title: str
    lines: list[str]
    sections: list[Section]


def _d(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def _l(x: Any) -> list[Any]:
    return x if isinstance(x, list) else []


def categories_of(study: dict[str, Any]) -> list[str]:
    """The study's category order (the contract's eight when absent)."""
    cats = _l(study.get("categories"))
    return [str(c) for c in cats] if cats else list(CATEGORIES)


def runs_of(study: dict[str, Any]) -> list[dict[str, Any]]:
    """Runs sorted by world size."""
    runs = [r for r in _l(study.get("runs")) if isinstance(r, dict)]
    return sorted(runs, key=lambda r: fmt.num(r.get("world_size")) or 0.0)


def generic_section(key: str, title: str, value: Any) -> Section | None:
    """Keys added after this version: a list of dicts becomes a table, a dict key/value rows."""
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        headers: list[str] = []
        for v in value:
            headers += [k for k in v if k not in headers]
        rows = [[fmt.cell(v.get(h)) for h in headers] for v in value]
        return Section(key, title, headers, rows)
    if isinstance(value, dict) and value:
        return Section(key, title, ["", ""], [[str(k), fmt.cell(v)] for k, v in value.items()])
    if isinstance(value, list) and value:
        return Section(key, title, items=[fmt.cell(v) for v in value])
    return None
