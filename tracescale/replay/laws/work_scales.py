"""How a run's host gaps and kernels, in total, scale from its N to another, and the runs'
host delays pooled in the largest run's units (what the slowest-rank waits draw from)."""

from __future__ import annotations

from collections.abc import Sequence

from tracescale.replay.engine.run import RunReplay
from tracescale.replay.laws.nodes import CONSTANT, Law
from tracescale.replay.uncertainty.delays import DelayModel, pool_delays


def work_scales(
    base: RunReplay, laws: dict[str, Law], n: int, alt: bool = False
) -> tuple[float, float]:
    """How ``base``'s host gaps and kernels, in total, scale from its N to ``n``."""
    sums = {"gap:": [0.0, 0.0], "kernel:": [0.0, 0.0]}
    for name, t in base.group_time.items():
        for prefix, acc in sums.items():
            if name.startswith(prefix):
                acc[0] += t
                acc[1] += t * laws.get(name, CONSTANT).ratio(n, base.world_size, alt)
    host = sums["gap:"][1] / sums["gap:"][0] if sums["gap:"][0] > 0 else 1.0
    dev = sums["kernel:"][1] / sums["kernel:"][0] if sums["kernel:"][0] > 0 else 1.0
    return host, dev


def pooled_delays(runs: Sequence[RunReplay], laws: dict[str, Law]) -> DelayModel | None:
    """Every run's per-rank host delays in the largest run's units (divided by how its host
    work scales from the largest N to the run's), pooled."""
    parts = []
    for r in runs:
        host = work_scales(runs[-1], laws, r.world_size)[0]
        parts.append(r.delays / host if host > 0 else r.delays)
    return pool_delays(parts)
