"""The documented columns of every frame and the helpers that read a document defensively.

Documents may be hand-edited or from another version, so every read tolerates a missing or
mistyped value (NaN, never an exception); :func:`make_frame` fixes column order and dtypes so
a saved study gives the same frames as a fresh one.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pandas as pd

COLUMNS: dict[str, list[str]] = {
    "breakdown": ["study", "world_size", "rank", "step", "category", "seconds"],
    "points": [
        "study",
        "world_size",
        "step_time_s",
        "speedup",
        "efficiency",
        "karp_flatt",
        "gustafson_speedup",
    ],
    "projections": [
        "study",
        "scenario",
        "world_size",
        "step_time_s",
        "ci90_low_s",
        "ci90_high_s",
        "speedup",
        "efficiency",
    ],
    "collectives": ["study", "world_size", "collective", "seconds"],
    "serial_fraction": ["study", "category", "share", "ci90_low", "ci90_high", "caps_speedup_at"],
    "models": ["study", "category", "form", "parameter", "value", "rmse_s"],
    "overheads": ["study", "world_size", "category", "source", "seconds", "text"],
    "ranks": ["study", "world_size", "rank", "step_time_s", "category", "seconds"],
    "step_stats": [
        "study",
        "world_size",
        "ranks",
        "steps",
        "mean_s",
        "median_s",
        "p10_s",
        "p90_s",
        "cv",
        "slowest_rank",
        "slowest_rank_mean_s",
        "slowest_per_step_mean_s",
    ],
    "top_ops": [
        "study",
        "world_size",
        "category",
        "position",
        "name",
        "seconds",
        "share",
        "step_sd_s",
        "law",
        "law_exponent",
        "flagged",
    ],
    "compare": [
        "study",
        "world_size",
        "quantity",
        "before_s",
        "after_s",
        "delta_s",
        "change_pct",
        "ci90_low_pct",
        "ci90_high_pct",
        "significant",
        "verdict",
    ],
    "compare_scaling": ["study", "quantity", "world_size", "before", "after"],
}

INT_COLUMNS = ("world_size", "rank", "step", "ranks", "steps", "position", "slowest_rank")
TEXT_COLUMNS = {
    "study",
    "scenario",
    "category",
    "collective",
    "form",
    "parameter",
    "source",
    "text",
    "name",
    "law",
    "quantity",
    "verdict",
}


def as_dict(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def as_list(x: Any) -> list[Any]:
    return x if isinstance(x, list) else []


def as_float(x: Any) -> float:
    """A float, NaN for null/absent/non-numbers (documents may hold any of them)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return math.nan
    return float(x)


def make_frame(kind: str, rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Rows in the documented column order and dtypes (ints where always present)."""
    cols = COLUMNS[kind]
    df = pd.DataFrame(rows, columns=cols)
    for c in cols:
        if c in TEXT_COLUMNS:
            df[c] = df[c].astype("object")
        elif c in INT_COLUMNS and df[c].notna().all():
            df[c] = df[c].astype("int64")
        elif c in ("significant", "flagged"):
            df[c] = df[c].astype("object")
        else:
            df[c] = pd.to_numeric(df[c], errors="coerce").astype("float64")
    return df


def studies_of(doc: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for st in as_list(doc.get("studies")):
        if isinstance(st, dict):
            yield str(st.get("path", "")), st


def runs_of(study: dict[str, Any]) -> list[dict[str, Any]]:
    runs = [r for r in as_list(study.get("runs")) if isinstance(r, dict)]
    return sorted(runs, key=lambda r: as_float(r.get("world_size")))
