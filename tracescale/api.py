"""The public Python API: every number of the CLI, for notebooks. The CLI is a thin layer on it."""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tracescale.errors import UsageError
from tracescale.study import Study, is_study_document
from tracescale.study import load as _load_study

if TYPE_CHECKING:
    import pandas as pd


def analyze(
    path: str | os.PathLike[str],
    *,
    mode: str = "auto",
    project: Sequence[int] | None = None,
    what_if: Mapping[str, float] | None = None,
    rules: str | None = None,
    steps: str | None = None,
    jobs: int | None = None,
    assumptions: Mapping[str, str] | None = None,
    strict: bool = False,
    **options: Any,
) -> Study:
    """Analyze a trace file, run folder, study folder or parent of studies.

    ``options`` go to the map stage (``cache_dir``, ``no_cache``, ``scheduler``, ``progress``).
    A repeat run whose inputs and options are unchanged is served by the study-level cache
    before the analysis modules (pandas, scipy) are even imported.
    """
    from tracescale.preflight import prepare_from

    where = os.fspath(path)
    kwargs: dict[str, Any] = {
        "mode": mode,
        "project": project,
        "what_if": what_if,
        "rules": rules,
        "steps": steps,
        "jobs": jobs,
        "assumptions": assumptions,
        "strict": strict,
        **options,
    }
    prepared = prepare_from(where, kwargs)
    if prepared.doc is not None:
        return Study(prepared.doc, recompute=functools.partial(_typed_parts, where, kwargs))
    from tracescale.pipeline import analyze as _analyze_pipeline  # scaling: scipy

    return _analyze_pipeline(where, prepared=prepared, **kwargs)


def _typed_parts(path: str, kwargs: dict[str, Any]) -> Any:
    from tracescale.pipeline import typed_parts

    return typed_parts(path, **kwargs)


def load(path: str | os.PathLike[str]) -> Study:
    """A study saved with ``Study.save`` or ``analyze --format json -o``."""
    return _load_study(os.fspath(path))


def _study_document(path: str) -> Any:
    """The parsed study document at ``path``, or None where it is not one (a trace, a
    folder): parsed here once and handed to ``load``."""
    if not os.path.isfile(path) or not path.endswith(".json"):
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            head = fh.read(200)
        if '"schema_version"' not in head and '"studies"' not in head:
            return None
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError, RecursionError):
        return None
    return doc if is_study_document(doc) else None


def study_of(side: str | os.PathLike[str] | Study, **analyze_options: Any) -> Study:
    """A compare side: a Study, a saved study JSON, or anything ``analyze`` accepts."""
    if isinstance(side, Study):
        return side
    path = os.fspath(side)
    doc = _study_document(path)
    if doc is not None:
        return _load_study(path, doc)
    return analyze(path, **analyze_options)


@dataclass(frozen=True)
class Comparison:
    """A before/after comparison document with its renderers."""

    doc: dict[str, Any]

    @property
    def verdict(self) -> str:
        return str(self.doc.get("verdict"))

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.doc, indent=indent, allow_nan=False)

    def render(self, fmt: str = "table", *, width: int | None = None, color: bool = False) -> str:
        """The comparison as text in ``fmt``; ``width``/``color`` shape the terminal table."""
        from tracescale.report import render_compare

        return render_compare(self.doc, fmt, width=width, color=color)

    def frame(self) -> pd.DataFrame:
        """Per matched run a ``step_time`` row, then one row per category: study, world_size,
        quantity, before_s, after_s, delta_s, change_pct, ci90_low_pct, ci90_high_pct,
        significant, verdict (the last four only on ``step_time`` rows, NaN elsewhere)."""
        from tracescale import frames

        return frames.compare_frame(self.doc)

    def scaling_frame(self) -> pd.DataFrame:
        """Serial fraction, Amdahl ceiling and projected speedups before and after: study,
        quantity, world_size, before, after."""
        from tracescale import frames

        return frames.compare_scaling(self.doc)

    def _repr_html_(self) -> str:
        """The compare report inline in Jupyter or VS Code (scoped, offline, theme-aware)."""
        from tracescale.report.inline import inline_report

        return inline_report(self.render("html"))

    def exit_code(self, fail_on_regression_pct: float | None) -> int:
        from tracescale.comparison.core import gate_exit_code

        return gate_exit_code(self.doc, fail_on_regression_pct)


def compare(
    before: str | os.PathLike[str] | Study,
    after: str | os.PathLike[str] | Study,
    *,
    fail_on_regression_pct: float | None = None,
    seed: int = 0,
    match: str = "size",
    **analyze_options: Any,
) -> Comparison:
    """Compare two sides run by run: matched by world size, or (``match="any"``) in order."""
    from tracescale.comparison.core import compare_docs

    if fail_on_regression_pct is not None and fail_on_regression_pct < 0:
        raise UsageError("--fail-on-regression takes a percentage >= 0")
    # Only the documents are kept: a side's typed parts (runs, the replay's graph) are freed
    # before the other side is analyzed, so the two analyses' peaks never stack.
    b = study_of(before, **analyze_options).doc
    a = study_of(after, **analyze_options).doc
    doc = compare_docs(b, a, fail_on_regression_pct=fail_on_regression_pct, seed=seed, match=match)
    return Comparison(doc=doc)
