"""Sections of what the study projects: step time at the target world sizes, the what-if
scenarios, and the overheads that grow with N (one row per source, one column per N).

Why apart from ``sections``: these read the scaling entry's projection-shaped lists
(``projections``, ``what_if``, ``overheads``) and share their row layout; the rest of
``sections`` reads the measured runs. Selection and formatting only, as there.
"""

from __future__ import annotations

from typing import Any

from tracescale.report import fmt
from tracescale.report.blocks import Section, _d, _l, generic_section


def projection_rows(projections: list[Any]) -> list[list[str]]:
    """Rows of N, step time, interval, speedup, efficiency for projection-shaped dicts."""
    rows = []
    for p in projections:
        if isinstance(p, dict):
            rows.append(
                [
                    str(p.get("world_size")),
                    fmt.secs(p.get("step_time_s")),
                    fmt.interval(p.get("ci90")),
                    fmt.times(p.get("speedup")),
                    fmt.pct(p.get("efficiency")),
                ]
            )
    return rows


PROJ_HEADERS = ["N", "Step time", "90% interval", "Speedup", "Efficiency"]


def projections_section(study: dict[str, Any]) -> Section | None:
    """Projected step time, its interval and speedup at target world sizes."""
    sc = _d(study.get("scaling"))
    projs = _l(sc.get("projections"))
    if not projs:
        return None
    title = "Projections (assumed: one run)" if sc.get("assumed") else "Projections"
    sec = Section("projections", title, list(PROJ_HEADERS), projection_rows(projs))
    if sc.get("assumed"):
        sec.note = "Assumed: a single run cannot be fitted; default per-category assumptions."
    return sec


def what_if_section(study: dict[str, Any]) -> Section | None:
    """What-if scenarios: either projection-shaped entries with a label or {label, projections}."""
    entries = [e for e in _l(_d(study.get("scaling")).get("what_if")) if isinstance(e, dict)]
    if not entries:
        return None
    assumed = bool(_d(study.get("scaling")).get("assumed"))
    title = "What if (assumed: one run)" if assumed else "What if"
    sec = Section("what_if", title, ["Scenario", *PROJ_HEADERS], left_cols=2)
    closed: list[str] = []
    refused = [
        f"{e.get('label') or e.get('scenario') or '?'} ({e.get('projections_source_reason')})"
        for e in entries
        if e.get("projections_source") == "refused"
    ]
    for e in entries:
        name = str(e.get("label") or e.get("scenario") or "?")
        projs = _l(e.get("projections")) if "projections" in e else [e]
        sec.rows.extend([name, *row] for row in projection_rows(projs))
        if e.get("projections_source") == "closed_form":
            closed.append(f"{name} ({e.get('projections_source_reason', 'not replayed')})")
    if any(e.get("projections_source") == "replay" for e in entries):
        sec.note = "Replayed: the execution graph with the scenario's nodes rescaled."
    if closed:
        sec.note = " ".join(
            [sec.note or "", "Per-category closed form for: " + "; ".join(closed) + "."]
        ).strip()
    if refused:
        sec.note = " ".join([sec.note or "", "Not projected: " + "; ".join(refused) + "."]).strip()
    return sec


def overheads_section(study: dict[str, Any]) -> Section | None:
    """Overhead terms o_c(N) as one row per source and one column per N (not one line each).

    Entries with ``world_size``, ``source`` and ``seconds`` become that table, so a term that
    is the same at every N reads once across a row; other shapes fall back to their text.
    """
    value = _d(study.get("scaling")).get("overheads")
    entries = [e for e in _l(value) if isinstance(e, dict)]
    title = "Overheads that grow with N (seconds per step each adds)"
    if entries and all(
        fmt.num(e.get("world_size")) is not None and e.get("source") is not None for e in entries
    ):
        sizes = sorted({int(fmt.num(e["world_size"]) or 0) for e in entries})
        sources: list[str] = []
        for e in entries:
            if str(e["source"]) not in sources:
                sources.append(str(e["source"]))
        by = {(str(e["source"]), int(fmt.num(e["world_size"]) or 0)): e for e in entries}
        sec = Section("overheads", title, ["Source", *[f"N={n}" for n in sizes]])
        for src in sources:
            cells = [fmt.secs(_d(by.get((src, n))).get("seconds")) for n in sizes]
            name = fmt.label(src)
            sec.rows.append([name[:1].upper() + name[1:], *cells])
        return sec
    if entries and all(e.get("text") for e in entries):
        return Section("overheads", title, items=[str(e["text"]) for e in entries])
    return generic_section("overheads", title, value)
