"""Put replayed projections and the replayed serial fraction (its total and each category's
part, from the step replayed at infinite N) into a study's scaling entry (the JSON contract);
the closed form stays only as labelled cross-check fields."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tracescale.categories import CATEGORIES
from tracescale.replay.arrivals.slowest_rank import straggler_warning
from tracescale.replay.arrivals.variability import delay_assumption
from tracescale.replay.engine.cycles import bootstrap_mean, resampled_notes, weighted_mean
from tracescale.replay.laws.p2p import crossing_warning
from tracescale.replay.links.mesh import mesh_dict
from tracescale.replay.links.topology import INTER
from tracescale.replay.overheads import replay_overheads
from tracescale.replay.project import ReplayStudy, tier_warning
from tracescale.replay.serial_parts import replayed_breakdown
from tracescale.replay.whatif.cuda_graph_gain import graph_capture_gain
from tracescale.replay.whatif.levers import lever_gains
from tracescale.replay.whatif.scenario import scenario_study, unreplayable

#: How the closed form's warnings about its own per-category fits begin (``scaling.analyze``).
CLOSED_FORM_FIT = "poor fit for "


def _speedup(t_base: float, t: float, base_n: int, n: int, mode: str) -> float:
    if t <= 0:
        return float("nan")
    return (n / base_n if mode == "weak" else 1.0) * t_base / t


def _cycle_factor(study: ReplayStudy, base_n: int) -> float:
    """The baseline run's cycle-weighted mean step over its plain mean (its replayed rank's
    steps; ``replay.engine.cycles``): the projections weigh each phase of a cycle equally, so the
    baseline they are divided by must too."""
    for run in study.runs:
        if run.world_size == base_n and run.kept.any():
            steps = run.measured[run.kept]
            plain = float(np.mean(steps))
            return weighted_mean(steps, run.weights) / plain if plain > 0 else 1.0
    return 1.0


def _base_interval(study: ReplayStudy, t_base: float, base_n: int) -> tuple[float, float]:
    """90% interval of the baseline's measured mean step, as a bootstrap over its replayed
    rank's steps gives it relative to their mean: a speedup divides by a measured, noisy
    baseline, so its interval carries that noise as well as the projection's."""
    for run in study.runs:
        if run.world_size == base_n and run.kept.any():
            steps = run.measured[run.kept]
            mean = weighted_mean(steps, run.weights)
            if mean <= 0:
                break
            lo, hi = bootstrap_mean(steps, 0, mean, run.strata, run.weights)
            return min(t_base * lo / mean, t_base), max(t_base * hi / mean, t_base)
    return t_base, t_base


def _update(
    p: dict[str, Any],
    study: ReplayStudy,
    base: tuple[float, float, float],
    base_n: int,
    mode: str,
    *,
    categories: bool = True,
) -> None:
    """One projection (or curve point) as the replay gives it: step, speedup, intervals and
    the replayed step's categories; the closed form's step and breakdown stay beside them as
    labelled cross-check fields (``closed_form_*``), never printed. ``categories`` False (the
    dense curve, which nothing draws by category): no breakdown, one replay fewer per point."""
    n = int(p["world_size"])
    t_base, base_lo, base_hi = base
    pt = study.project(n)
    closed = float(p["step_time_s"])
    t = pt.step_time_s
    p["closed_form_step_time_s"] = closed
    p["step_time_s"] = t
    p["speedup"] = _speedup(t_base, t, base_n, n, mode)
    p["efficiency"] = p["speedup"] * base_n / n
    p["ci90"] = [pt.ci90[0], pt.ci90[1]]
    p["speedup_ci90"] = [_speedup(base_lo, pt.ci90[1], base_n, n, mode),
                         _speedup(base_hi, pt.ci90[0], base_n, n, mode)]  # fmt: skip
    p["closed_form_breakdown_s"] = dict(p.pop("breakdown_s", {}))
    if categories:
        bd = replayed_breakdown(study.base.graph, study.replay_at(n), study.base.kept)
        total = sum(bd.values())
        # the replayed step's categories, at the projection's step time
        p["breakdown_s"] = {c: v * t / total if total > 0 else 0.0 for c, v in bd.items()}
    p["rank_to_rank_variability_s"] = pt.variability_s


def _replay_scenario(entry: dict[str, Any], study: ReplayStudy, base_n: int, mode: str) -> None:
    """A what-if entry's projections and serial fraction through the transformed graph
    (``scenario``), its speedups over the same scenario replayed at the baseline N; the closed
    form's step time kept beside each, labelled. A scenario the graph cannot express is
    refused with why: no projection, no serial fraction (one model gives one answer)."""
    factors = {str(k): float(v) for k, v in dict(entry.get("factors") or {}).items()}
    why = unreplayable(factors)
    entry["closed_form_serial_fraction"] = entry.get("serial_fraction")
    if why is not None:
        entry["closed_form_projections"] = [
            {"world_size": p["world_size"], "step_time_s": p["step_time_s"]}
            for p in entry.get("projections", [])
        ]
        entry.update(projections=[], serial_fraction=None, amdahl_limit=None)
        entry.update(optimal_world_size=None, projections_source="refused")
        entry["projections_source_reason"] = why
        return
    scen = scenario_study(study, factors)
    t_base = scen.project(base_n).step_time_s
    for p in entry.get("projections", []):
        _update(p, scen, (t_base, t_base, t_base), base_n, mode)
    entry["projections_source"] = "replay"
    t1 = scen.project(1).step_time_s
    if mode == "strong" and t1 > 0:
        parts = scen.serial_parts()
        f = _clamp(sum(parts.values()) / t1)
        entry["serial_fraction"] = f
        entry["serial_fraction_by_category"] = {c: parts.get(c, 0.0) / t1 for c in _parts_of(parts)}
        entry["amdahl_limit"] = 1.0 / f if f > 0 else None
        entry["serial_fraction_source"] = "replay"
    else:  # weak scaling: the measured category share stands, as for the study itself
        entry["serial_fraction_source"] = "attribution"


def _parts_of(parts: Mapping[str, float]) -> tuple[str, ...]:
    """Every attribution category, then the replay's own serial parts (the pipeline bubble:
    time a stage runs only point-to-point transfers), so the parts sum to the total."""
    return (*CATEGORIES, *(k for k in parts if k not in CATEGORIES))


def _clamp(x: float) -> float:
    return min(max(x, 0.0), 1.0)


def _t1_interval(study: ReplayStudy, t1: float, base_n: int) -> tuple[float, float]:
    """90% interval of T(1): a bootstrap over the measured one-GPU steps, else the replayed
    projection's interval at N=1."""
    first = study.runs[0]
    if base_n == 1 and first.world_size == 1 and first.kept.any():
        steps = first.measured[first.kept]
        lo, hi = bootstrap_mean(
            steps, 0, weighted_mean(steps, first.weights), first.strata, first.weights
        )
        return min(lo, t1), max(hi, t1)
    lo, hi = study.project(1).ci90
    return min(lo, t1), max(hi, t1)


def _headline_serial(
    scaling: dict[str, Any],
    t_inf: tuple[float, float, float],
    t1: tuple[float, float, float],
    parts: Mapping[str, float],
) -> None:
    """Make the replay's ``T_inf/T(1)`` the serial fraction (strong mode), each category's part
    its time in the replayed step at infinite N over T(1) (``replay.serial_parts``).

    ``parts``: seconds per category of T_inf; the total is their sum, so the categories add up
    to it exactly. The closed form's total and constants stay only as labelled cross-check
    fields (``closed_form_*``), never printed: one model gives one answer.
    """
    sf = scaling["serial_fraction"]
    closed = sf.get("total")
    closed_f = float(closed) if closed is not None else None
    t_point = float(sum(parts.values())) if parts else t_inf[0]
    f = _clamp(t_point / t1[0])
    lo = _clamp(t_inf[1] / t1[2]) if t1[2] > 0 else 0.0
    hi = _clamp(t_inf[2] / t1[1]) if t1[1] > 0 else 1.0
    sf["closed_form_total"] = closed_f
    # no closed-form bootstrap where the replay gives the interval (``replicates`` 0)
    boot = scaling.get("bootstrap") or {}
    sf["closed_form_ci90"] = sf.get("ci90") if boot.get("replicates", 1) else None
    sf["closed_form_by_category"] = dict(sf.get("by_category", {}))
    sf["closed_form_note"] = (
        "cross-check only: sum_c a_c / T(1) of the per-category a + b/N fits; the serial "
        "fraction reported is the replay's (total, by_category)"
    )
    sf["total"] = f
    sf["ci90"] = [min(lo, f), max(hi, f)]
    scale = f * t1[0] / t_point if t_point > 0 else 0.0  # 1 unless clamped at one
    sf["by_category"] = {c: float(parts.get(c, 0.0)) / t1[0] * scale for c in _parts_of(parts)}
    sf["t1_s"] = t1[0]
    sf["t_inf_s"] = t_point
    sf["source"] = "replay"
    scaling["amdahl_limit"] = 1.0 / f if f > 0 else None


def apply_replay(
    scaling: dict[str, Any], study: ReplayStudy, *, ops: Sequence[str] = ()
) -> list[str]:
    """Replace projections (and the curve) in ``scaling`` by replayed ones; returns warnings.

    ``ops``: law groups of top ops to replay without (``replay.levers`` ``ops``)."""
    mode = str(scaling["mode"])
    points = scaling["points"]
    base_n = int(scaling["baseline_world_size"])
    t_base = float(points[0]["step_time_s"]) * _cycle_factor(study, base_n)
    warnings: list[str] = []
    scaling["projections_source"] = "replay"
    base = (t_base, *_base_interval(study, t_base, base_n))
    for key in ("projections", "curve"):
        for p in scaling.get(key, []):
            _update(p, study, base, base_n, mode, categories=key == "projections")
    for entry in scaling.get("what_if", []):
        _replay_scenario(entry, study, base_n, mode)
    targets = [int(p["world_size"]) for p in scaling.get("projections", [])]
    # the closed form's per-type ring terms and growth terms: a labelled cross-check only
    scaling["closed_form_overheads"] = list(scaling.get("overheads", []))
    measured = int(points[-1]["world_size"]) if points else None
    scaling["overheads"] = replay_overheads(study, scaling.get("projections", []), measured)
    scaling["overheads_source"] = "replay"
    # the closed form's per-category fits and what they warned: a labelled cross-check only
    # (``models`` stays, empty: the replay's laws are per node group, in ``replay.laws``)
    scaling["closed_form_models"] = scaling.get("models", {})
    scaling["models"] = {}
    fit_notes = [w for w in scaling.get("warnings", []) if str(w).startswith(CLOSED_FORM_FIT)]
    scaling["closed_form_warnings"] = fit_notes
    scaling["warnings"] = [w for w in scaling.get("warnings", []) if w not in fit_notes]
    tw = tier_warning(study, targets)
    if tw:
        warnings.append(tw)
    cw = crossing_warning(study.base, study.mesh.at(study.base.world_size),
                          study.comm.gpus_per_node, targets)  # fmt: skip
    if cw:
        warnings.append(cw)
    warnings.extend(study.mesh.warnings)
    sw = straggler_warning(scaling.get("projections", []), study.delays)
    if sw:
        warnings.append(sw)
    t1 = t_base if base_n == 1 else study.project(1).step_time_s
    t_inf, t_inf_lo, t_inf_hi = study.serial_time_interval()
    parts = study.serial_parts()
    t_inf = float(sum(parts.values()))
    if mode == "strong" and t1 > 0:
        t1_lo, t1_hi = _t1_interval(study, t1, base_n)
        _headline_serial(scaling, (t_inf, t_inf_lo, t_inf_hi), (t1, t1_lo, t1_hi), parts)
    elif mode != "strong":
        # Gustafson's share of the smallest run's measured step: its replicated and
        # single-rank categories and its replicated compute (the optimizer) over the step,
        # as the attribution cut them; no fitted law enters (the replay reproduces that step)
        scaling["serial_fraction"]["source"] = "attribution"
    comm = study.comm
    inferred = (
        {k: v for k, v in comm.layouts.items() if v.inferred}
        if comm.gpus_per_node is not None
        else {}
    )
    scaling["replay"] = {
        "representative_ranks": {str(r.world_size): r.rank for r in study.runs},
        "replay_error": {str(r.world_size): r.replay_error for r in study.runs},
        "base_world_size": study.base.world_size,
        "validation_error": study.validation_error,
        # T_inf/T(1) is Amdahl's fraction of a fixed problem; in weak scaling the work grows
        # with N, so the ratio (about 1) says nothing: null, the closed form's share stands.
        "serial_fraction": _clamp(t_inf / t1) if t1 > 0 and mode == "strong" else None,
        "t_inf_s": t_inf,
        "t1_s": t1,
        "laws": {
            form: sum(1 for law in study.laws.values() if law.form == form)
            for form in ("a", "b/N", "a+b/N")
        },
        "gpus_per_node": comm.gpus_per_node,
        "tiers_measured": sorted(comm.measured_tiers),
        "collective_models": [
            {
                "type": k[0] or "*",
                "algorithm": k[1] or "*",
                "tier": k[2] or "*",
                "alpha_s": v.alpha_s,
                # the 90% range the intervals replay, and the rows it was fitted on
                # ("+alpha:<key>" where the latency was combined with a better-measured one)
                "alpha_range_s": [v.at(-1)[0], v.at(1)[0]],
                "bandwidth_bytes_per_s": (1 / v.inv_bw) if v.inv_bw > 0 else None,
                "source": v.source,
            }
            for k, v in sorted(comm.fits.items())
        ],
        "sharded_message_types": sorted(t for t, s in comm.sharded.items() if s),
        # each measured run's parallelism mesh, as the size laws read its groups
        "mesh": mesh_dict(study.mesh),
        # how each group's members lie among the ranks: its tier at N follows them
        "group_layouts": {
            k: {
                "stride": v.stride,
                "at_world_size": v.at_n,
                "stride_grows": v.grows,
                "inferred": v.inferred,
            }
            for k, v in sorted(comm.layouts.items())
        },
        "assumptions": [
            "host ops, runtime calls and launch latencies keep their measured time",
            "kernels and host gaps follow their group's law (a, b/N or a+b/N) fitted across N",
            "collective transfers scale by the alpha-beta model of their type, algorithm and "
            "tier; each collective starts when the slowest rank it waits for arrives (E[max] of "
            "systematic offset, host delay and device jitter): the step's first collective "
            "waits for the slowest of its group, a later collective of another group for the "
            "slowest of the groups it joins (at most N ranks), the others for their members' "
            "device jitter",
            delay_assumption(study.delays),
            *resampled_notes(int(r.kept.sum()) for r in study.runs),
            *(
                [
                    "the trace records no stream wait: the optimizer step waits for every "
                    "collective launched since the previous one (DDP, FSDP and ZeRO wait for "
                    f"their gradient reductions before it; {study.base.graph.inferred_waits} "
                    "waits inferred)"
                ]
                if study.base.graph.inferred_waits
                else []
            ),
            *(
                [
                    "a kernel ready (launched, plus the typical launch latency) before a "
                    "collective on another stream ends and starting 0-5 us after that end "
                    "waited for it: the trace records no stream wait around the collective "
                    f"({study.base.graph.held_waits} waits inferred)"
                ]
                if study.base.graph.held_waits
                else []
            ),
            *(
                [
                    "host-side (gloo) collectives run on their runloop thread after the main "
                    "thread enqueues them; a main-thread python gap spanning one's end waits "
                    f"for it ({study.base.host_waits} waits inferred per run window)"
                ]
                if study.base.host_waits
                else []
            ),
            *(
                [
                    "the autograd engine's backward thread starts each backward when the main "
                    "thread hands it over and the main thread's wait in backward() ends when it "
                    f"is done ({study.base.backward_waits} waits inferred per run window)"
                ]
                if study.base.backward_waits
                else []
            ),
            *(
                [
                    "an op reading a tensor that an op on another host thread wrote starts "
                    "after that op ends, as the execution trace paired with the rank records "
                    f"({study.base.graph.et_waits} dependencies placed as edges)"
                ]
                if study.base.graph.et_waits
                else []
            ),
            *(
                [
                    "process group sizes at N: "
                    + ", ".join(
                        f"group {k} {'grows like N' if v else 'stays as measured'}"
                        for k, v in sorted(comm.proportional.items())
                    )
                ]
                if comm.proportional
                else []
            ),
            *([tw] if tw else []),
            *(
                [
                    f"topology tiers follow each process group's member ranks (numbered node "
                    f"by node, {comm.gpus_per_node} per node)"
                    + (
                        "; layouts inferred from one run's member lists: "
                        + ", ".join(v.describe(k) for k, v in sorted(inferred.items()))
                        if inferred
                        else ""
                    )
                ]
                if comm.gpus_per_node is not None and comm.layouts
                else []
            ),
            *comm.assumptions,
            *(
                ["no inter-node collective measured"]
                if comm.gpus_per_node is not None and INTER not in comm.measured_tiers
                else []
            ),
        ],
    }
    # what one CUDA graph launch per step would buy (the launch-bound lever reads it)
    scaling["replay"]["cuda_graph"] = graph_capture_gain(study, [base_n, *targets])
    # what fixing each category (or every rank's arrival) buys: the findings' levers read it
    scaling["replay"]["levers"] = lever_gains(study, [base_n, *targets], mode=mode, ops=ops)
    return warnings
