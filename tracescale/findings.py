"""The few facts a reader should take away from a study, in plain words with their numbers.

Pure: a study dict (one element of the document's ``studies``) in, a ranked list out. The study
builder stores the result under the study's ``"findings"`` key; renderers only print it.
Each candidate is scored by the share of the step time it explains, so the ranking follows what
costs the most time at the largest measured world size; causes (a serial category, exposed
communication, a straggler) outrank symptoms (low efficiency), which fill in when causes are few.
"""

from __future__ import annotations

from typing import Any, TypedDict

from tracescale.report.fmt import label, num, secs

#: Parts under 2% of the step are not worth a reader's attention as a finding.
MIN_SHARE = 0.02


class Finding(TypedDict):
    """One finding: the sentence, the category it is about (None: the whole step), its number."""

    text: str
    category: str | None
    value: float


def _d(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def _l(x: Any) -> list[Any]:
    return x if isinstance(x, list) else []


def _gpus(n: Any) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def _mean(run: dict[str, Any]) -> float:
    return num(_d(run.get("step_time_s")).get("mean")) or 0.0


def _bd(run: dict[str, Any], cat: str) -> float:
    return num(_d(run.get("breakdown_s")).get(cat)) or 0.0


def _serial(study: dict[str, Any], runs: list[dict[str, Any]]) -> list[tuple[float, Finding]]:
    """Categories with a serial part: how much of the largest run they take and the cap they set."""
    last, first = runs[-1], runs[0]
    n, t = last.get("world_size"), _mean(last)
    by_cat = _d(_d(_d(study.get("scaling")).get("serial_fraction")).get("by_category"))
    out = []
    for cat, f in by_cat.items():
        fc = num(f)
        if not fc or fc < MIN_SHARE or t <= 0:
            continue
        share = _bd(last, cat) / t
        cap = 1.0 / fc
        flat = len(runs) == 1 or _bd(last, cat) >= 0.7 * _bd(first, cat) > 0
        if share < MIN_SHARE and (flat or study.get("mode") == "weak"):
            continue
        if study.get("mode") == "weak":
            text = (
                f"{label(cat)} takes {share:.0%} of the step at {_gpus(n)} and is repeated on "
                f"every rank: it counts toward the serial share of the scaled speedup"
            )
            out.append((share, Finding(text=text, category=cat, value=share)))
        elif flat:
            assumed = "is assumed not to shrink" if len(runs) == 1 else "does not shrink"
            text = (
                f"{label(cat)} takes {share:.0%} of the step at {_gpus(n)} and {assumed} "
                f"with more GPUs: alone it caps the speedup at {cap:.1f}x"
            )
            out.append((share, Finding(text=text, category=cat, value=share)))
        else:
            text = (
                f"{label(cat)} has a serial part worth {fc:.0%} of the one-GPU step: "
                f"alone it caps the speedup at {cap:.1f}x"
            )
            out.append((fc, Finding(text=text, category=cat, value=fc)))
    return out


def _communication(
    study: dict[str, Any], runs: list[dict[str, Any]]
) -> list[tuple[float, Finding]]:
    """How much communication is hidden under compute and how the exposed part grows."""
    last = runs[-1]
    n, t = last.get("world_size"), _mean(last)
    exposed = _bd(last, "communication")
    hidden = num(last.get("overlapped_communication_s")) or 0.0
    if exposed + hidden <= 0 or t <= 0:
        return []
    by_coll = {k: num(v) or 0.0 for k, v in _d(last.get("communication_by_collective_s")).items()}
    name = label(max(by_coll, key=lambda k: by_coll[k])) if by_coll else "Communication"
    text = f"{name} is {hidden / (hidden + exposed):.0%} overlapped at {_gpus(n)}; "
    projs = [p for p in _l(_d(study.get("scaling")).get("projections")) if isinstance(p, dict)]
    score, value = exposed / t, exposed
    far = projs[-1] if projs else None
    far_exposed = num(_d(far.get("breakdown_s")).get("communication")) if far else None
    if far is not None and far_exposed is not None:
        verb = "grows to" if far_exposed > exposed else "stays at"
        at = _gpus(far.get("world_size"))
        text += f"the exposed part {verb} {secs(far_exposed)} per step at {at}"
        far_t = num(far.get("step_time_s"))
        if far_t:
            score = max(score, far_exposed / far_t)
        value = far_exposed
    else:
        text += f"the exposed part is {secs(exposed)} per step ({exposed / t:.0%} of the step)"
    return [(score, Finding(text=text, category="communication", value=value))]


def _efficiency(study: dict[str, Any]) -> list[tuple[float, Finding]]:
    """Efficiency at the largest measured world size."""
    sc = _d(study.get("scaling"))
    points = [p for p in _l(sc.get("points")) if isinstance(p, dict)]
    if len(points) < 2:
        return []
    p = max(points, key=lambda q: num(q.get("world_size")) or 0.0)
    e, s = num(p.get("efficiency")), num(p.get("speedup"))
    if e is None or s is None:
        return []
    n, base = p.get("world_size"), sc.get("baseline_world_size")
    kind = "Weak-scaling (throughput) efficiency" if study.get("mode") == "weak" else "Efficiency"
    verb = "falls to" if e < 0.9 else "stays at"
    text = f"{kind} {verb} {e:.0%} at {_gpus(n)} (speedup {s:.1f}x over {_gpus(base)})"
    return [(0.1 * (1.0 - e), Finding(text=text, category=None, value=e))]


def _optimum(study: dict[str, Any]) -> list[tuple[float, Finding]]:
    """The world size beyond which steps get slower, when the model has one."""
    opt = num(_d(study.get("scaling")).get("optimal_world_size"))
    if opt is None:
        return []
    text = f"Step time is lowest at {_gpus(int(opt))}: beyond it, more GPUs make each step slower"
    return [(0.9, Finding(text=text, category=None, value=opt))]


def _straggler(runs: list[dict[str, Any]]) -> list[tuple[float, Finding]]:
    """The slowest rank of the largest run, when it is clearly slower than the mean."""
    last = runs[-1]
    ranks = [r for r in _l(last.get("per_rank")) if isinstance(r, dict)]
    timed = [r for r in ranks if num(r.get("step_time_s")) is not None]
    t = _mean(last)
    if len(timed) < 2 or t <= 0:
        return []
    slow = max(timed, key=lambda r: num(r.get("step_time_s")) or 0.0)
    ts = num(slow.get("step_time_s")) or 0.0
    over = (ts - t) / t
    if over < 0.05:
        return []
    sb = _d(slow.get("breakdown_s"))
    grew = {c: (num(v) or 0.0) - _bd(last, c) for c, v in sb.items()}
    cat = max(grew, key=lambda c: grew[c]) if grew else None
    at = _gpus(last.get("world_size"))
    text = (
        f"Rank {slow.get('rank')} is {over:.0%} slower than the average rank at {at} "
        f"({secs(ts)} vs {secs(t)} per step): the others wait for it"
    )
    if cat is not None and grew[cat] > 0:
        text += f"; most of the extra time is {label(cat).lower()}"
    return [(over, Finding(text=text, category=cat, value=over))]


def _what_if(study: dict[str, Any]) -> list[tuple[float, Finding]]:
    """The what-if scenario that buys the most speedup at the largest projected world size."""
    sc = _d(study.get("scaling"))
    projs = {p.get("world_size"): p for p in _l(sc.get("projections")) if isinstance(p, dict)}
    best: tuple[float, Finding] | None = None
    for e in _l(sc.get("what_if")):
        if not isinstance(e, dict):
            continue
        for p in _l(e.get("projections")) if "projections" in e else [e]:
            base = projs.get(_d(p).get("world_size"))
            s0, s1 = num(_d(base).get("speedup")), num(_d(p).get("speedup"))
            if not s0 or s1 is None or s1 <= s0:
                continue
            n = _gpus(_d(p).get("world_size"))
            text = (
                f"With {e.get('label')}, the speedup at {n} would be {s1:.1f}x instead of {s0:.1f}x"
            )
            gain = 0.2 * (s1 - s0) / s1
            if best is None or gain > best[0]:
                best = (gain, Finding(text=text, category=None, value=s1))
    return [best] if best else []


def top_findings(study: dict[str, Any], limit: int = 3) -> list[Finding]:
    """The ``limit`` most important findings of one study, most important first."""
    runs = sorted(
        (r for r in _l(study.get("runs")) if isinstance(r, dict)),
        key=lambda r: num(r.get("world_size")) or 0.0,
    )
    if not runs:
        return []
    scored = _serial(study, runs) + _communication(study, runs) + _efficiency(study)
    scored += _optimum(study) + _straggler(runs) + _what_if(study)
    scored.sort(key=lambda sf: -sf[0])
    out: list[Finding] = []
    seen: set[tuple[str, str | None]] = set()
    for _, f in scored:
        key = (f["text"].split(" ", 1)[0], f["category"])
        if key in seen:
            continue
        seen.add(key)
        out.append(f)
        if len(out) == limit:
            break
    return out


def document_findings(doc: dict[str, Any], limit: int = 3) -> list[list[Finding]]:
    """Findings of every study of an analyze document, in study order."""
    return [top_findings(s, limit) for s in _l(doc.get("studies")) if isinstance(s, dict)]
