"""Frames of one compare document: per matched run and category, and the scaling quantities
before and after."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from tracescale.frames.columns import as_dict, as_float, as_list, make_frame


def compare_frame(doc: dict[str, Any]) -> pd.DataFrame:
    """study, world_size, quantity, before_s, after_s, delta_s, change_pct, ci90_low_pct,
    ci90_high_pct, significant, verdict: per matched run a ``step_time`` row (with the
    bootstrap interval, significance and verdict) then one row per category (those NaN/None)."""
    rows = []
    for r in as_list(doc.get("runs")):
        r = as_dict(r)
        st = as_dict(r.get("step_time_s"))
        before, after = as_float(st.get("before")), as_float(st.get("after"))
        ci = as_list(st.get("ci90"))
        base = {"study": r.get("study", 0), "world_size": r.get("world_size")}
        rows.append(
            {
                **base,
                "quantity": "step_time",
                "before_s": before,
                "after_s": after,
                "delta_s": after - before,
                "change_pct": as_float(st.get("change_pct")),
                "ci90_low_pct": as_float(ci[0]) if len(ci) == 2 else math.nan,
                "ci90_high_pct": as_float(ci[1]) if len(ci) == 2 else math.nan,
                "significant": bool(st.get("significant")),
                "verdict": r.get("verdict"),
            }
        )
        bd = as_dict(r.get("breakdown_s"))
        b_side, a_side = as_dict(bd.get("before")), as_dict(bd.get("after"))
        for c, delta in as_dict(r.get("breakdown_delta_s")).items():
            b, a = as_float(b_side.get(c)), as_float(a_side.get(c))
            rows.append(
                {
                    **base,
                    "quantity": c,
                    "before_s": b,
                    "after_s": a,
                    "delta_s": as_float(delta),
                    "change_pct": (a / b - 1.0) * 100.0 if b > 0 else math.nan,
                }
            )
    return make_frame("compare", rows)


def compare_scaling(doc: dict[str, Any]) -> pd.DataFrame:
    """study, quantity, world_size, before, after: serial fraction, Amdahl ceiling (world_size
    NaN) and projected speedup per N, before and after."""
    rows: list[dict[str, Any]] = []
    for i, s in enumerate(as_list(doc.get("studies"))):
        s = as_dict(s)
        for q in ("serial_fraction", "amdahl_limit"):
            pair = as_dict(s.get(q))
            rows.append(
                {
                    "study": i,
                    "quantity": q,
                    "world_size": math.nan,
                    "before": as_float(pair.get("before")),
                    "after": as_float(pair.get("after")),
                }
            )
        for p in as_list(s.get("projected_speedup")):
            p = as_dict(p)
            rows.append(
                {
                    "study": i,
                    "quantity": "projected_speedup",
                    "world_size": as_float(p.get("world_size")),
                    "before": as_float(p.get("before")),
                    "after": as_float(p.get("after")),
                }
            )
    return make_frame("compare_scaling", rows)
