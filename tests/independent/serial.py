"""The truth of each category's serial fraction for a tests/independent study, from its own
scheduler: the step at infinite N (every share of the batch divided away, transfers free, no
noise; launches and serial work kept) run for the largest measured N, each instant of each
ProfilerStep classified by the attribution rules as docs/attribution.md states them, divided
by the study's T(1). Written from that text, not from the package's classifier.

Rules, in priority at each instant: a compute kernel; a memcpy; an NCCL kernel
(communication); else the main host thread: a DataLoader op (dataloader); a blocking sync
call or ``aten::item`` (sync); a host-side communication op (``c10d::``, ``nccl:``,
``record_param_comms``, ``torch.distributed.``: communication); the time after a sync returns
until the next device work (sync); any other op (host); nothing (idle).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from .gen import Pattern, run, true_step

CATEGORIES = ("compute", "memcpy", "communication", "dataloader", "sync", "reduction", "host",
              "idle")  # fmt: skip
_SYNC = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
         "aten::item", "aten::_local_scalar_dense")  # fmt: skip
_HOST_COMM = ("c10d::", "nccl:", "record_param_comms", "torch.distributed.")


def _device_category(cat: str, name: str) -> str | None:
    if cat == "gpu_memcpy":
        return "memcpy"
    if cat == "kernel":
        return "communication" if name.startswith("nccl") else "compute"
    return None  # a GPU-side wait record is no work


def _host_category(name: str) -> str | None:
    if "DataLoader" in name:
        return "dataloader"
    if name in _SYNC:
        return "sync"
    if name.startswith(_HOST_COMM):
        return "communication"
    if name.startswith("ProfilerStep#"):
        return None  # the step window itself, not an op inside it
    return "host"


def _inside(ivs: list[tuple[float, float]], x: np.ndarray) -> np.ndarray:
    """Whether each point of ``x`` lies in the union of the intervals."""
    if not ivs:
        return np.zeros(len(x), dtype=bool)
    a = np.array(sorted(ivs))
    reach = np.maximum.accumulate(a[:, 1])
    k = np.searchsorted(a[:, 0], x, side="right") - 1
    return (k >= 0) & (x < reach[np.clip(k, 0, None)])


def _last(times: list[float], x: np.ndarray) -> np.ndarray:
    t = np.sort(np.array(times, dtype=float))
    k = np.searchsorted(t, x, side="right") - 1
    return np.where(k >= 0, t[np.clip(k, 0, None)] if len(t) else -math.inf, -math.inf)


def _classify(intervals: dict[str, list[tuple[float, float]]], syncs: list[float],
              dev_starts: list[float], lo: float, hi: float) -> dict[str, float]:  # fmt: skip
    """Seconds per category of the window [lo, hi)."""
    pts = [lo, hi, *syncs, *dev_starts]
    for ivs in intervals.values():
        pts += [t for iv in ivs for t in iv]
    edges = np.unique(np.clip(np.array(pts), lo, hi))
    mid = 0.5 * (edges[:-1] + edges[1:])
    width = np.diff(edges)
    got = np.full(len(mid), "", dtype=object)
    free = np.ones(len(mid), dtype=bool)
    for k in ("compute", "memcpy", "communication", "dataloader", "sync", "h:communication"):
        m = free & _inside(intervals[k], mid)
        got[m] = k.removeprefix("h:")
        free &= ~m
    last_sync = _last(syncs, mid)
    post = free & (last_sync > -math.inf) & (last_sync >= _last(dev_starts, mid))
    got[post] = "sync"
    free &= ~post
    host = free & _inside(intervals["host"], mid)
    got[host] = "host"
    got[free & ~host] = "idle"
    return {c: float(width[got == c].sum()) for c in CATEGORIES}


def serial_by_category(p: Pattern, seed: int = 1) -> dict[str, float]:
    """Each category's part of the serial fraction (share of T(1)); they sum to T_inf/T(1)."""
    q = replace(p, infinite=True, noise=0.0, tail=0.0)
    n = max(p.sizes)
    steps = 2 * p.accumulate
    s, _ = run(q, n, steps, seed + n, record=True)
    r = 0  # without noise every rank runs the same schedule
    keys = ("compute", "memcpy", "communication", "dataloader", "sync", "h:communication", "host")
    intervals: dict[str, list[tuple[float, float]]] = {k: [] for k in keys}
    syncs: list[float] = []
    dev_starts: list[float] = []
    windows: list[tuple[float, float]] = []
    for e in s.events:
        a, b = float(e.start[r]), float(e.end[r])
        if e.where == "host":
            if e.name.startswith("ProfilerStep#"):
                windows.append((a, b))
                continue
            c = _host_category(e.name)
            if c is not None and b > a:
                intervals["h:communication" if c == "communication" else c].append((a, b))
            if e.name in _SYNC[:3]:
                syncs.append(b)
        elif not e.where.startswith("host"):
            c = _device_category(e.cat, e.name)
            if c is not None and b > a:
                intervals[c].append((a, b))
                dev_starts.append(a)
    total = dict.fromkeys(CATEGORIES, 0.0)
    for lo, hi in windows:
        for c, v in _classify(intervals, syncs, dev_starts, lo, hi).items():
            total[c] += v
    t1 = true_step(p, 1, seed)
    return {c: v / len(windows) / t1 for c, v in total.items()}


def _check_identical_ranks(p: Pattern, seed: int = 1) -> bool:
    """Whether every rank runs the same schedule at infinite N (the premise of rank 0 alone)."""
    q = replace(p, infinite=True, noise=0.0, tail=0.0)
    s, _ = run(q, max(p.sizes), 2 * p.accumulate, seed, record=True)
    return all(bool(np.allclose(e.start, e.start[0])) for e in s.events)
