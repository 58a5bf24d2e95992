"""Findings: a study dict in, the few facts a reader should act on out, biggest lever first.

Pure: a study dict (one element of the document's ``studies``) in, a ranked list out. The study
builder stores the result under the study's ``"findings"`` key; renderers only print it.
Findings are ranked by what fixing them buys (the speedup at the largest requested world size,
see :mod:`tracescale.findings.levers`); a job that gets slower with more ranks says so first,
and context (efficiency, the model's optimum) fills in when levers are few.
"""

from __future__ import annotations

import math
from typing import Any

from tracescale.findings.common import (
    SAFE_EXTRAPOLATION,
    Finding,
    cat_time,
    d,
    lst,
    mean_step,
    speedup_text,
)
from tracescale.findings.levers import (
    bubble_lever,
    category_levers,
    op_levers,
    replayed_gain,
    variability_lever,
)
from tracescale.findings.recompute import recompute_finding
from tracescale.findings.unseen_ranks import unseen_ranks_finding
from tracescale.findings.warmup import setup_finding
from tracescale.report.bounds import optimum_of
from tracescale.report.fmt import Unit, label, num, secs, unit_of

__all__ = ["Finding", "document_findings", "top_findings"]

#: The sentence a job that runs slower with more ranks gets, word for word.
SLOWDOWN = "This job slows down with more ranks: overheads grow faster than the work shrinks"


def _slowdown(study: dict[str, Any], runs: list[dict[str, Any]]) -> list[tuple[float, Finding]]:
    """Measured speedup below one, or fitted constants above the measured step: say it plainly."""
    if len(runs) < 2 or study.get("mode") == "weak":
        return []
    sc = d(study.get("scaling"))
    points = [p for p in lst(sc.get("points")) if isinstance(p, dict)]
    slow = [p for p in points if (num(p.get("speedup")) or 1.0) < 1.0]
    sf = d(sc.get("serial_fraction"))
    if sf.get("source") == "replay":  # the replayed step at infinite N: its serial time
        constants = num(sf.get("t_inf_s")) or 0.0
    else:
        constants = sum(
            num(d(m.get("params")).get("a")) or 0.0
            for c, m in d(sc.get("models")).items()
            if isinstance(m, dict) and c != "communication"
        )
    if not slow and constants <= mean_step(runs[-1]):
        return []
    first, last = runs[0], runs[-1]
    count = unit_of(study).of
    growth = {c: cat_time(last, c) - cat_time(first, c) for c in d(last.get("breakdown_s"))}
    cat = max(growth, key=lambda c: growth[c]) if growth else None
    text = SLOWDOWN
    if slow:
        p = min(slow, key=lambda q: num(q.get("speedup")) or 0.0)
        text += f" (speedup {num(p.get('speedup')) or 0.0:.2f}x at {count(p.get('world_size'))})"
    else:
        text += f" (the part that does not shrink, {secs(constants)}, exceeds the measured step)"
    if cat is not None and growth[cat] > 0:
        text += (
            f". {label(cat)} grows the most: {secs(cat_time(first, cat))} at "
            f"{count(first.get('world_size'))} -> {secs(cat_time(last, cat))} at "
            f"{count(last.get('world_size'))} per step"
        )
    return [
        (
            100.0,
            Finding(
                text=text + ".", category=cat, value=growth.get(cat or "", 0.0), kind="slowdown"
            ),
        )
    ]


def _replayed_straggler(
    study: dict[str, Any], run: dict[str, Any], s: dict[str, Any]
) -> float | None:
    """The replay's gain with the straggler's kernels at the median rank's speed, where the
    straggler is late in compute and is the rank the replay follows at that N."""
    if s.get("category") != "compute":
        return None
    n = int(num(run.get("world_size")) or 0)
    rep = d(d(study.get("scaling")).get("replay"))
    if str(d(rep.get("representative_ranks")).get(str(n))) != str(s.get("rank")):
        return None
    gain = replayed_gain(study, n, "straggler")
    return gain if gain is not None and gain > 1.0 else None


def _stragglers(
    study: dict[str, Any], runs: list[dict[str, Any]], unit: Unit
) -> list[tuple[float, Finding]]:
    """The late rank of the largest run that has one, and what bringing it in line buys.

    Where the straggler is late in compute and is the rank the replay follows, the gain is
    the step replayed with its kernels at the median rank's speed. Otherwise: bringing it in
    line removes its extra own time, and may remove more: the waits it had for others' work
    (a rank-0 reduction) overlap what the others then do anyway. So the step after is a
    range: at most the step less its extra time, at least the median rank's own time (its
    step without waiting for others); the finding says both ends and ranks itself by the
    cautious one.
    """
    for run in reversed(runs):
        found = [s for s in lst(run.get("stragglers")) if isinstance(s, dict)]
        t = mean_step(run)
        if not found or t <= 0:
            continue
        s = found[0]
        extra = num(s.get("extra_s")) or 0.0
        after = t - extra
        if after <= 0:
            continue
        gain = t / after
        floor = num(s.get("median_own_s"))
        replayed = _replayed_straggler(study, run, s)
        if replayed is not None:  # its kernels at the median rank's speed, replayed
            gain, after, floor = replayed, t / replayed, None
        cat = str(s.get("category")) if s.get("category") else None
        text = (
            f"Rank {s.get('rank')} is a straggler at {unit.of(run.get('world_size'))}: its own "
            f"work takes {secs(extra)} more per step than the median rank's"
        )
        if cat:
            text += f", mostly {label(cat).lower()}"
        text += "; the other ranks wait for it"
        others = [str(x.get("rank")) for x in found[1:4]]
        if others:
            text += f" (also late: rank{'s' if len(others) > 1 else ''} {', '.join(others)})"
        if floor is not None and 0 < floor < 0.99 * after:
            text += (
                f". In line with the median rank, steps would be {gain:.2f}x to "
                f"{t / floor:.2f}x faster ({secs(t)} → {secs(floor)} to {secs(after)} per step: "
                "at least the median rank's own work, at most the step less its extra)."
            )
        else:
            text += ". In line with the median rank, steps would be "
            text += f"{speedup_text(gain, t, after)}"
            text += " (replayed with its kernels at the median rank's speed)." if replayed else "."
        return [(gain, Finding(text=text, category=cat, value=gain, kind="straggler"))]
    return []


def _efficiency(study: dict[str, Any]) -> list[tuple[float, Finding]]:
    """Efficiency at the largest measured world size (context, not a lever)."""
    sc = d(study.get("scaling"))
    points = [p for p in lst(sc.get("points")) if isinstance(p, dict)]
    if len(points) < 2:
        return []
    p = max(points, key=lambda q: num(q.get("world_size")) or 0.0)
    e, s = num(p.get("efficiency")), num(p.get("speedup"))
    if e is None or s is None or s < 1.0:
        return []
    n, base = p.get("world_size"), sc.get("baseline_world_size")
    kind = "Weak-scaling (throughput) efficiency" if study.get("mode") == "weak" else "Efficiency"
    verb = "falls to" if e < 0.9 else "stays at"
    count = unit_of(study).of
    text = f"{kind} {verb} {e:.0%} at {count(n)} (speedup {s:.1f}x over {count(base)})"
    return [(1.0 + 0.01 * (1.0 - e), Finding(text=text, category=None, value=e, kind="context"))]


def _optimum(study: dict[str, Any], runs: list[dict[str, Any]]) -> list[tuple[float, Finding]]:
    """The best world size of the printed projections (see ``optimum_of``), labelled as an
    extrapolation or an assumption as it is; weak scaling speaks of throughput."""
    sc = d(study.get("scaling"))
    opt = optimum_of(study)
    if opt is None:
        return []
    n_max = num(runs[-1].get("world_size")) or 1.0
    unit = unit_of(study)
    where = unit.of(int(opt))
    if len(runs) == 1 or sc.get("assumed"):
        text = (
            f"If the parallel part scales as 1/N (an assumption: one run cannot show it), "
            f"step time would be lowest at {where}."
        )
    elif opt > SAFE_EXTRAPOLATION * n_max:
        text = (
            f"The model puts the lowest step time at {where}, {opt / n_max:.0f}x beyond the "
            f"largest measured N: an extrapolation, not a measurement."
        )
    else:
        text = (
            f"Step time is lowest at {where}: beyond it, more {unit.plural} make each step slower."
        )
    if study.get("mode") == "weak":
        text = text.replace("the lowest step time", "the highest throughput")
        text = text.replace("step time would be lowest", "throughput would be highest")
        text = text.replace(
            "Step time is lowest at", "Throughput (samples per second) is highest at"
        )
        text = text.replace("make each step slower", "lower throughput")
    return [(1.02, Finding(text=text, category=None, value=opt, kind="context"))]


#: An op's replayed gain at least this share of its category's lever's (on the log scale) is
#: what that lever buys: the category's finding would restate the op's.
_EXPLAINS = 0.8


def _without_restated(scored: list[tuple[float, Finding]]) -> list[tuple[float, Finding]]:
    """``scored`` less each category lever that one of its own top ops' findings explains.

    Compute's "its part that does not shrink made parallel" and "without the optimizer's
    kernels" are one lever when those kernels are that part: the op's finding names the op and
    stays; the category's would say the same again one line below.
    """
    ops = {f["category"]: g for g, f in scored if f["kind"] == "op"}
    explained = {
        cat
        for g, f in scored
        if f["kind"] == "lever"
        and (cat := f["category"]) in ops
        and g > 1.0
        and math.log(max(ops[cat], 1.0)) >= _EXPLAINS * math.log(g)
    }
    return [(g, f) for g, f in scored if not (f["kind"] == "lever" and f["category"] in explained)]


def top_findings(study: dict[str, Any], limit: int = 5) -> list[Finding]:
    """The ``limit`` most important findings of one study, biggest lever first."""
    runs = sorted(
        (r for r in lst(study.get("runs")) if isinstance(r, dict)),
        key=lambda r: num(r.get("world_size")) or 0.0,
    )
    if not runs or mean_step(runs[-1]) <= 0:
        return []
    mode = str(study.get("mode") or "strong")
    scored = _slowdown(study, runs) + category_levers(study, runs, mode)
    scored += variability_lever(study, runs) + bubble_lever(study, runs)
    scored += op_levers(study, runs, mode) + _stragglers(study, runs, unit_of(study))
    scored += _efficiency(study) + _optimum(study, runs) + recompute_finding(runs)
    scored += unseen_ranks_finding(study, runs)
    scored = _without_restated(scored)
    setup = setup_finding(runs, unit_of(study))
    if setup:  # the step measured set-up: its category's levers would be about that
        cat = setup[0][1]["category"]
        scored = setup + [(g, f) for g, f in scored if f["category"] != cat]
    scored.sort(key=lambda sf: -sf[0])
    out = [f for _, f in scored[:limit]]
    # A late rank is a fault, not a tuning lever: it is always named, in the last slot if its
    # gain alone would not rank it (its place among the others stays the gain's).
    late = [f for _, f in scored[limit:] if f["kind"] == "straggler"]
    if late and out:
        out[-1] = late[0]
    return out


def document_findings(doc: dict[str, Any], limit: int = 5) -> list[list[Finding]]:
    """Findings of every study of an analyze document, in study order."""
    return [top_findings(s, limit) for s in lst(doc.get("studies")) if isinstance(s, dict)]
