"""The compare document as format-free sections: the same sections in every format.

It builds :class:`Block` and :class:`Section` values only; :mod:`tracescale.report.render` hands
them to the table, Markdown or HTML writer, so this module imports none of the writers.
"""

from __future__ import annotations

from typing import Any

from tracescale.report import fmt
from tracescale.report.blocks import Block, Section
from tracescale.report.names import short_names


def _d(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def _l(x: Any) -> list[Any]:
    return x if isinstance(x, list) else []


def _n_label(r: dict[str, Any]) -> str:
    nb, na = r.get("world_size_before", r.get("world_size")), r.get("world_size")
    return f"N={na}" if nb == na else f"N={nb}→{na}"


def _ba(pair: Any, f: Any) -> list[str]:
    p = _d(pair)
    return [f(p.get("before")), f(p.get("after"))]


def verdict_section(doc: dict[str, Any]) -> Section:
    """Overall verdict, one headline per run, the gate's result."""
    items = [f"Overall: {doc.get('verdict', '?')}", *[str(s) for s in _l(doc.get("summary"))]]
    g = _d(doc.get("gate"))
    if g.get("fail_on_regression_pct") is not None:
        pct = g.get("fail_on_regression_pct")
        state = "FAILED" if g.get("failed") else "passed"
        code = g.get("exit_code")
        items.append(f"Regression gate (>{pct}% slower, significant): {state}, exit code {code}")
        items += [str(r) for r in _l(g.get("reasons"))]
    return Section("verdict", "Verdict", items=items)


def step_section(runs: list[dict[str, Any]]) -> Section:
    """Step time before/after per matched world size with its bootstrap interval."""
    sec = Section("compare_steps", "Step time (mean per step)")
    sec.headers = ["N", "Before", "After", "Change", "90% interval", "Significant", "Verdict"]
    for r in runs:
        st = _d(r.get("step_time_s"))
        nb, na = r.get("world_size_before", r.get("world_size")), r.get("world_size")
        n = str(na) if nb == na else f"{nb}→{na}"
        row = [n, fmt.secs(st.get("before")), fmt.secs(st.get("after"))]
        row += [fmt.signed_pct(st.get("change_pct")), fmt.interval(st.get("ci90"), fmt.signed_pct)]
        row += [fmt.cell(bool(st.get("significant"))), str(r.get("verdict"))]
        sec.rows.append(row)
    methods = {str(_d(r.get("step_time_s")).get("method")) for r in runs}
    sec.note = "Interval and significance: " + ", ".join(sorted(methods)) + "."
    return sec


def delta_section(runs: list[dict[str, Any]]) -> Section:
    """Per category change in seconds per step (after minus before), one column per N."""
    sec = Section("compare_delta", "Change per category (after − before, per step)")
    sec.headers = ["Category", *[_n_label(r) for r in runs]]
    cats: list[str] = []
    for r in runs:
        cats += [c for c in _d(r.get("breakdown_delta_s")) if c not in cats]
    for c in cats:
        vals = [fmt.signed_secs(_d(r.get("breakdown_delta_s")).get(c)) for r in runs]
        sec.rows.append([fmt.label(c), *vals])
    return sec


def op_changes_section(runs: list[dict[str, Any]]) -> Section | None:
    """Per matched run and category, the ops whose seconds per step changed most."""
    sec = Section("compare_ops", "Ops that changed most (per step, after − before)")
    sec.headers = ["N", "Category", "Op / kernel", "Before", "After", "Change", "", "Significant"]
    sec.left_cols = 3
    for r in runs:
        nb, na = r.get("world_size_before", r.get("world_size")), r.get("world_size")
        n = str(na) if nb == na else f"{nb}→{na}"
        for cat, rows in _d(r.get("op_changes")).items():
            shown = [_d(c) for c in _l(rows)[:3]]
            names = short_names([str(c.get("name")) for c in shown])
            for i, (c, name) in enumerate(zip(shown, names, strict=True)):
                sec.rows.append(
                    [
                        n,
                        fmt.label(str(cat)) if i == 0 else "",
                        name,
                        fmt.secs(c.get("before_s")),
                        fmt.secs(c.get("after_s")),
                        fmt.signed_secs(c.get("delta_s")),
                        str(c.get("change")),
                        fmt.cell(bool(c.get("significant"))),
                    ]
                )
    if not sec.rows:
        return None
    sec.note = _op_changes_note({str(row[6]) for row in sec.rows})
    return sec


def _op_changes_note(changes: set[str]) -> str:
    """What the table's words mean, for the words it shows (no gloss of an absent one)."""
    note = (
        "Significant: beyond the 90% bound of the difference of the two means over steps and "
        "over 1% of the step. Op times are on each rank's own timeline (waits and overlapped "
        "time included), so they need not add up to the category change above."
    )
    if changes & {"added", "removed"}:
        note += " added / removed: absent from the other side, whose list is complete."
    if changes & {"new in top", "out of top"}:
        note += (
            " new in top / out of top: below the other side's list of top ops, so its time "
            "there is unknown."
        )
    return note


def _marked(pair: Any, f: Any, assumed: dict[str, Any]) -> list[str]:
    """Before and after cells, each marked where that side's figure is assumed (one run)."""
    cells = _ba(pair, f)
    return [
        c + " (assumed)" if assumed.get(side) and c != fmt.DASH else c
        for c, side in zip(cells, ("before", "after"), strict=True)
    ]


def _scaling_note(study: dict[str, Any], comparable: bool) -> str:
    assumed = _d(study.get("assumed"))
    base = _d(study.get("baseline_world_size"))
    sides = [side for side in ("before", "after") if assumed.get(side)]
    notes = []
    if sides:
        who = " and ".join(sides)
        notes.append(
            f"Assumed ({who}: one run): the parallel part is taken to scale as 1/N; serial "
            "fraction, ceiling and projections are not measured."
        )
    if not comparable:
        notes.append(
            f"Speedups are over different baselines (N={base.get('before')} before, "
            f"N={base.get('after')} after), so projected step times are shown instead."
        )
    elif base.get("before") is not None:
        notes.append(f"Speedups over N={base.get('before')} on both sides.")
    return " ".join(notes)


def scaling_section(study: dict[str, Any]) -> Section:
    """Serial fraction, Amdahl ceiling and projections before and after, assumed ones marked.

    Speedups over different baselines are not set side by side: the projected step times are.
    """
    sec = Section("compare_scaling", "Scaling before and after", ["", "Before", "After"])
    assumed = _d(study.get("assumed"))
    comparable = study.get("speedups_comparable") is not False
    sec.rows.append(["Serial fraction", *_marked(study.get("serial_fraction"), fmt.pct, assumed)])
    sec.rows.append(["Amdahl ceiling", *_marked(study.get("amdahl_limit"), fmt.times, assumed)])
    for p in _l(study.get("projected_speedup")):
        p = _d(p)
        n = p.get("world_size")
        if comparable:
            sec.rows.append([f"Projected speedup at N={n}", *_marked(p, fmt.times, assumed)])
        else:
            cells = _marked(p.get("step_time_s"), fmt.secs, assumed)
            sec.rows.append([f"Projected step time at N={n}", *cells])
    sec.note = _scaling_note(study, comparable)
    return sec


def compare_blocks(doc: dict[str, Any]) -> list[Block]:
    """One block per compared study pair; the verdict and warnings go on the first."""
    runs = [r for r in _l(doc.get("runs")) if isinstance(r, dict)]
    studies = [s for s in _l(doc.get("studies")) if isinstance(s, dict)] or [{}]
    blocks = []
    for i, st in enumerate(studies):
        mine = [r for r in runs if r.get("study", 0) == i]
        title = f"Before: {st.get('before_path', '?')}  →  After: {st.get('after_path', '?')}"
        sections: list[Section | None] = [verdict_section(doc)] if i == 0 else []
        warns = [str(w) for w in _l(doc.get("warnings"))]
        if i == 0 and warns:
            sections.append(Section("warnings", "Warnings", items=warns))
        if mine:
            sections += [step_section(mine), delta_section(mine)]
            sections.append(op_changes_section(mine))
        sections.append(scaling_section(st))
        blocks.append(Block(title, [], [x for x in sections if x is not None]))
    return blocks


def compare_header(doc: dict[str, Any]) -> str:
    """The line under each compare rendering's title: the tool and the document's schema."""
    return f"tracescale compare, schema {doc.get('schema_version')}"
