"""The truth of each category's serial fraction, and of the pipeline bubble, for a
tests/independent/pipeline.py study (1F1B, fixed global batch of M microbatches).

What infinite N means for a pipeline: N grows the data-parallel degree, so each replica runs
m = M / DP microbatches of a fixed size. The work that is divided is the count of microbatches,
not their size: a noise-free 1F1B step with balanced stages is exactly linear in m once it has
a steady state (m >= p - 1), T(m) = T0 + m c, with c one microbatch's forward and backward (and
its transfers) and T0 the fill and drain plus the once-per-step work (data loading, optimizer,
``loss.item()``, launches). Amdahl's law over N is that line, m = M p / N: T_inf = T0, its
intercept, and T(1) = T0 + M p c. So the truth rebuilds the schedule itself (no noise, the DP
AllReduce's transfer free, activations between stages keep theirs: a microbatch's size does not
shrink) at two microbatch counts in the steady state and extrapolates every category to m = 0.
Why not run one microbatch: at m = 1 the stage still computes one microbatch, which m -> 0
divides away; why not fit the measured steps over N: they flatten at one microbatch per replica.

The cut, per rank and ProfilerStep window, by the rules of docs/attribution.md as
tests/independent/serial.py states them, with one layer inserted after the device's
communication: the bubble, instants the rank's GPU runs only point-to-point kernels (a recv
launched ahead, waiting for the neighbouring stage's activation or gradient, or a send): the
stage idling while the others fill and drain the pipeline. In 1F1B each stage idles
``(p - 1)`` forward and backward times per step (its place in the fill and the drain differs,
not the sum), so the bubble at m -> 0 is about ``(p - 1) (t_f + t_b)`` plus the fill's transfers.
The stages are then averaged: the job's serial fraction is every rank's (the package replays
one stage; ``by_stage`` gives each). T(1) comes from the noisy schedule (the other truths' T(1)
is a noisy mean step too): the mean step at DP = 1 plus ``(M p - M)`` times the noisy slope per
microbatch between DP = 1 and DP = 2.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .pipeline import RECV, SEND, PipePattern, run, true_step
from .serial import _SYNC, CATEGORIES, LAYERS, _classify, _device_category, _host_category

BUBBLE = "pipeline_bubble"
#: the rules' layers with the bubble after the device's communication
_LAYERS = (*LAYERS[:3], BUBBLE, *LAYERS[3:])
_P2P = (str(RECV), str(SEND))


def _rank_parts(events: list[dict[str, object]], skip: int) -> dict[str, float]:
    """Seconds per category (and bubble) of one rank's steps after the first ``skip``, mean
    per step."""
    keys = (*_LAYERS, "host")
    intervals: dict[str, list[tuple[float, float]]] = {k: [] for k in keys}
    syncs: list[float] = []
    dev_starts: list[float] = []
    windows: list[tuple[float, float]] = []
    for e in events:
        a, b = float(e["a"]), float(e["b"])  # type: ignore[arg-type]
        name, where = str(e["name"]), str(e["where"])
        if where == "host":
            if name.startswith("ProfilerStep#"):
                windows.append((a, b))
                continue
            c = _host_category(name)
            if c is not None and b > a:
                intervals["h:communication" if c == "communication" else c].append((a, b))
            if name in _SYNC[:3]:
                syncs.append(b)
            continue
        c = _device_category(str(e["cat"]), name)
        if c is not None and b > a:
            intervals[BUBBLE if where in _P2P else c].append((a, b))
            dev_starts.append(a)
    total = dict.fromkeys((*CATEGORIES, BUBBLE), 0.0)
    kept = windows[skip:]
    for lo, hi in kept:
        for c, v in _classify(intervals, syncs, dev_starts, lo, hi, _LAYERS).items():
            total[c] += v
    return {c: v / len(kept) for c, v in total.items()}


def _at(pat: PipePattern, dp: int, m: int, steps: int) -> list[dict[str, float]]:
    """Each rank's seconds per category at ``m`` microbatches per replica (noise-free, the DP
    AllReduce's transfer free), mean over the steps after the first (whose stages all start
    together, unlike a steady run's). Waits by cause: a later stage's first recv also waits
    for stage 0's data loading, which the rules' cut shows as p2p time; the part of each
    rank's p2p-only time that goes when the loader is free (the same schedule without it) is
    data loading, not fill and drain."""
    q = replace(pat, microbatches=m * dp, noise=0.0, free_collectives=True)
    out = [_rank_parts(r.events, 1) for r in run(q, dp, steps, 0, record=True)]
    free = [_rank_parts(r.events, 1) for r in run(replace(q, load=0.0), dp, steps, 0, True)]
    for got, alone in zip(out, free, strict=True):
        caused = max(got[BUBBLE] - alone[BUBBLE], 0.0)
        got[BUBBLE] -= caused
        got["dataloader"] += caused
    return out


def serial_parts_by_rank(pat: PipePattern, steps: int = 3) -> list[dict[str, float]]:
    """Each rank's seconds per step at infinite N, by category and bubble: the noise-free
    schedule at the largest measured DP extrapolated to m = 0 along its steady state (two
    microbatch counts, both at least ``p``; a third checks the line)."""
    dp = max(pat.dp_sizes)
    m1 = max(pat.stages, pat.microbatches // dp)
    m2, m3 = 2 * m1, 3 * m1
    lo, hi, far = (_at(pat, dp, m, steps) for m in (m1, m2, m3))
    out = []
    for a, b, c in zip(lo, hi, far, strict=True):
        slope = {k: (b[k] - a[k]) / (m2 - m1) for k in a}
        for k in a:  # the steady state is a line in m: the third count lies on it
            assert abs(c[k] - (b[k] + slope[k] * (m3 - m2))) < 1e-9 + 1e-6 * abs(c[k]), k
        out.append({k: a[k] - m1 * slope[k] for k in a})
    return out


def t1(pat: PipePattern, seed: int = 1) -> float:
    """Amdahl's T(1): the noisy mean step at DP = 1 extrapolated along the noisy slope per
    microbatch (DP = 1 against DP = 2) to ``M p`` microbatches per replica (N = 1)."""
    t_1, _ = true_step(pat, 1, seed)
    t_2, _ = true_step(pat, 2, seed)
    m = pat.microbatches
    slope = (t_1 - t_2) / (m - m // 2)
    return t_1 + (m * pat.stages - m) * slope


def serial_by_category(pat: PipePattern, seed: int = 1) -> dict[str, float]:
    """Each category's part of the serial fraction and the ``pipeline_bubble`` line (shares of
    T(1), mean over the ranks); they sum to T_inf / T(1)."""
    ranks = serial_parts_by_rank(pat)
    t = t1(pat, seed)
    return {k: float(np.mean([r[k] for r in ranks])) / t for k in ranks[0]}


def by_stage(pat: PipePattern, seed: int = 1) -> list[dict[str, float]]:
    """:func:`serial_by_category` of each stage (its DP replicas averaged)."""
    ranks = serial_parts_by_rank(pat)
    t = t1(pat, seed)
    dp = max(pat.dp_sizes)
    return [
        {k: float(np.mean([r[k] for r in ranks[s * dp : (s + 1) * dp]])) / t for k in ranks[0]}
        for s in range(pat.stages)
    ]
