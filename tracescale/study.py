"""The one serializable result: a study document that every report and comparison renders from.

``Study`` wraps the JSON document (the contract of the reports issue) plus, when it was just
computed, the typed per-run breakdowns. A saved study re-renders and compares without traces,
and its per-step rows make every reported number reproducible from the JSON alone.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tracescale import __version__, frames
from tracescale.categories import CATEGORIES
from tracescale.classify.result import STEP_COLUMNS, RunBreakdown
from tracescale.classify.stragglers import find_stragglers
from tracescale.classify.top_ops import run_top_ops
from tracescale.errors import InvalidTraceError, NoTracesError

SCHEMA_VERSION = 1
_ROW_COLUMNS = [c for c in STEP_COLUMNS if c != "start"]


def _f(x: Any) -> float | None:
    v = float(x)
    return v if math.isfinite(v) else None


def run_to_dict(run: RunBreakdown) -> dict[str, Any]:
    """A run's entry of the contract (seconds), including the per-step rows it came from."""
    steps = run.steps
    per_rank_means = steps.groupby("rank")[["duration", *CATEGORIES]].mean()
    breakdown = {c: float(per_rank_means[c].mean()) for c in CATEGORIES}
    step_times = steps.groupby("step", sort=True)["duration"].mean().to_numpy()
    rank_extra = steps.groupby("rank")[["overlapped_communication", "communication_wait"]].mean()
    hta = _hta_shares(run)
    return {
        "world_size": run.world_size,
        "ranks": list(run.ranks),
        "steps": int(steps.groupby("rank").size().max()) if len(steps) else 0,
        "paths": list(run.paths),
        "kind": run.kind,
        "step_time_s": {
            "mean": float(per_rank_means["duration"].mean()),
            "median": float(np.median(step_times)),
            "p10": float(np.percentile(step_times, 10)),
            "p90": float(np.percentile(step_times, 90)),
        },
        "breakdown_s": breakdown,
        "overlapped_communication_s": float(rank_extra["overlapped_communication"].mean()),
        "communication_wait_s": float(rank_extra["communication_wait"].mean()),
        "communication_by_collective_s": dict(sorted(run.communication_by_collective.items())),
        "per_rank": [
            {
                "rank": int(rank),
                "step_time_s": float(row[0]),
                "breakdown_s": {c: float(v) for c, v in zip(CATEGORIES, row[1:], strict=False)},
                "communication_wait_s": float(wait),
                **hta.get(int(rank), {}),
            }
            for rank, row, wait in zip(
                per_rank_means.index.tolist(),
                per_rank_means[["duration", *CATEGORIES]].to_numpy().tolist(),
                rank_extra["communication_wait"].to_numpy().tolist(),
                strict=False,
            )
        ],
        "step_times_s": [float(x) for x in step_times],
        "step_rows": {
            "columns": _ROW_COLUMNS,
            "data": [[_f(v) for v in row] for row in steps[_ROW_COLUMNS].to_numpy().tolist()],
        },
        "top_ops": run_top_ops(run.ops),
        "stragglers": find_stragglers(steps),
        "warnings": list(run.warnings),
    }


def _hta_shares(run: RunBreakdown) -> dict[int, dict[str, Any]]:
    """Per rank: HTA-compatible ``gpu_idle_pct`` and ``comm_comp_overlap_pct`` (GPU runs) and
    the interval measures they come from (``gpu_time_s``; see classify/gpu_metrics.py)."""
    out: dict[int, dict[str, Any]] = {}
    for row in run.gpu_metrics.itertuples(index=False):
        out[int(row.rank)] = {
            "gpu_idle_pct": _pct(row.gpu_idle_pct),
            "comm_comp_overlap_pct": _pct(row.comm_comp_overlap_pct),
            "gpu_time_s": row.totals.seconds(),
        }
    return out


def _pct(x: Any) -> float | None:
    return None if x is None or not math.isfinite(float(x)) else float(x)


def rows_frame(run_doc: dict[str, Any]) -> pd.DataFrame:
    """The per-step rows of a run entry as a DataFrame (seconds)."""
    rows = run_doc.get("step_rows") or {}
    df = pd.DataFrame(rows.get("data", []), columns=rows.get("columns", _ROW_COLUMNS))
    for col in ("rank", "step"):
        if col in df:
            df[col] = df[col].astype("int64")
    return df


@dataclass(frozen=True)
class Study:
    """An analyze document (possibly several studies) with typed access for notebooks."""

    doc: dict[str, Any]
    runs_by_study: tuple[tuple[RunBreakdown, ...], ...] = field(default=(), compare=False)
    scaling_by_study: tuple[Any, ...] = field(default=(), compare=False)

    @property
    def studies(self) -> list[dict[str, Any]]:
        return list(self.doc.get("studies", []))

    @property
    def runs(self) -> list[dict[str, Any]]:
        """Run entries of the first study (the common case of one study)."""
        return list(self.studies[0]["runs"]) if self.studies else []

    @property
    def scaling(self) -> Any:
        """The first study's ScalingResult when computed here, else its ``scaling`` dict."""
        if self.scaling_by_study:
            return self.scaling_by_study[0]
        return self.studies[0].get("scaling") if self.studies else None

    def breakdown(self) -> pd.DataFrame:
        """Tidy frame: study, world_size, rank, step, category, seconds (from the JSON rows)."""
        return frames.breakdown(self.doc)

    # The report's other tables as tidy frames (columns in tracescale.frames.COLUMNS).

    def points(self) -> pd.DataFrame:
        """Measured scaling: study, world_size, step_time_s, speedup, efficiency, karp_flatt,
        gustafson_speedup."""
        return frames.points(self.doc)

    def projections(self) -> pd.DataFrame:
        """Projections and what-if scenarios: study, scenario ('' for the fitted model),
        world_size, step_time_s, ci90_low_s, ci90_high_s, speedup, efficiency."""
        return frames.projections(self.doc)

    def collectives(self) -> pd.DataFrame:
        """Exposed communication per step by collective: study, world_size, collective, seconds."""
        return frames.collectives(self.doc)

    def top_ops(self) -> pd.DataFrame:
        """Heaviest ops per category: study, world_size, category, position, name, seconds,
        share, law."""
        return frames.top_ops(self.doc)

    def serial_fraction(self) -> pd.DataFrame:
        """Serial fraction by category plus a 'total' row: study, category, share, ci90_low,
        ci90_high, caps_speedup_at."""
        return frames.serial_fraction(self.doc)

    def models(self) -> pd.DataFrame:
        """Per-category scaling models: study, category, form, parameter, value, rmse_s."""
        return frames.models(self.doc)

    def overheads(self) -> pd.DataFrame:
        """Overheads growing with N: study, world_size, category, source, seconds, text."""
        return frames.overheads(self.doc)

    def ranks(self) -> pd.DataFrame:
        """Per rank mean per step: study, world_size, rank, step_time_s, category, seconds."""
        return frames.ranks(self.doc)

    def step_stats(self) -> pd.DataFrame:
        """Step-time statistics per run (see tracescale.frames.step_stats)."""
        return frames.step_stats(self.doc)

    def _repr_html_(self) -> str:
        """The HTML report inline in Jupyter or VS Code (scoped, offline, theme-aware)."""
        from tracescale.report.inline import inline_report

        return inline_report(self.render("html"))

    def to_dict(self) -> dict[str, Any]:
        return self.doc

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.doc, indent=indent, allow_nan=False)

    def save(self, path: str | Path) -> None:
        from tracescale.atomic import atomic_write_text

        atomic_write_text(str(path), self.to_json() + "\n")

    def render(self, fmt: str = "table", *, width: int | None = None, color: bool = False) -> str:
        """The study as text in ``fmt``; ``width``/``color`` shape the terminal table only."""
        from tracescale.report import render

        return render(self.doc, fmt, width=width, color=color)


def make_document(studies: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The top-level analyze document."""
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "tracescale", "version": __version__},
        "studies": list(studies),
    }


def load(path: str | Path) -> Study:
    """A saved study (``analyze --format json -o study.json``), checked against the schema.

    A damaged or hand-edited document is refused here (exit 3, naming the first offending
    field) so the renderers only ever see the shape they were written for.
    """
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except FileNotFoundError as exc:
        raise NoTracesError("no such file", path=str(path)) from exc
    except RecursionError as exc:
        raise InvalidTraceError(
            "not a readable study JSON (nested too deeply)", path=str(path)
        ) from exc
    except (OSError, ValueError) as exc:
        raise InvalidTraceError(f"not a readable study JSON ({exc})", path=str(path)) from exc
    if not is_study_document(doc):
        raise InvalidTraceError("not a tracescale study document", path=str(path))
    if "before" in doc and "after" in doc:
        raise InvalidTraceError(
            "a compare document, not a study: `tracescale report` re-renders it; "
            "compare and load take study documents (analyze --format json -o)",
            path=str(path),
        )
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise InvalidTraceError(
            f"study schema_version {doc.get('schema_version')} is not supported "
            f"(this tracescale reads {SCHEMA_VERSION})",
            path=str(path),
        )
    import jsonschema

    from tracescale.report.schemas import validate

    try:
        validate(doc)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "top level"
        raise InvalidTraceError(
            f"damaged study document at {where}: {exc.message[:200]}", path=str(path)
        ) from exc
    return Study(doc=doc)


def is_study_document(doc: Any) -> bool:
    """True for an analyze document (as opposed to a trace or a compare document)."""
    return isinstance(doc, dict) and "studies" in doc and "schema_version" in doc
