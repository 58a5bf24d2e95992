"""How a run's host gaps and kernels, in total, scale from its N to another, and the runs'
host delays pooled in the largest run's units (what the slowest-rank waits draw from)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from tracescale.replay.arrivals.accumulation import block_sums
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
    work scales from the largest N to the run's, to the power ``delay_power`` reads), pooled."""
    hosts = [work_scales(runs[-1], laws, r.world_size)[0] for r in runs]
    # with gradient accumulation a draw sums a cycle's steps; a run without collectives
    # (one rank) has per-step delays, summed here over blocks of the same length
    cycle = max((r.cycle for r in runs), default=1)
    delays = [block_sums(r.delays, cycle) if r.cycle == 1 and not len(r.coll) else r.delays
              for r in runs]  # fmt: skip
    power = delay_power(delays, hosts)
    parts = [d / host**power if host > 0 else d for d, host in zip(delays, hosts, strict=True)]
    model = pool_delays(parts)
    if model is None:
        return None
    return dataclasses.replace(model, work_power=power, steps=cycle)


#: Fewest draws a run needs for its spread to count in ``delay_power``.
_SPREAD_DRAWS = 8


def delay_power(delays: Sequence[np.ndarray], hosts: Sequence[float]) -> float:
    """How the runs' delays scale with their host work, ``spread ~ host ** power``, power in
    [0, 1]: a least-squares slope of log spread on log host scale, each run weighted by its
    draws (1 where the host work hardly moved between runs: nothing to read it from).

    Why not assume either: a loader's per-step jitter shrinks with its share of the batch,
    while a stall (garbage collection, a slow read, a page-cache miss) keeps its size at any
    N. Scaling fixed stalls with the host work shrank them by the host work's ratio twice,
    once pooling the smaller runs and again at each projected N, and read the slowest of 64
    ranks' delay a third low. The spread is the median absolute deviation: a heavy tail's
    largest draws do not move it.
    """
    x, y, w = [], [], []
    for d, host in zip(delays, hosts, strict=True):
        d = np.asarray(d, dtype=np.float64)
        d = d[np.isfinite(d)]
        if len(d) < _SPREAD_DRAWS or host <= 0:
            continue
        mad = float(np.median(np.abs(d - np.median(d))))
        if mad > 0:
            x.append(np.log(host))
            y.append(np.log(mad))
            w.append(float(len(d)))
    if len(x) < 2:
        return 1.0
    xs, ys, ws = np.asarray(x), np.asarray(y), np.asarray(w)
    xm = float(np.average(xs, weights=ws))
    var = float(np.average((xs - xm) ** 2, weights=ws))
    if var < np.log(1.2) ** 2:  # host work within ~20% across runs
        return 1.0
    slope = float(np.average((xs - xm) * (ys - float(np.average(ys, weights=ws))), weights=ws))
    return float(np.clip(slope / var, 0.0, 1.0))
