"""The report's tables as tidy pandas frames: a study or compare document (dict) in, frames out.

Every frame is built from the JSON document alone, so a saved study gives the same frames as a
fresh one. One row per observation, one column per variable; times are float seconds (column
``seconds`` or a name ending in ``_s``), shares are fractions, absent numbers are NaN. The
columns of each frame are listed in its function's docstring and in :data:`COLUMNS`.
"""

from __future__ import annotations

from tracescale.frames.columns import COLUMNS
from tracescale.frames.compare_tables import compare_frame, compare_scaling
from tracescale.frames.study_tables import (
    breakdown,
    collectives,
    models,
    overheads,
    points,
    projections,
    ranks,
    serial_fraction,
    step_stats,
    top_ops,
)

__all__ = [
    "COLUMNS",
    "breakdown",
    "collectives",
    "compare_frame",
    "compare_scaling",
    "models",
    "overheads",
    "points",
    "projections",
    "ranks",
    "serial_fraction",
    "step_stats",
    "top_ops",
]
