"""Shared reading of a study dict for the findings: runs, projections, plain-words numbers."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, TypedDict

from tracescale.report.fmt import label, num, secs
from tracescale.report.names import short_name

#: Gains below this (steps 3% faster) are not worth a reader's attention as a finding.
MIN_GAIN = 1.03
#: Single-run findings never name a world size beyond this multiple of the measured one
#: without saying it is an assumption.
SAFE_EXTRAPOLATION = 4.0
#: Host calls that launch GPU work: when they own host time, the host is launch-bound.
LAUNCH_CALL = re.compile(r"^(cu|cuda|hip|hipExt)(Graph)?Launch|LaunchKernel", re.IGNORECASE)


class Finding(TypedDict):
    """One finding: the sentence, the category it is about (None: the whole step), its number.

    ``value`` is the finding's own figure: for a lever, the speedup fixing it buys (``gain``);
    ``kind`` says which family it is (lever, op, straggler, slowdown, context, setup).
    """

    text: str
    category: str | None
    value: float
    kind: str


def d(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def lst(x: Any) -> list[Any]:
    return x if isinstance(x, list) else []


def mean_step(run: dict[str, Any]) -> float:
    return num(d(run.get("step_time_s")).get("mean")) or 0.0


def cat_time(run: dict[str, Any], cat: str) -> float:
    return num(d(run.get("breakdown_s")).get(cat)) or 0.0


def top_ops(run: dict[str, Any], cat: str) -> list[dict[str, Any]]:
    return [e for e in lst(d(run.get("top_ops")).get(cat)) if isinstance(e, dict)]


def is_launch_bound(run: dict[str, Any]) -> bool:
    """Host time mostly spent launching GPU work (kernel launch calls own its largest part)."""
    ops = top_ops(run, "host")
    launch = sum(num(e.get("share")) or 0.0 for e in ops if LAUNCH_CALL.search(str(e["name"])))
    return bool(ops) and (launch >= 0.25 or bool(LAUNCH_CALL.search(str(ops[0]["name"]))))


def cat_label(run: dict[str, Any], cat: str) -> str:
    """The category's name in a finding (host time that is kernel launches says so)."""
    if cat == "host" and is_launch_bound(run):
        return "Host launch overhead"
    return label(cat)


def own_basis(run: dict[str, Any], cat: str) -> float:
    """The category's seconds per rank-step on the ranks' own timelines: what op shares are of."""
    for e in top_ops(run, cat):
        v = num(e.get("category_s"))
        if v:
            return v
    return 0.0


def basis_clause(run: dict[str, Any], cat: str, lead: str = " of its ") -> str:
    """' of its 3.7 ms on the ranks' own timelines (incl. waits)' when op shares are of a
    different quantity than the category figure (cause attribution moved waits), else ''."""
    own, attributed = own_basis(run, cat), cat_time(run, cat)
    if own <= 0 or abs(own - attributed) <= 0.1 * max(own, attributed):
        return ""
    why = "incl. waits" if own > attributed else "without the waits it causes on other ranks"
    where = f" of {label(cat).lower()}" if lead == "the " else ""
    return f"{lead}{secs(own)}{where} on the ranks' own timelines ({why})"


def names_clause(run: dict[str, Any], cat: str, limit: int = 2) -> str:
    """', mostly `op` (64%) and `op2` (20%)' for a category's top contributors; when the
    shares are of the category on the ranks' own timelines and that differs from the category's
    attributed figure, the clause says of what they are."""
    if cat == "host" and not top_ops(run, cat) and cat_time(run, cat) > 0:
        # No traced op owns any of it (host time outside every op): say so, not nothing.
        return ", not inside any traced op (untraced Python or CPU work between ops)"
    ops = [e for e in top_ops(run, cat) if (num(e.get("share")) or 0.0) >= 0.05][:limit]
    if not ops:
        return ""
    parts = [f"`{short_name(str(e['name']))}` ({(num(e.get('share')) or 0.0):.0%})" for e in ops]
    return ", mostly " + " and ".join(parts) + basis_clause(run, cat)


@dataclass(frozen=True)
class Target:
    """Where a lever is evaluated: the largest requested N (projected) or the largest measured."""

    world_size: int
    step_s: float
    breakdown: dict[str, float]
    projected: bool
    #: Seconds per step the step waits for the slowest rank (inside communication), when the
    #: replay measured it: rank-to-rank variability, a lever of its own.
    variability_s: float = 0.0

    def hideable_s(self) -> float:
        """Communication that hiding under compute could remove: at most the compute (and
        copies) the step has to hide it under, and never the waiting for the slowest rank."""
        comm = max(self.breakdown.get("communication", 0.0) - self.variability_s, 0.0)
        cover = self.breakdown.get("compute", 0.0) + self.breakdown.get("memcpy", 0.0)
        return min(comm, cover)


def target_of(study: dict[str, Any], last: dict[str, Any]) -> Target:
    """The largest requested projection, else the last run.

    World sizes the user asked for (``--project``, kept as ``requested_world_sizes``) are
    honoured as asked; the default targets reach 8x the largest measured N, and there a lever
    is read only up to :data:`SAFE_EXTRAPOLATION` times it (less extrapolation, same rule as
    for a named optimum).
    """
    projs = [p for p in lst(d(study.get("scaling")).get("projections")) if isinstance(p, dict)]
    projs = [p for p in projs if num(p.get("step_time_s")) and num(p.get("world_size"))]
    if not study.get("requested_world_sizes"):
        limit = SAFE_EXTRAPOLATION * (num(last.get("world_size")) or 1.0)
        near = [p for p in projs if (num(p.get("world_size")) or 0.0) <= limit]
        projs = near or projs[:1]
    if projs:
        p = max(projs, key=lambda q: num(q.get("world_size")) or 0.0)
        bd = {str(k): num(v) or 0.0 for k, v in d(p.get("breakdown_s")).items()}
        var = num(p.get("rank_to_rank_variability_s")) or 0.0
        return Target(
            int(num(p.get("world_size")) or 0), num(p.get("step_time_s")) or 0.0, bd, True, var
        )
    bd = {str(k): num(v) or 0.0 for k, v in d(last.get("breakdown_s")).items()}
    return Target(int(num(last.get("world_size")) or 0), mean_step(last), bd, False)


def speedup_text(gain: float, before: float, after: float) -> str:
    """'1.40x faster (120.0 ms -> 85.7 ms per step)'."""
    return f"{gain:.2f}x faster ({secs(before)} → {secs(after)} per step)"
