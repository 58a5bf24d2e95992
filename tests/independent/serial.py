"""The truth of each category's serial fraction for a tests/independent study, from its own
scheduler: the step at infinite N (every share of the batch divided away, transfers free, no
noise: each rank's data-loading delay at its mean, since the slowest of N ranks' excess over
it grows with N and is an overhead; launches and serial work kept) run for the largest
measured N, each instant of each ProfilerStep classified by the attribution rules as
docs/attribution.md states them, divided by the study's T(1). Written from that text, not
from the package's classifier.

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


#: The rules' layers in priority (``h:``: the main thread's); a pipeline's truth inserts its
#: bubble (point-to-point kernels alone on the GPU) after the device's communication.
LAYERS = ("compute", "memcpy", "communication", "dataloader", "sync", "h:communication")


def _classify(intervals: dict[str, list[tuple[float, float]]], syncs: list[float],
              dev_starts: list[float], lo: float, hi: float,
              layers: tuple[str, ...] = LAYERS) -> dict[str, float]:  # fmt: skip
    """Seconds per category (and per extra layer) of the window [lo, hi)."""
    pts = [lo, hi, *syncs, *dev_starts]
    for ivs in intervals.values():
        pts += [t for iv in ivs for t in iv]
    edges = np.unique(np.clip(np.array(pts), lo, hi))
    mid = 0.5 * (edges[:-1] + edges[1:])
    width = np.diff(edges)
    got = np.full(len(mid), "", dtype=object)
    free = np.ones(len(mid), dtype=bool)
    for k in layers:
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
    names = CATEGORIES + tuple(k for k in layers if k not in CATEGORIES and ":" not in k)
    return {c: float(width[got == c].sum()) for c in names}


#: The line of the wait at mixture-of-experts all-to-alls for the busiest expert rank
EXPERTS = "expert_imbalance"


def serial_by_category(p: Pattern, seed: int = 1) -> dict[str, float]:
    """Each category's part of the serial fraction (share of T(1)); they sum to T_inf/T(1).

    A study with all-to-alls (tests/independent/moe.py) has one more line, ``expert_imbalance``:
    instants its GPU runs only all-to-all kernels, the wait for the rank whose experts got the
    most tokens. At infinite N it is 0, and not by the generator's choice: a rank's expert work
    is its share of the tokens times its load, and as N grows the share shrinks like 1/N while
    the busiest of N loads grows only like log N (a gamma load), so the busiest rank's excess
    vanishes; what stays (the kernels' floors) does not depend on the load. The schedule
    shows it: transfers free and equal loads leave the all-to-alls no time."""
    q = replace(p, infinite=True, noise=0.0)
    n = max(p.sizes)
    steps = 2 * p.accumulate
    s, _ = run(q, n, steps, seed + n, record=True)
    r = 0  # without noise every rank runs the same schedule
    experts = any(e.args.get("Collective name") == "all_to_all" for e in s.events)
    layers = (*LAYERS[:3], EXPERTS, *LAYERS[3:]) if experts else LAYERS
    intervals: dict[str, list[tuple[float, float]]] = {k: [] for k in (*layers, "host")}
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
                alone = experts and e.args.get("Collective name") == "all_to_all"
                intervals[EXPERTS if alone else c].append((a, b))
                dev_starts.append(a)
    total = dict.fromkeys((*CATEGORIES, EXPERTS) if experts else CATEGORIES, 0.0)
    for lo, hi in windows:
        for c, v in _classify(intervals, syncs, dev_starts, lo, hi, layers).items():
            total[c] += v
    t1 = true_step(p, 1, seed)
    return {c: v / len(windows) / t1 for c, v in total.items()}


def _check_identical_ranks(p: Pattern, seed: int = 1) -> bool:
    """Whether every rank runs the same schedule at infinite N (the premise of rank 0 alone)."""
    q = replace(p, infinite=True, noise=0.0)
    s, _ = run(q, max(p.sizes), 2 * p.accumulate, seed, record=True)
    return all(bool(np.allclose(e.start, e.start[0])) for e in s.events)
