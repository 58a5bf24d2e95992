"""Frames of one analyze document: per-run tables (breakdown, ranks, steps, top ops,
collectives) and the scaling tables (points, projections, serial fraction, models, overheads)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from tracescale.categories import CATEGORIES
from tracescale.frames.columns import (
    COLUMNS,
    as_dict,
    as_float,
    as_list,
    make_frame,
    runs_of,
    studies_of,
)


def breakdown(doc: dict[str, Any]) -> pd.DataFrame:
    """study, world_size, rank, step, category, seconds: every (rank, step) row of every run."""
    parts = []
    for path, st in studies_of(doc):
        for run in runs_of(st):
            rows = as_dict(run.get("step_rows"))
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
        return make_frame("breakdown", [])
    out = pd.concat(parts, ignore_index=True)[COLUMNS["breakdown"]]
    return out.astype(
        {"world_size": "int64", "rank": "int64", "step": "int64", "seconds": "float64"}
    )


def points(doc: dict[str, Any]) -> pd.DataFrame:
    """study, world_size, step_time_s, speedup, efficiency, karp_flatt, gustafson_speedup:
    the measured scaling table (Karp–Flatt NaN at the baseline; Gustafson only in weak mode)."""
    rows = []
    for path, st in studies_of(doc):
        steps = {
            r.get("world_size"): as_dict(r.get("step_time_s")).get("mean") for r in runs_of(st)
        }
        for p in as_list(as_dict(st.get("scaling")).get("points")):
            p = as_dict(p)
            rows.append(
                {
                    "study": path,
                    "world_size": p.get("world_size"),
                    "step_time_s": as_float(steps.get(p.get("world_size"))),
                    "speedup": as_float(p.get("speedup")),
                    "efficiency": as_float(p.get("efficiency")),
                    "karp_flatt": as_float(p.get("karp_flatt")),
                    "gustafson_speedup": as_float(p.get("gustafson_speedup")),
                }
            )
    return make_frame("points", rows)


def _projection_row(path: str, scenario: str, p: dict[str, Any]) -> dict[str, Any]:
    ci = as_list(p.get("ci90"))
    return {
        "study": path,
        "scenario": scenario,
        "world_size": p.get("world_size"),
        "step_time_s": as_float(p.get("step_time_s")),
        "ci90_low_s": as_float(ci[0]) if len(ci) == 2 else math.nan,
        "ci90_high_s": as_float(ci[1]) if len(ci) == 2 else math.nan,
        "speedup": as_float(p.get("speedup")),
        "efficiency": as_float(p.get("efficiency")),
    }


def projections(doc: dict[str, Any]) -> pd.DataFrame:
    """study, scenario, world_size, step_time_s, ci90_low_s, ci90_high_s, speedup, efficiency:
    the projections table (scenario ``""``) and every what-if scenario's (its name)."""
    rows = []
    for path, st in studies_of(doc):
        sc = as_dict(st.get("scaling"))
        rows += [_projection_row(path, "", as_dict(p)) for p in as_list(sc.get("projections"))]
        for e in as_list(sc.get("what_if")):
            e = as_dict(e)
            name = str(e.get("label") or e.get("scenario") or "?")
            projs = as_list(e.get("projections")) if "projections" in e else [e]
            rows += [_projection_row(path, name, as_dict(p)) for p in projs]
    return make_frame("projections", rows)


def collectives(doc: dict[str, Any]) -> pd.DataFrame:
    """study, world_size, collective, seconds: exposed communication per step by type."""
    rows = [
        {"study": path, "world_size": r.get("world_size"), "collective": k, "seconds": as_float(v)}
        for path, st in studies_of(doc)
        for r in runs_of(st)
        for k, v in as_dict(r.get("communication_by_collective_s")).items()
    ]
    return make_frame("collectives", rows)


def serial_fraction(doc: dict[str, Any]) -> pd.DataFrame:
    """study, category, share, ci90_low, ci90_high, caps_speedup_at: each category's share of
    T(1) that does not shrink, then a ``total`` row with its 90% interval (NaN elsewhere)."""
    rows = []
    for path, st in studies_of(doc):
        sc = as_dict(st.get("scaling"))
        sf = as_dict(sc.get("serial_fraction"))
        for c, v in as_dict(sf.get("by_category")).items():
            share = as_float(v)
            cap = 1.0 / share if share > 0 else math.nan
            row = {"study": path, "category": c, "share": share, "caps_speedup_at": cap}
            rows.append(row)
        if "total" in sf:
            ci = as_list(sf.get("ci90"))
            rows.append(
                {
                    "study": path,
                    "category": "total",
                    "share": as_float(sf.get("total")),
                    "ci90_low": as_float(ci[0]) if len(ci) == 2 else math.nan,
                    "ci90_high": as_float(ci[1]) if len(ci) == 2 else math.nan,
                    "caps_speedup_at": as_float(sc.get("amdahl_limit")),
                }
            )
    return make_frame("serial_fraction", rows)


def models(doc: dict[str, Any]) -> pd.DataFrame:
    """study, category, form, parameter, value, rmse_s: one row per fitted parameter."""
    rows = []
    for path, st in studies_of(doc):
        for c, m in as_dict(as_dict(st.get("scaling")).get("models")).items():
            m = as_dict(m)
            base = {"study": path, "category": c, "form": str(m.get("form", ""))}
            params = as_dict(m.get("params")) or {"": None}
            for k, v in params.items():
                rows.append(
                    {
                        **base,
                        "parameter": k,
                        "value": as_float(v),
                        "rmse_s": as_float(m.get("rmse_s")),
                    }
                )
    return make_frame("models", rows)


def overheads(doc: dict[str, Any]) -> pd.DataFrame:
    """study, world_size, category, source, seconds, text: per-step overhead terms o_c(N)."""
    rows = [
        {
            "study": path,
            "world_size": as_dict(o).get("world_size"),
            "category": as_dict(o).get("category"),
            "source": as_dict(o).get("source"),
            "seconds": as_float(as_dict(o).get("seconds")),
            "text": as_dict(o).get("text"),
        }
        for path, st in studies_of(doc)
        for o in as_list(as_dict(st.get("scaling")).get("overheads"))
    ]
    return make_frame("overheads", rows)


def ranks(doc: dict[str, Any]) -> pd.DataFrame:
    """study, world_size, rank, step_time_s, category, seconds: each rank's mean per step
    (the stragglers table and the per-rank charts)."""
    rows = [
        {
            "study": path,
            "world_size": r.get("world_size"),
            "rank": as_dict(p).get("rank"),
            "step_time_s": as_float(as_dict(p).get("step_time_s")),
            "category": c,
            "seconds": as_float(v),
        }
        for path, st in studies_of(doc)
        for r in runs_of(st)
        for p in as_list(r.get("per_rank"))
        for c, v in as_dict(as_dict(p).get("breakdown_s")).items()
    ]
    return make_frame("ranks", rows)


def step_stats(doc: dict[str, Any]) -> pd.DataFrame:
    """study, world_size, ranks, steps, mean_s, median_s, p10_s, p90_s, cv, slowest_rank,
    slowest_rank_mean_s, slowest_per_step_mean_s: step-time statistics per run."""
    rows = []
    for path, st in studies_of(doc):
        for s in as_list(as_dict(st.get("scaling")).get("step_stats")):
            s, slow = as_dict(s), as_dict(as_dict(s).get("slowest_rank"))
            rows.append(
                {
                    "study": path,
                    "world_size": s.get("world_size"),
                    "ranks": s.get("ranks"),
                    "steps": s.get("steps"),
                    **{f"{k}_s": as_float(s.get(k)) for k in ("mean", "median", "p10", "p90")},
                    "cv": as_float(s.get("cv")),
                    "slowest_rank": slow.get("rank"),
                    "slowest_rank_mean_s": as_float(slow.get("mean")),
                    "slowest_per_step_mean_s": as_float(s.get("slowest_per_step_mean")),
                }
            )
    return make_frame("step_stats", rows)


def _top_op_row(path: str, run: dict[str, Any], cat: str, i: int, op: Any) -> dict[str, Any]:
    op = as_dict(op)
    law = op.get("law")
    law_d = as_dict(law)
    return {
        "study": path,
        "world_size": run.get("world_size"),
        "category": cat,
        "position": i,
        "name": op.get("name"),
        "seconds": as_float(op.get("seconds")),
        "share": as_float(op.get("share")),
        "step_sd_s": as_float(op.get("step_sd_s")),
        "law": law_d.get("form") if isinstance(law, dict) else law,
        "law_exponent": as_float(law_d.get("exponent")),
        "flagged": bool(law_d.get("flagged")) if "flagged" in law_d else None,
    }


def top_ops(doc: dict[str, Any]) -> pd.DataFrame:
    """study, world_size, category, position, name, seconds, share, step_sd_s, law,
    law_exponent, flagged: the heaviest ops of each category per run (``runs[].top_ops``),
    position 1 the heaviest; seconds per step, share of the category, the law across N
    (``law.form``, its exponent p of t ~ N^p, and whether it is flagged as not scaling)."""
    rows = [
        _top_op_row(path, r, c, i, op)
        for path, st in studies_of(doc)
        for r in runs_of(st)
        for c, ops in as_dict(r.get("top_ops")).items()
        for i, op in enumerate(as_list(ops), 1)
    ]
    return make_frame("top_ops", rows)
