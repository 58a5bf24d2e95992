"""Communication that one traced rank cannot explain: a study's largest run in, one context
finding out.

Why: a job profiled on a few of its ranks (one rank file of an 8-GPU job is common) shows its
collectives taking most of the step, yet removing their transfers buys little in the replay:
the kernels' time is waiting for ranks whose traces are not there, and which rank was late,
and why, is in those traces. Saying only the small levers left would let the biggest share of
the step go unmentioned; the remedy is to profile every rank.
"""

from __future__ import annotations

from typing import Any

from tracescale.findings.common import MIN_GAIN, Finding, cat_time, lst, mean_step
from tracescale.findings.levers import replayed_gain
from tracescale.report.fmt import num, secs, unit_of

#: Communication from this share of the step up is worth the finding.
MIN_SHARE = 0.25


def unseen_ranks_finding(
    study: dict[str, Any], runs: list[dict[str, Any]]
) -> list[tuple[float, Finding]]:
    """Where the largest run traced fewer ranks than its world size, its communication is a
    quarter of the step or more, and the replay finds little to gain removing transfers."""
    last = runs[-1]
    world = int(num(last.get("world_size")) or 0)
    traced = len(lst(last.get("ranks")))
    step = mean_step(last)
    comm = cat_time(last, "communication")
    if not 0 < traced < world or step <= 0 or comm < MIN_SHARE * step:
        return []
    gain = replayed_gain(study, world, "communication")
    if gain is not None and gain >= MIN_GAIN:
        return []  # the communication lever speaks for it
    share = comm / step
    count = unit_of(study).of
    replayed = "" if gain is None else f" (replayed: {gain:.2f}x)"
    text = (
        f"Communication takes {secs(comm)} per step ({share:.0%}) at {count(world)}, but "
        f"removing its transfers buys little{replayed}: the collectives mostly wait for ranks "
        f"this study did not trace ({traced} of {world}). Profile every rank to see which one "
        "is late and why."
    )
    finding = Finding(text=text, category="communication", value=share, kind="context")
    return [(1.0 + 0.1 * share, finding)]
