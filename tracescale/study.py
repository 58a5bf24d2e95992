"""The one serializable result: a study document that every report and comparison renders from.

``Study`` wraps the JSON document (the contract of the reports issue) plus, when it was just
computed, the typed per-run breakdowns. A saved study re-renders and compares without traces,
and its per-step rows make every reported number reproducible from the JSON alone.

Rendering a document needs neither pandas nor the classifier, so they load only when a frame
or a typed breakdown is asked for (a cached ``analyze`` and ``report`` start fast).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracescale import __version__
from tracescale.errors import InvalidTraceError, NoTracesError

if TYPE_CHECKING:
    import pandas as pd

    from tracescale.classify.result import RunBreakdown

SCHEMA_VERSION = 1
#: Typed per-study parts (run breakdowns, scaling results) computed on demand.
TypedParts = tuple[tuple[tuple["RunBreakdown", ...], ...], tuple[Any, ...]]


def rows_frame(run_doc: dict[str, Any]) -> pd.DataFrame:
    """The per-step rows of a run entry as a DataFrame (seconds)."""
    import pandas as pd

    from tracescale.classify.result import STEP_COLUMNS

    default = [c for c in STEP_COLUMNS if c != "start"]
    rows = run_doc.get("step_rows") or {}
    df = pd.DataFrame(rows.get("data", []), columns=rows.get("columns", default))
    for col in ("rank", "step"):
        if col in df:
            df[col] = df[col].astype("int64")
    return df


@dataclass(frozen=True, init=False)
class Study:
    """An analyze document (possibly several studies) with typed access for notebooks.

    ``runs_by_study`` and ``scaling_by_study`` are the typed results behind the document when
    it was computed in this process. A document served by the study-level cache carries a
    ``recompute`` instead, which redoes the analysis (from the per-rank cache) the first time
    a typed part is asked for, so a cached ``analyze`` gives the same object as a cold one.
    """

    doc: dict[str, Any]
    _typed: list[TypedParts | None] = field(compare=False, repr=False)
    _recompute: Callable[[], TypedParts] | None = field(compare=False, repr=False)

    def __init__(
        self,
        doc: dict[str, Any],
        runs_by_study: tuple[tuple[RunBreakdown, ...], ...] = (),
        scaling_by_study: tuple[Any, ...] = (),
        *,
        recompute: Callable[[], TypedParts] | None = None,
    ) -> None:
        object.__setattr__(self, "doc", doc)
        typed = None if recompute is not None else (tuple(runs_by_study), tuple(scaling_by_study))
        object.__setattr__(self, "_typed", [typed])
        object.__setattr__(self, "_recompute", recompute)

    def _parts(self) -> TypedParts:
        parts = self._typed[0]
        if parts is None:
            assert self._recompute is not None
            parts = self._typed[0] = self._recompute()
        return parts

    @property
    def runs_by_study(self) -> tuple[tuple[RunBreakdown, ...], ...]:
        return self._parts()[0]

    @property
    def scaling_by_study(self) -> tuple[Any, ...]:
        return self._parts()[1]

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
        from tracescale import frames

        return frames.breakdown(self.doc)

    # The report's other tables as tidy frames (columns in tracescale.frames.COLUMNS).

    def points(self) -> pd.DataFrame:
        """Measured scaling: study, world_size, step_time_s, speedup, efficiency, karp_flatt,
        gustafson_speedup."""
        from tracescale import frames

        return frames.points(self.doc)

    def projections(self) -> pd.DataFrame:
        """Projections and what-if scenarios: study, scenario ('' for the fitted model),
        world_size, step_time_s, ci90_low_s, ci90_high_s, speedup, efficiency."""
        from tracescale import frames

        return frames.projections(self.doc)

    def collectives(self) -> pd.DataFrame:
        """Exposed communication per step by collective: study, world_size, collective, seconds."""
        from tracescale import frames

        return frames.collectives(self.doc)

    def top_ops(self) -> pd.DataFrame:
        """Heaviest ops per category: study, world_size, category, position, name, seconds,
        share, law."""
        from tracescale import frames

        return frames.top_ops(self.doc)

    def serial_fraction(self) -> pd.DataFrame:
        """Serial fraction by category plus a 'total' row: study, category, share, ci90_low,
        ci90_high, caps_speedup_at."""
        from tracescale import frames

        return frames.serial_fraction(self.doc)

    def models(self) -> pd.DataFrame:
        """Per-category scaling models: study, category, form, parameter, value, rmse_s."""
        from tracescale import frames

        return frames.models(self.doc)

    def overheads(self) -> pd.DataFrame:
        """Overheads growing with N: study, world_size, category, source, seconds, text."""
        from tracescale import frames

        return frames.overheads(self.doc)

    def ranks(self) -> pd.DataFrame:
        """Per rank mean per step: study, world_size, rank, step_time_s, category, seconds."""
        from tracescale import frames

        return frames.ranks(self.doc)

    def step_stats(self) -> pd.DataFrame:
        """Step-time statistics per run (see tracescale.frames.step_stats)."""
        from tracescale import frames

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


def load(path: str | Path, doc: Any = None) -> Study:
    """A saved study (``analyze --format json -o study.json``), checked against the schema;
    ``doc`` is the file's JSON where the caller has already parsed it (read once, not twice:
    a million-step study is 105 MB).

    A damaged or hand-edited document is refused here (exit 3, naming the first offending
    field) so the renderers only ever see the shape they were written for.
    """
    if doc is None:
        doc = _read(path)
    return _checked(doc, path)


def _read(path: str | Path) -> Any:
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
    return doc


def _checked(doc: Any, path: str | Path) -> Study:
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
    from tracescale.report.schemas import ShapeError, check

    try:
        check(doc)  # the same verdict as jsonschema's, 20x faster on a million-step study
        return Study(doc=doc)
    except ShapeError:
        pass
    import jsonschema

    from tracescale.report.schemas import validate

    try:
        validate(doc)  # only to name the first offending field
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "top level"
        raise InvalidTraceError(
            f"damaged study document at {where}: {exc.message[:200]}", path=str(path)
        ) from exc
    return Study(doc=doc)


def is_study_document(doc: Any) -> bool:
    """True for an analyze document (as opposed to a trace or a compare document)."""
    return isinstance(doc, dict) and "studies" in doc and "schema_version" in doc
