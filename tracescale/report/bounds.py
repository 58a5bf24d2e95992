"""How numbers that are estimated, assumed or out of range read in a report.

A value computed over a modelled one-GPU time is marked "est.", one resting on a single run says
it is assumed, and a metric outside the range where it means what its name says is shown as the
bound it broke ("> 1 (slower)"), never as a number a reader would take for a fact.
"""

from __future__ import annotations

from typing import Any

from tracescale.report import fmt
from tracescale.report.blocks import _d, runs_of


def karp_flatt_cell(point: dict[str, Any], measured_runs: int) -> str:
    """Karp–Flatt as it can honestly be read: only from two measured runs, bounded, marked.

    Outside [0, 1] the metric is no serial fraction (the document then has ``karp_flatt`` null
    and the formula's value in ``karp_flatt_raw``): above one the job got slower than the
    baseline, below zero it sped up more than N (superlinear); "est." marks a value computed
    over a modelled one-GPU time rather than a measured one.
    """
    v = fmt.num(point.get("karp_flatt"))
    raw = fmt.num(point.get("karp_flatt_raw")) if v is None else v
    if raw is None or measured_runs < 2:
        return fmt.DASH
    if raw > 1.0:
        text = ">1 (slower)"
    elif raw < 0.0:
        text = "<0 (superlinear)"
    else:
        text = fmt.fixed(raw)
    return text + (" (est.)" if point.get("karp_flatt_estimated") else "")


def optimum_of(study: dict[str, Any]) -> float | None:
    """The best world size as the report's own projections say it.

    When the replay re-projected the curve (its points carry ``closed_form_step_time_s``), the
    optimum is the curve's best point (lowest step, or highest throughput in weak scaling), not
    the closed form's ``optimal_world_size``, which the same report may call >10% off; a best
    point at the curve's last N is no optimum (it may keep improving beyond). Without a replay,
    the closed form's optimum is the one the projections come from.
    """
    sc = _d(study.get("scaling"))
    curve = [p for p in (sc.get("curve") or []) if isinstance(p, dict)]
    curve = [p for p in curve if fmt.num(p.get("step_time_s")) and fmt.num(p.get("world_size"))]
    if not any("closed_form_step_time_s" in p for p in curve):
        return fmt.num(sc.get("optimal_world_size"))
    weak = str(study.get("mode")) == "weak"

    def cost(p: dict[str, Any]) -> float:
        t, n = fmt.num(p.get("step_time_s")) or 0.0, fmt.num(p.get("world_size")) or 1.0
        return t / n if weak else t

    best = min(curve, key=cost)
    n_best = fmt.num(best.get("world_size"))
    if n_best == max(fmt.num(p.get("world_size")) or 0.0 for p in curve):
        return None
    return n_best


def optimum_note(study: dict[str, Any]) -> str:
    """The best world size, said as measured, extrapolated or assumed as it is."""
    opt = optimum_of(study)
    sc = _d(study.get("scaling"))
    runs = runs_of(study)
    n_max = fmt.num(runs[-1].get("world_size")) if runs else None
    weak = str(study.get("mode")) == "weak"
    if opt is None:
        what = "throughput keeps rising" if weak else "step time keeps falling"
        return f"No optimum world size within the model: projected {what} with N."
    unit = fmt.unit_of(study)
    where = unit.of(int(opt))
    best = "throughput is highest" if weak else "step time is lowest"
    if len(runs) < 2 or sc.get("assumed"):
        return f"If the parallel part scales as 1/N (assumed: one run), {best} at {where}."
    if n_max and opt > 4 * n_max:
        return (
            f"The model says {best} at {where}, {opt / n_max:.0f}x beyond the largest measured "
            "N: an extrapolation."
        )
    return f"{best[0].upper()}{best[1:]} at {where}: beyond it, more {unit.plural} do not help."
