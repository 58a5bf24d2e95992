"""The pipeline bubble finding's advice: what shrinks the fill and drain, given the schedule the
job already runs (an interleaved schedule is no advice to a job that interleaves)."""

from __future__ import annotations

from typing import Any

from tracescale.findings.common import d
from tracescale.report.fmt import num


def virtual_chunks(study: dict[str, Any]) -> int:
    """Model chunks per rank of the largest run's pipeline (``virtual_chunks`` of its mesh's PP
    dimension; 1 for plain 1F1B or where not read)."""
    runs = d(d(d(d(study.get("scaling")).get("replay")).get("mesh")).get("runs"))
    last = max(runs, key=lambda n: int(n), default=None)
    dims = runs.get(last, []) if last is not None else []
    pp = [x for x in dims if isinstance(x, dict) and x.get("dimension") == "PP"]
    return int(num(pp[0].get("virtual_chunks")) or 1) if pp else 1


def bubble_advice(virtual: int) -> str:
    """What shrinks the bubble: an interleaved schedule is only advice where the job does not
    already run one (it divides the fill and drain by its chunks, at as many more send/recv)."""
    more = "More microbatches per step (smaller microbatches or a larger global batch)"
    if virtual > 1:
        return (
            f"The schedule already interleaves {virtual} model chunks per stage; {more[0].lower()}"
            f"{more[1:]} or fewer stages shrink it (more chunks would add send/recv per "
            "microbatch)."
        )
    return f"{more}, an interleaved schedule (virtual pipeline stages) or fewer stages shrink it."
