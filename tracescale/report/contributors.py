"""Sections naming who is behind the numbers: top ops per category and straggling ranks.

Selection and formatting only: every figure is a field of the run entries (``top_ops``,
``stragglers``); names are shortened for display the way findings shorten them, the JSON
keeps them whole.
"""

from __future__ import annotations

from typing import Any

from tracescale.report import fmt
from tracescale.report.blocks import Section, categories_of, runs_of
from tracescale.report.names import short_names

#: Steps a run needs before stragglers are looked for (classify.stragglers.MIN_STEPS: the
#: renderer reads documents only, so the number is repeated, not imported).
MIN_STEPS = 2
#: Ops shown per category (the JSON keeps more).
OPS_SHOWN = 3
#: Categories whose top ops are listed only when they take at least this share of the step;
#: ops under 1% of their category are not listed either.
MIN_STEP_SHARE = 0.02


def _d(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def _ops(run: dict[str, Any], cat: str) -> list[dict[str, Any]]:
    return [e for e in (_d(run.get("top_ops")).get(cat) or []) if isinstance(e, dict)]


#: The row that gives each category's own-timeline total, the basis of its ops' shares.
_WHOLE = "(whole, own timelines)"


def _basis(run: dict[str, Any], cat: str) -> str:
    """The category's own-timeline seconds per rank-step at one N (carried by each op entry)."""
    for e in _ops(run, cat):
        if fmt.num(e.get("category_s")) is not None:
            return fmt.secs(e.get("category_s"))
    return fmt.DASH


def _law_text(law: dict[str, Any], runs: int) -> str:
    if runs < 2 or not law:
        return "one run"
    form = str(law.get("form") or fmt.DASH)
    return form + (" (!)" if law.get("flagged") else "")


def top_ops_section(study: dict[str, Any]) -> Section | None:
    """Per category, its largest ops at the largest N: seconds at every N, share, law across N."""
    runs = runs_of(study)
    if not runs or not any(_d(r.get("top_ops")) for r in runs):
        return None
    last = runs[-1]
    step = fmt.num(_d(last.get("step_time_s")).get("mean")) or 0.0
    n_last = last.get("world_size")
    sec = Section("top_ops", f"Top contributors per category (at N={n_last}, per step)")
    sec.headers = ["Category", "Op / kernel", *[f"N={r.get('world_size')}" for r in runs]]
    sec.headers += ["Share", "Law across N"]
    sec.left_cols = 2
    flagged = False
    for cat in categories_of(study):
        whole = fmt.num(_d(last.get("breakdown_s")).get(cat)) or 0.0
        if step <= 0 or whole < MIN_STEP_SHARE * step:
            continue
        shown = [e for e in _ops(last, cat) if (fmt.num(e.get("share")) or 0.0) >= 0.01]
        shown = shown[:OPS_SHOWN]
        if not shown:
            continue
        labels = short_names([str(e.get("name")) for e in shown])
        basis = [_basis(r, cat) for r in runs]
        sec.rows.append([fmt.label(cat), _WHOLE, *basis, "100%", ""])
        for e, label in zip(shown, labels, strict=True):
            name = str(e.get("name"))
            per_n = []
            for r in runs:
                match = [x for x in _ops(r, cat) if x.get("name") == name]
                per_n.append(fmt.secs(match[0].get("seconds")) if match else fmt.DASH)
            law = _d(e.get("law"))
            flagged |= bool(law.get("flagged"))
            row = ["", label, *per_n]
            sec.rows.append([*row, fmt.pct(e.get("share"), 0), _law_text(law, len(runs))])
    if not sec.rows:
        return None
    sec.note = (
        "Each instant of a category is owned by one op: the innermost event that explains it "
        "(kernels for compute, the data-loading op, a host op's self time). Seconds: mean per "
        f"step over all ranks. {_WHOLE}: the category on the ranks' own timelines, before "
        "waits were attributed to the rank that caused them (so it may differ from the "
        "breakdown); Share: of that row. "
    )
    if flagged:
        mode = str(study.get("mode"))
        sec.note += "(!): grows with N." if mode == "weak" else "(!): does not shrink with N."
    sec.note += " – : not among the category's top ops at that N."
    return sec


def _rank_rows(run: dict[str, Any]) -> list[Any]:
    """The run's per-rank rows; anything but a list (a damaged document) counts as none."""
    rows = run.get("per_rank")
    return rows if isinstance(rows, list) else []


def stragglers_section(study: dict[str, Any]) -> Section | None:
    """Ranks whose own work is late, per run, with the category that makes them late."""
    runs = runs_of(study)
    if not any(len(_rank_rows(r)) > 1 for r in runs):
        return None
    sec = Section("stragglers", "Stragglers (ranks the others wait for)")
    sec.headers = ["N", "Rank", "Own time", "Median rank", "Extra per step", "Mostly", "Noise"]
    checked, one_step = [], []
    for r in runs:
        if len(_rank_rows(r)) < 2 or "stragglers" not in r:
            continue
        steps = fmt.num(r.get("steps"))
        if steps is not None and steps < MIN_STEPS:
            one_step.append(str(r.get("world_size")))
            continue
        checked.append(str(r.get("world_size")))
        for s in r.get("stragglers") or []:
            s = _d(s)
            sec.rows.append(
                [
                    str(r.get("world_size")),
                    str(s.get("rank")),
                    fmt.secs(s.get("own_s")),
                    fmt.secs(s.get("median_own_s")),
                    fmt.secs(s.get("extra_s")),
                    fmt.label(str(s.get("category"))),
                    fmt.secs(s.get("noise_s")),
                ]
            )
    unchecked = (
        f"Not checked at N={', '.join(one_step)}: one step per rank, so the step-to-step "
        "noise a straggler must exceed cannot be measured."
    )
    if not checked:
        return Section("stragglers", sec.title, items=[unchecked]) if one_step else None
    if not sec.rows:
        items = [
            f"None at N={', '.join(checked)}: no rank's own time (step minus waiting for "
            "others) exceeds the median rank's by more than the step-to-step noise."
        ]
        return Section("stragglers", sec.title, items=items + ([unchecked] if one_step else []))
    sec.note = (
        "Own time: the step minus the time spent waiting for other ranks. A straggler's own "
        "time exceeds the median rank's by more than the noise (standard deviation over steps)."
    )
    if one_step:
        sec.note += " " + unchecked
    return sec
