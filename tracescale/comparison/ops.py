"""Compare by op: two runs' top contributors in, per category the ops that changed most out.

Each run carries, per category, its largest ops with their mean seconds per step and their
spread over steps (``runs[].top_ops``). A change is significant when it exceeds the 90%
two-sided bound of the difference of two means, ``1.645 * sqrt(sd_b^2/n_b + sd_a^2/n_a)``,
and 1% of the before step (so a nanosecond-quiet op is not "significantly" slower by 1 µs).
An op missing from one side's list is "added"/"removed" when that side's list for the
category is complete (shorter than the kept maximum); otherwise it may merely have fallen below
the list, and reads "new in top"/"out of top" with the missing side unknown.
"""

from __future__ import annotations

import math
from typing import Any

from tracescale.classify.top_ops import KEEP_PER_RUN
from tracescale.report.fmt import num

#: Ops reported per category and run pair.
CHANGES_PER_CATEGORY = 5
Z90 = 1.645
#: Changes below this share of the before step time are never significant.
MIN_STEP_SHARE = 0.01


def _d(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def _entries(run: dict[str, Any], cat: str) -> dict[str, dict[str, Any]]:
    return {
        str(e.get("name")): e
        for e in (_d(run.get("top_ops")).get(cat) or [])
        if isinstance(e, dict) and e.get("name") is not None
    }


def _se2(e: dict[str, Any] | None) -> float:
    if e is None:
        return 0.0
    sd = num(e.get("step_sd_s")) or 0.0
    n = max(int(num(e.get("steps")) or 1), 1)
    return sd * sd / n


def op_changes(rb: dict[str, Any], ra: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Per category, the ops whose seconds per step changed most (largest change first)."""
    step = num(_d(rb.get("step_time_s")).get("mean")) or 0.0
    cats = list(dict.fromkeys([*_d(rb.get("top_ops")), *_d(ra.get("top_ops"))]))
    out: dict[str, list[dict[str, Any]]] = {}
    for cat in cats:
        before, after = _entries(rb, cat), _entries(ra, cat)
        complete_b = len(before) < KEEP_PER_RUN
        complete_a = len(after) < KEEP_PER_RUN
        rows: list[dict[str, Any]] = []
        for name in dict.fromkeys([*before, *after]):
            eb, ea = before.get(name), after.get(name)
            sb = num(eb.get("seconds")) if eb else None
            sa = num(ea.get("seconds")) if ea else None
            delta: float | None
            if eb is None:
                change, delta = ("added", sa) if complete_b else ("new in top", None)
            elif ea is None:
                change, delta = ("removed", -(sb or 0.0)) if complete_a else ("out of top", None)
            else:
                delta = (sa or 0.0) - (sb or 0.0)
                change = "slower" if delta > 0 else "faster" if delta < 0 else "unchanged"
            bound = Z90 * math.sqrt(_se2(eb) + _se2(ea))
            significant = (
                delta is not None and abs(delta) > bound and abs(delta) >= MIN_STEP_SHARE * step
            )
            rows.append(
                {
                    "name": name,
                    "before_s": sb,
                    "after_s": sa,
                    "delta_s": delta,
                    "change": change,
                    "significant": bool(significant),
                }
            )
        rows = [r for r in rows if r["change"] != "unchanged"]
        rows.sort(key=lambda r: (-abs(num(r["delta_s"]) or 0.0), str(r["name"])))
        if rows:
            out[cat] = rows[:CHANGES_PER_CATEGORY]
    return out


def biggest_op_change(changes: dict[str, list[dict[str, Any]]]) -> dict[str, Any] | None:
    """The significant op change with the largest seconds per step, with its category."""
    best: dict[str, Any] | None = None
    for cat, rows in changes.items():
        for r in rows:
            big = best is None or abs(r["delta_s"] or 0.0) > abs(best["delta_s"])
            if r["significant"] and r["delta_s"] is not None and big:
                best = {**r, "category": cat}
    return best
