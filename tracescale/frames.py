"""The report's tables as tidy pandas frames: a study or compare document (dict) in, frames out.

Every frame is built from the JSON document alone, so a saved study gives the same frames as a
fresh one. One row per observation, one column per variable; times are float seconds (column
``seconds`` or a name ending in ``_s``), shares are fractions, absent numbers are NaN. The
columns of each frame are listed in its function's docstring and in :data:`COLUMNS`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pandas as pd

from tracescale.categories import CATEGORIES

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

_INT_COLUMNS = ("world_size", "rank", "step", "ranks", "steps", "position", "slowest_rank")
_TEXT_COLUMNS = {
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


def _d(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def _l(x: Any) -> list[Any]:
    return x if isinstance(x, list) else []


def _f(x: Any) -> float:
    """A float, NaN for null/absent/non-numbers (documents may hold any of them)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return math.nan
    return float(x)


def _frame(kind: str, rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Rows in the documented column order and dtypes (ints where always present)."""
    cols = COLUMNS[kind]
    df = pd.DataFrame(rows, columns=cols)
    for c in cols:
        if c in _TEXT_COLUMNS:
            df[c] = df[c].astype("object")
        elif c in _INT_COLUMNS and df[c].notna().all():
            df[c] = df[c].astype("int64")
        elif c in ("significant", "flagged"):
            df[c] = df[c].astype("object")
        else:
            df[c] = pd.to_numeric(df[c], errors="coerce").astype("float64")
    return df


def _studies(doc: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for st in _l(doc.get("studies")):
        if isinstance(st, dict):
            yield str(st.get("path", "")), st


def _runs(study: dict[str, Any]) -> list[dict[str, Any]]:
    runs = [r for r in _l(study.get("runs")) if isinstance(r, dict)]
    return sorted(runs, key=lambda r: _f(r.get("world_size")))


def breakdown(doc: dict[str, Any]) -> pd.DataFrame:
    """study, world_size, rank, step, category, seconds: every (rank, step) row of every run."""
    parts = []
    for path, st in _studies(doc):
        for run in _runs(st):
            rows = _d(run.get("step_rows"))
            df = pd.DataFrame(rows.get("data", []), columns=rows.get("columns"))
            if df.empty:
                continue
            cats = [c for c in CATEGORIES if c in df.columns]
            long = df.melt(
                id_vars=["rank", "step"], value_vars=cats, var_name="category", value_name="seconds"
            )
            long.insert(0, "world_size", int(run["world_size"]))
            long.insert(0, "study", path)
            parts.append(long)
    if not parts:
        return _frame("breakdown", [])
    out = pd.concat(parts, ignore_index=True)[COLUMNS["breakdown"]]
    return out.astype(
        {"world_size": "int64", "rank": "int64", "step": "int64", "seconds": "float64"}
    )


def points(doc: dict[str, Any]) -> pd.DataFrame:
    """study, world_size, step_time_s, speedup, efficiency, karp_flatt, gustafson_speedup:
    the measured scaling table (Karp–Flatt NaN at the baseline; Gustafson only in weak mode)."""
    rows = []
    for path, st in _studies(doc):
        steps = {r.get("world_size"): _d(r.get("step_time_s")).get("mean") for r in _runs(st)}
        for p in _l(_d(st.get("scaling")).get("points")):
            p = _d(p)
            rows.append(
                {
                    "study": path,
                    "world_size": p.get("world_size"),
                    "step_time_s": _f(steps.get(p.get("world_size"))),
                    "speedup": _f(p.get("speedup")),
                    "efficiency": _f(p.get("efficiency")),
                    "karp_flatt": _f(p.get("karp_flatt")),
                    "gustafson_speedup": _f(p.get("gustafson_speedup")),
                }
            )
    return _frame("points", rows)


def _projection_row(path: str, scenario: str, p: dict[str, Any]) -> dict[str, Any]:
    ci = _l(p.get("ci90"))
    return {
        "study": path,
        "scenario": scenario,
        "world_size": p.get("world_size"),
        "step_time_s": _f(p.get("step_time_s")),
        "ci90_low_s": _f(ci[0]) if len(ci) == 2 else math.nan,
        "ci90_high_s": _f(ci[1]) if len(ci) == 2 else math.nan,
        "speedup": _f(p.get("speedup")),
        "efficiency": _f(p.get("efficiency")),
    }


def projections(doc: dict[str, Any]) -> pd.DataFrame:
    """study, scenario, world_size, step_time_s, ci90_low_s, ci90_high_s, speedup, efficiency:
    the projections table (scenario ``""``) and every what-if scenario's (its name)."""
    rows = []
    for path, st in _studies(doc):
        sc = _d(st.get("scaling"))
        rows += [_projection_row(path, "", _d(p)) for p in _l(sc.get("projections"))]
        for e in _l(sc.get("what_if")):
            e = _d(e)
            name = str(e.get("label") or e.get("scenario") or "?")
            projs = _l(e.get("projections")) if "projections" in e else [e]
            rows += [_projection_row(path, name, _d(p)) for p in projs]
    return _frame("projections", rows)


def collectives(doc: dict[str, Any]) -> pd.DataFrame:
    """study, world_size, collective, seconds: exposed communication per step by type."""
    rows = [
        {"study": path, "world_size": r.get("world_size"), "collective": k, "seconds": _f(v)}
        for path, st in _studies(doc)
        for r in _runs(st)
        for k, v in _d(r.get("communication_by_collective_s")).items()
    ]
    return _frame("collectives", rows)


def serial_fraction(doc: dict[str, Any]) -> pd.DataFrame:
    """study, category, share, ci90_low, ci90_high, caps_speedup_at: each category's share of
    T(1) that does not shrink, then a ``total`` row with its 90% interval (NaN elsewhere)."""
    rows = []
    for path, st in _studies(doc):
        sc = _d(st.get("scaling"))
        sf = _d(sc.get("serial_fraction"))
        for c, v in _d(sf.get("by_category")).items():
            share = _f(v)
            cap = 1.0 / share if share > 0 else math.nan
            row = {"study": path, "category": c, "share": share, "caps_speedup_at": cap}
            rows.append(row)
        if "total" in sf:
            ci = _l(sf.get("ci90"))
            rows.append(
                {
                    "study": path,
                    "category": "total",
                    "share": _f(sf.get("total")),
                    "ci90_low": _f(ci[0]) if len(ci) == 2 else math.nan,
                    "ci90_high": _f(ci[1]) if len(ci) == 2 else math.nan,
                    "caps_speedup_at": _f(sc.get("amdahl_limit")),
                }
            )
    return _frame("serial_fraction", rows)


def models(doc: dict[str, Any]) -> pd.DataFrame:
    """study, category, form, parameter, value, rmse_s: one row per fitted parameter."""
    rows = []
    for path, st in _studies(doc):
        for c, m in _d(_d(st.get("scaling")).get("models")).items():
            m = _d(m)
            base = {"study": path, "category": c, "form": str(m.get("form", ""))}
            params = _d(m.get("params")) or {"": None}
            for k, v in params.items():
                rows.append({**base, "parameter": k, "value": _f(v), "rmse_s": _f(m.get("rmse_s"))})
    return _frame("models", rows)


def overheads(doc: dict[str, Any]) -> pd.DataFrame:
    """study, world_size, category, source, seconds, text: per-step overhead terms o_c(N)."""
    rows = [
        {
            "study": path,
            "world_size": _d(o).get("world_size"),
            "category": _d(o).get("category"),
            "source": _d(o).get("source"),
            "seconds": _f(_d(o).get("seconds")),
            "text": _d(o).get("text"),
        }
        for path, st in _studies(doc)
        for o in _l(_d(st.get("scaling")).get("overheads"))
    ]
    return _frame("overheads", rows)


def ranks(doc: dict[str, Any]) -> pd.DataFrame:
    """study, world_size, rank, step_time_s, category, seconds: each rank's mean per step
    (the stragglers table and the per-rank charts)."""
    rows = [
        {
            "study": path,
            "world_size": r.get("world_size"),
            "rank": _d(p).get("rank"),
            "step_time_s": _f(_d(p).get("step_time_s")),
            "category": c,
            "seconds": _f(v),
        }
        for path, st in _studies(doc)
        for r in _runs(st)
        for p in _l(r.get("per_rank"))
        for c, v in _d(_d(p).get("breakdown_s")).items()
    ]
    return _frame("ranks", rows)


def step_stats(doc: dict[str, Any]) -> pd.DataFrame:
    """study, world_size, ranks, steps, mean_s, median_s, p10_s, p90_s, cv, slowest_rank,
    slowest_rank_mean_s, slowest_per_step_mean_s: step-time statistics per run."""
    rows = []
    for path, st in _studies(doc):
        for s in _l(_d(st.get("scaling")).get("step_stats")):
            s, slow = _d(s), _d(_d(s).get("slowest_rank"))
            rows.append(
                {
                    "study": path,
                    "world_size": s.get("world_size"),
                    "ranks": s.get("ranks"),
                    "steps": s.get("steps"),
                    **{f"{k}_s": _f(s.get(k)) for k in ("mean", "median", "p10", "p90")},
                    "cv": _f(s.get("cv")),
                    "slowest_rank": slow.get("rank"),
                    "slowest_rank_mean_s": _f(slow.get("mean")),
                    "slowest_per_step_mean_s": _f(s.get("slowest_per_step_mean")),
                }
            )
    return _frame("step_stats", rows)


def _top_op_row(path: str, run: dict[str, Any], cat: str, i: int, op: Any) -> dict[str, Any]:
    op = _d(op)
    law = op.get("law")
    law_d = _d(law)
    return {
        "study": path,
        "world_size": run.get("world_size"),
        "category": cat,
        "position": i,
        "name": op.get("name"),
        "seconds": _f(op.get("seconds")),
        "share": _f(op.get("share")),
        "step_sd_s": _f(op.get("step_sd_s")),
        "law": law_d.get("form") if isinstance(law, dict) else law,
        "law_exponent": _f(law_d.get("exponent")),
        "flagged": bool(law_d.get("flagged")) if "flagged" in law_d else None,
    }


def top_ops(doc: dict[str, Any]) -> pd.DataFrame:
    """study, world_size, category, position, name, seconds, share, step_sd_s, law,
    law_exponent, flagged: the heaviest ops of each category per run (``runs[].top_ops``),
    position 1 the heaviest; seconds per step, share of the category, the law across N
    (``law.form``, its exponent p of t ~ N^p, and whether it is flagged as not scaling)."""
    rows = [
        _top_op_row(path, r, c, i, op)
        for path, st in _studies(doc)
        for r in _runs(st)
        for c, ops in _d(r.get("top_ops")).items()
        for i, op in enumerate(_l(ops), 1)
    ]
    return _frame("top_ops", rows)


def compare_frame(doc: dict[str, Any]) -> pd.DataFrame:
    """study, world_size, quantity, before_s, after_s, delta_s, change_pct, ci90_low_pct,
    ci90_high_pct, significant, verdict: per matched run a ``step_time`` row (with the
    bootstrap interval, significance and verdict) then one row per category (those NaN/None)."""
    rows = []
    for r in _l(doc.get("runs")):
        r = _d(r)
        st = _d(r.get("step_time_s"))
        before, after = _f(st.get("before")), _f(st.get("after"))
        ci = _l(st.get("ci90"))
        base = {"study": r.get("study", 0), "world_size": r.get("world_size")}
        rows.append(
            {
                **base,
                "quantity": "step_time",
                "before_s": before,
                "after_s": after,
                "delta_s": after - before,
                "change_pct": _f(st.get("change_pct")),
                "ci90_low_pct": _f(ci[0]) if len(ci) == 2 else math.nan,
                "ci90_high_pct": _f(ci[1]) if len(ci) == 2 else math.nan,
                "significant": bool(st.get("significant")),
                "verdict": r.get("verdict"),
            }
        )
        bd = _d(r.get("breakdown_s"))
        b_side, a_side = _d(bd.get("before")), _d(bd.get("after"))
        for c, delta in _d(r.get("breakdown_delta_s")).items():
            b, a = _f(b_side.get(c)), _f(a_side.get(c))
            rows.append(
                {
                    **base,
                    "quantity": c,
                    "before_s": b,
                    "after_s": a,
                    "delta_s": _f(delta),
                    "change_pct": (a / b - 1.0) * 100.0 if b > 0 else math.nan,
                }
            )
    return _frame("compare", rows)


def compare_scaling(doc: dict[str, Any]) -> pd.DataFrame:
    """study, quantity, world_size, before, after: serial fraction, Amdahl ceiling (world_size
    NaN) and projected speedup per N, before and after."""
    rows: list[dict[str, Any]] = []
    for i, s in enumerate(_l(doc.get("studies"))):
        s = _d(s)
        for q in ("serial_fraction", "amdahl_limit"):
            pair = _d(s.get(q))
            rows.append(
                {
                    "study": i,
                    "quantity": q,
                    "world_size": math.nan,
                    "before": _f(pair.get("before")),
                    "after": _f(pair.get("after")),
                }
            )
        for p in _l(s.get("projected_speedup")):
            p = _d(p)
            rows.append(
                {
                    "study": i,
                    "quantity": "projected_speedup",
                    "world_size": _f(p.get("world_size")),
                    "before": _f(p.get("before")),
                    "after": _f(p.get("after")),
                }
            )
    return _frame("compare_scaling", rows)
