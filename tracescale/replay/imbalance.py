"""A fitted replay study + its projections in -> the waits for the slowest rank as overhead lines.

Mixture-of-experts layers exchange tokens by all-to-all: every rank waits there for the rank
whose experts got the most tokens this step. In the replay that wait is part of the slowest
rank's lateness at each collective (``split_durations``' waits, drawn from the arrival spread
measured at that position and grown with the group: a larger group draws a larger maximum).
The waits at all-to-all collectives are reported on their own line, expert load imbalance,
apart from the transfers and from the waits at the other collectives; what other per-rank
jitter reaches an all-to-all is in it too, since a trace cannot tell the two apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tracescale.replay.project import ReplayStudy
from tracescale.replay.serial_parts import all_to_all_rows


def all_to_all_wait_s(study: ReplayStudy, n: int) -> float:
    """Seconds per step the representative rank waits for the latest rank at all-to-alls, at
    ``n`` ranks (0 without all-to-all collectives)."""
    coll = study.base.coll
    rows = all_to_all_rows(coll)
    if not rows.any():
        return 0.0
    _, pre, _ = study.split_durations(n)
    nodes = coll["node"].to_numpy()[rows]
    steps = max(int(np.isfinite(study.base.measured).sum()), 1)
    return float(pre[nodes].sum()) / steps


def _line(n: int, source: str, seconds: float, what: str) -> dict[str, Any]:
    return {
        "world_size": n,
        "category": "communication",
        "source": source,
        "seconds": seconds,
        "text": f"at N={n}, {what} adds {seconds * 1e3:.3g} ms per step",
    }


def wait_overheads(
    study: ReplayStudy, projections: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The ``overheads`` lines of each projection's wait for the slowest rank
    (``rank_to_rank_variability_s``): its part at all-to-alls as expert load imbalance (set as
    the projection's ``expert_imbalance_s``), the rest as rank-to-rank variability."""
    out = []
    for p in projections:
        wait = float(p.get("rank_to_rank_variability_s", 0.0))
        n = int(p["world_size"])
        experts = min(all_to_all_wait_s(study, n), wait) if wait > 1e-9 else 0.0
        p["expert_imbalance_s"] = experts
        if experts > 1e-9:
            what = "waiting at the all-to-all for the busiest expert rank (expert load imbalance)"
            out.append(_line(n, "expert load imbalance", experts, what))
        if wait - experts > 1e-9:
            what = "waiting for the slowest rank (rank-to-rank variability)"
            out.append(_line(n, "rank-to-rank variability", wait - experts, what))
    return out
