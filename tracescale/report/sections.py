"""The study document as format-neutral sections (titled tables and lists of strings).

Table, Markdown and HTML all render these, so every format says the same thing with the same
numbers. Only selection and formatting happen here; every statistic comes from the document.
"""

from __future__ import annotations

from typing import Any

from tracescale.report import fmt
from tracescale.report.blocks import (
    Block,
    Section,
    _d,
    _l,
    categories_of,
    generic_section,
    runs_of,
)
from tracescale.report.bounds import karp_flatt_cell, optimum_note
from tracescale.report.contributors import stragglers_section, top_ops_section
from tracescale.report.projected import overheads_section, projections_section, what_if_section

__all__ = ["Block", "Section", "categories_of", "document_blocks", "runs_of", "study_block"]


def mean_step(run: dict[str, Any]) -> float | None:
    """The run's mean step time in seconds."""
    return fmt.num(_d(run.get("step_time_s")).get("mean"))


def share(part: Any, whole: float | None) -> float | None:
    """part/whole as a fraction for display, None when either is missing."""
    p = fmt.num(part)
    if p is None or whole is None or whole <= 0:
        return None
    return p / whole


def secs_share(part: Any, whole: float | None) -> str:
    """'12.3 ms (45.0%)'."""
    s = share(part, whole)
    return fmt.secs(part) if s is None else f"{fmt.secs(part)} ({fmt.pct(s)})"


def header_block(study: dict[str, Any], index: int, total: int) -> tuple[str, list[str]]:
    """Title and summary lines of one study."""
    title = f"Study {index + 1} of {total}: " if total > 1 else "Study: "
    title += str(study.get("path", "?"))
    lines = []
    mode = study.get("mode")
    if mode:
        reason = study.get("mode_reason")
        lines.append(f"Scaling mode: {mode}" + (f" ({reason})" if reason else ""))
    runs = runs_of(study)
    if runs:
        sizes = ", ".join(str(r.get("world_size")) for r in runs)
        lines.append(f"World sizes measured: {sizes}")
    sc = _d(study.get("scaling"))
    if "baseline_world_size" in sc:
        base = f"Baseline: {fmt.unit_of(study).of(sc.get('baseline_world_size'))}"
        if sc.get("assumed"):
            base += " (single run: projections use default assumptions)"
        lines.append(base)
    return title, lines


def breakdown_section(study: dict[str, Any]) -> Section:
    """Per category seconds and share of the step, one column per world size."""
    runs = runs_of(study)
    sec = Section("breakdown", "Where each step's time goes (per step, mean over ranks)")
    sec.headers = ["", *[f"N={r.get('world_size')}" for r in runs]]
    stat = [_d(r.get("step_time_s")) for r in runs]
    sec.rows.append(["Step time (mean)", *[fmt.secs(s.get("mean")) for s in stat]])
    sec.rows.append(["Step time (median)", *[fmt.secs(s.get("median")) for s in stat]])
    sec.rows.append(
        ["Step time p10–p90", *[f"{fmt.secs(s.get('p10'))}–{fmt.secs(s.get('p90'))}" for s in stat]]
    )
    sec.rows.append(["Steps", *[fmt.cell(r.get("steps")) for r in runs]])
    for c in categories_of(study):
        vals = [secs_share(_d(r.get("breakdown_s")).get(c), mean_step(r)) for r in runs]
        sec.rows.append([fmt.label(c), *vals])
    sec.rows.append(
        [
            "Overlapped comm. (hidden)",
            *[fmt.secs(r.get("overlapped_communication_s")) for r in runs],
        ]
    )
    sec.rows.append(["Comm. wait", *[fmt.secs(r.get("communication_wait_s")) for r in runs]])
    if any("replay_error" in r for r in runs):
        sec.rows.append(["Replay error", *[fmt.pct(r.get("replay_error"), 2) for r in runs]])
    return sec


def collectives_section(study: dict[str, Any]) -> Section | None:
    """Exposed communication per collective type, when any run reports it."""
    runs = runs_of(study)
    kinds: list[str] = []
    for r in runs:
        for k in _d(r.get("communication_by_collective_s")):
            if k not in kinds:
                kinds.append(k)
    if not kinds:
        return None
    sec = Section("collectives", "Communication by collective (exposed, per step)")
    sec.headers = ["Collective", *[f"N={r.get('world_size')}" for r in runs]]
    for k in kinds:
        sec.rows.append(
            [
                fmt.label(k),
                *[fmt.secs(_d(r.get("communication_by_collective_s")).get(k)) for r in runs],
            ]
        )
    return sec


def mesh_section(study: dict[str, Any]) -> Section | None:
    """One line per measured run: its parallelism mesh (``scaling.replay.mesh``)."""
    meshes = _d(_d(_d(study.get("scaling")).get("replay")).get("mesh")).get("runs")
    if not isinstance(meshes, dict) or not any(meshes.values()):
        return None
    items = [f"N={n}: {fmt.mesh(dims)}" for n, dims in meshes.items()]
    return Section("mesh", "Parallelism mesh (per run, from the process groups)", items=items)


def points_section(study: dict[str, Any]) -> Section:
    """Speedup, efficiency and Karp–Flatt per measured world size."""
    sc = _d(study.get("scaling"))
    points = [p for p in _l(sc.get("points")) if isinstance(p, dict)]
    weak = any("gustafson_speedup" in p for p in points)
    runs = runs_of(study)
    steps = {r.get("world_size"): mean_step(r) for r in runs}
    sec = Section("points", "Scaling (measured)")
    sec.headers = ["N", "Step time", "Speedup", "Efficiency", "Karp–Flatt"]
    if weak:
        sec.headers.append("Gustafson")
    for p in points:
        n = p.get("world_size")
        row = [str(n), fmt.secs(steps.get(n)), fmt.times(p.get("speedup"))]
        row += [fmt.pct(p.get("efficiency")), karp_flatt_cell(p, len(runs))]
        if weak:
            row.append(fmt.times(p.get("gustafson_speedup")))
        sec.rows.append(row)
    base = sc.get("baseline_world_size")
    unit = fmt.unit_of(study)
    sec.note = (
        f"Speedup over {unit.of(base)}. Karp–Flatt: the serial fraction the measured speedup "
        f"implies, (1/S − 1/N)/(1 − 1/N) over the one-{unit.name} step"
    )
    if len(runs) < 2:
        sec.note += "; it needs measured runs at two world sizes, not one."
    elif any(p.get("karp_flatt_estimated") for p in points):
        sec.note += (
            f"; est.: no one-{unit.name} run, so the one-{unit.name} step is the model's estimate."
        )
    else:
        sec.note += "."
    if str(study.get("mode")) == "weak":
        sec.note += " Weak scaling: speedup is throughput speedup."
    return sec


def serial_section(study: dict[str, Any]) -> Section:
    """Serial-fraction contributions by category and the Amdahl ceiling each implies alone."""
    sc = _d(study.get("scaling"))
    sf = _d(sc.get("serial_fraction"))
    by_cat = _d(sf.get("by_category"))
    unit = fmt.unit_of(study)
    title = f"Serial fraction (the part that does not shrink with more {unit.plural})"
    if sc.get("assumed"):
        title += ": assumed, one run"
    sec = Section("serial", title)
    t1 = "Share of T(1)" + (" (T(1) est.)" if sf.get("t1_estimated") else "")
    # Amdahl's cap holds for a fixed global problem; in weak scaling the work grows with N
    # (Gustafson), so a cap column would contradict the projected throughput speedups.
    weak = str(study.get("mode")) == "weak"
    sec.headers = ["Category", t1] + ([] if weak else ["Alone caps speedup at"])
    ordered = sorted(by_cat.items(), key=lambda kv: -(fmt.num(kv[1]) or 0.0))
    for c, f in ordered:
        v = fmt.num(f)
        sec.rows.append([fmt.label(c), fmt.pct(v)] + ([] if weak else [fmt.cap(v)]))
    total = fmt.num(sf.get("total"))
    total_row = ["Total", f"{fmt.pct(total)} (90% CI {fmt.interval(sf.get('ci90'), fmt.pct)})"]
    sec.rows.append(total_row + ([] if weak else [fmt.times(sc.get("amdahl_limit"))]))
    notes = []
    if weak:
        notes.append(
            "Weak scaling: the work grows with N, so Amdahl's cap does not apply (Gustafson); "
            "the serial fraction slows throughput growth without capping it."
        )
    if sf.get("source") == "replay":
        notes.append(
            "T∞/T(1) from the replay: the step replayed with the parallel work divided away "
            "and transfers free (launches, serial work and waits for a rank late every step "
            "kept), each category's share its time in that step by the attribution rules; "
            "they sum to the total. Waiting for the slowest rank and transfers grow with N: "
            "they are overheads at each projected N, not serial fraction."
        )
    if sf.get("t1_estimated"):
        one = f"one-{unit.name}"
        notes.append(f"T(1) est.: no {one} run; the {one} step is the model's estimate.")
    slow = [
        p
        for p in _l(sc.get("points"))
        if isinstance(p, dict) and (fmt.num(p.get("speedup")) or 1) < 1
    ]
    replayed = sf.get("source") == "replay"
    if not replayed and (
        (total is not None and total >= 0.999) or (slow and str(study.get("mode")) != "weak")
    ):
        notes.append(
            "This job slows down with more ranks: overheads grow faster than the work shrinks, "
            "so the fitted constant parts are capped at the whole step."
        )
    growing = [
        fmt.label(str(o.get("category"))).lower()
        for o in _l(sc.get("overheads"))
        if isinstance(o, dict) and str(o.get("source", "")).endswith("growth term")
    ]
    if growing:
        what = ", ".join(dict.fromkeys(growing))
        notes.append(f"Growing with N instead (overheads, not serial fraction): {what}.")
    notes.append(optimum_note(study))
    sec.note = " ".join(notes)
    return sec


def models_section(study: dict[str, Any]) -> Section | None:
    """Per category fitted form, parameters and fit error."""
    models = _d(_d(study.get("scaling")).get("models"))
    if not models:
        return None
    sec = Section("models", "Per-category models t(N) = a + b/N + o(N)")
    sec.headers = ["Category", "Form", "Parameters", "Fit error (RMSE)"]
    sec.left_cols = 3
    for c, m in models.items():
        m = _d(m)
        sec.rows.append([fmt.label(c), fmt.cell(m.get("form")), fmt.params(m.get("params"))])
        sec.rows[-1].append(fmt.secs(m.get("rmse_s")))
    sec.note = FORM_NOTE
    if any("@" in str(_d(m).get("form")) for m in models.values()):
        sec.note += " s@K: a late rank's delay, added from N=K on (s/N@K: shrinking with N)."
    return sec


FORM_NOTE = (
    "a: the part that does not shrink with N; b/N: the part that does; c*N, c*log2(N): "
    "growth with N. Parameters are seconds per step at N=1."
)


def step_stats_section(study: dict[str, Any]) -> Section | None:
    """Step statistics: the scaling stage's list (CV, slowest rank) or free-form per-run dicts."""
    stats = [s for s in _l(_d(study.get("scaling")).get("step_stats")) if isinstance(s, dict)]
    if stats:
        sec = Section("step_stats", "Step statistics")
        sec.headers = ["N", "Ranks", "Steps", "CV", "Slowest rank", "Its mean", "Slowest per step"]
        for s in stats:
            slow = _d(s.get("slowest_rank"))
            row = [
                fmt.cell(s.get("world_size")),
                fmt.cell(s.get("ranks")),
                fmt.cell(s.get("steps")),
            ]
            row += [fmt.pct(s.get("cv")), fmt.cell(slow.get("rank")), fmt.secs(slow.get("mean"))]
            sec.rows.append([*row, fmt.secs(s.get("slowest_per_step_mean"))])
        sec.note = "CV: coefficient of variation of the step time; above 10% the steps are noisy."
        return sec
    rows: list[dict[str, Any]] = []
    for r in runs_of(study):
        st = r.get("step_stats")
        if isinstance(st, dict):
            rows.append({"N": r.get("world_size"), **st})
    return generic_section("step_stats", "Step statistics", rows)


def study_block(study: dict[str, Any], index: int = 0, total: int = 1) -> Block:
    """Every section of one study, in reading order; absent optional parts are skipped."""
    title, lines = header_block(study, index, total)
    sections: list[Section | None] = []
    findings = [f for f in _l(study.get("findings")) if isinstance(f, dict)]
    if findings:
        sections.append(
            Section(
                "findings",
                "Findings (biggest lever first)",
                items=[str(f.get("text")) for f in findings],
            )
        )
    warns = [str(w) for w in _l(study.get("warnings"))]
    if warns:
        sections.append(Section("warnings", "Warnings", items=warns))
    sections.append(mesh_section(study))
    sections += [breakdown_section(study), top_ops_section(study), collectives_section(study)]
    sections.append(points_section(study))
    sections += [serial_section(study), models_section(study)]
    sections.append(overheads_section(study))
    sections += [projections_section(study), what_if_section(study), stragglers_section(study)]
    sections.append(step_stats_section(study))
    return Block(title, lines, [s for s in sections if s is not None])


def document_blocks(doc: dict[str, Any]) -> list[Block]:
    """One block per study of an analyze document."""
    studies = [s for s in _l(doc.get("studies")) if isinstance(s, dict)]
    return [study_block(s, i, len(studies)) for i, s in enumerate(studies)]


def tool_line(doc: dict[str, Any]) -> str:
    """'tracescale 0.1.0, schema 1'."""
    tool = _d(doc.get("tool"))
    name, version = tool.get("name", "tracescale"), tool.get("version", "?")
    return f"{name} {version}, schema {doc.get('schema_version')}"
