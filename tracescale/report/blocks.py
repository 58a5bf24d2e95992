"""The building blocks every renderer draws: titled sections grouped into blocks.

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
