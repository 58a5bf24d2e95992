"""The truth of a measured run's ``breakdown_s`` for a tests/independent/pipeline.py study: the
run's own recorded events (the same seed as the written traces) cut by the attribution rules of
docs/attribution.md, written from that text, not from the package's classifier.

Why its own cut: tests/independent/serial.py classifies one rank's instants at infinite N, with
no waits to give a cause; a pipeline's measured step is mostly waits. The rules, per rank:

1. Each instant of each ProfilerStep window, in priority: a compute kernel; a memcpy; an NCCL
   kernel (communication, the send/recv kernels included); else the main thread's state
   (tests/independent/serial.py's layers: DataLoader, sync, host-side communication, the time
   after a sync returns until the next device work, any other op, nothing).
2. Cross-rank cause: "collectives are matched across ranks: the shortest duration of an
   instance is its transfer, the rest is waiting, and a rank's wait is attributed to what the
   late rank was doing". The instances are the DP AllReduces (each group's k-th). Each
   member's wait is its kernel's first ``duration - transfer`` seconds; the late member starts
   last. The waiting rank's instants classified communication in that window go to the late
   rank's categories over the same instants, in proportion; the part where the late rank
   itself was in communication stays communication. An instant is given once (the
   earliest-starting instance that covers it).
3. ``breakdown_s``: each rank's mean per step, then the mean over ranks (docs/json.md).

Point-to-point send/recv are no collective: their time stays communication, as the serial
fraction's ``pipeline_bubble`` (p2p-only instants, tests/independent/serial_pipeline.py) and
docs/projection.md ("the pipeline's waits, not collectives") read it. An eager send ends
without its recv, so "the shortest duration is the transfer" does not hold for them.
``p2p=True`` gives them a cause anyway, each send paired with its recv (the k-th send from rank
a to rank b with the k-th recv on b from a: one direction of a pair arrives in order), to show
what that other reading would give; ``cause=False`` leaves step 2 out altogether.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from .pipeline import PipePattern, _Rank, run
from .serial import _SYNC, CATEGORIES, LAYERS, _device_category, _host_category, _inside, _last

_COMM = CATEGORIES.index("communication")


class _Timeline:
    """One rank's instants, classified: ``edges`` and the category index of each piece."""

    def __init__(self, r: _Rank) -> None:
        iv: dict[str, list[tuple[float, float]]] = {k: [] for k in (*LAYERS, "host")}
        syncs: list[float] = []
        starts: list[float] = []
        self.windows: list[tuple[float, float]] = []
        for e in r.events:
            a, b, name = float(e["a"]), float(e["b"]), str(e["name"])  # type: ignore[arg-type]
            if e["where"] == "host":
                if name.startswith("ProfilerStep#"):
                    self.windows.append((a, b))
                    continue
                c = _host_category(name)
                if c is not None and b > a:
                    iv["h:communication" if c == "communication" else c].append((a, b))
                if name in _SYNC[:3]:
                    syncs.append(b)
            else:
                c = _device_category(str(e["cat"]), name)
                if c is not None and b > a:
                    iv[c].append((a, b))
                    starts.append(a)
        self.iv, self.syncs, self.starts = iv, syncs, starts
        self.windows.sort()
        self.edges, self.cat = self._cut([])

    def _cut(self, extra: list[float]) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = self.windows[0][0], self.windows[-1][1]
        pts = [lo, hi, *self.syncs, *self.starts, *extra]
        pts += [t for w in self.windows for t in w]
        pts += [t for ivs in self.iv.values() for iv in ivs for t in iv]
        edges = np.unique(np.clip(np.array(pts), lo, hi))
        mid = 0.5 * (edges[:-1] + edges[1:])
        cat = np.full(len(mid), -1, dtype=np.int64)
        free = np.ones(len(mid), dtype=bool)
        for k in LAYERS:
            m = free & _inside(self.iv[k], mid)
            cat[m] = CATEGORIES.index(k.removeprefix("h:"))
            free &= ~m
        last_sync = _last(self.syncs, mid)
        post = free & (last_sync > -math.inf) & (last_sync >= _last(self.starts, mid))
        cat[post] = CATEGORIES.index("sync")
        free &= ~post
        host = free & _inside(self.iv["host"], mid)
        cat[host] = CATEGORIES.index("host")
        cat[free & ~host] = CATEGORIES.index("idle")
        cat[~_inside(self.windows, mid)] = -1  # between steps: no step's time
        return edges, cat

    def split(self, extra: list[float]) -> None:
        """Cut the pieces at ``extra`` too (the wait windows' ends)."""
        self.edges, self.cat = self._cut(extra)

    def seconds_in(self, a: float, b: float) -> np.ndarray:
        """Seconds per category over [a, b)."""
        out = np.zeros(len(CATEGORIES))
        lo = np.clip(self.edges[:-1], a, b)
        hi = np.clip(self.edges[1:], a, b)
        w = hi - lo
        keep = (w > 0) & (self.cat >= 0)
        np.add.at(out, self.cat[keep], w[keep])
        return out


def _instances(ranks: list[_Rank]) -> list[tuple[str, list[tuple[int, float, float]]]]:
    """Each transfer's kind (``collective`` or ``p2p``) and members (rank, start, end): the DP
    AllReduces, and each p2p send with its recv."""
    found: dict[tuple[object, ...], list[tuple[int, float, float]]] = defaultdict(list)
    count: dict[tuple[object, ...], int] = defaultdict(int)
    for r in ranks:
        for e in r.events:
            args = e["args"]
            if e["where"] == "host" or not isinstance(args, dict):
                continue
            kind = args.get("Collective name")
            if kind is None:
                continue
            pg = str(args["Process Group Name"])
            if kind in ("send", "recv"):
                pair = [int(x) for x in str(args["Process Group Ranks"]).strip("[]").split(",")]
                peer = pair[0] if pair[1] == r.rank else pair[1]
                src, dst = (r.rank, peer) if kind == "send" else (peer, r.rank)
                key: tuple[object, ...] = (pg, src, dst, kind)
            else:
                key = (pg, r.rank, kind)
            k = count[key]
            count[key] += 1
            inst = (pg, src, dst, k) if kind in ("send", "recv") else (pg, k)
            found[inst].append((r.rank, float(e["a"]), float(e["b"])))  # type: ignore[arg-type]
    return [("p2p" if len(k) == 4 else "collective", v) for k, v in found.items()]


def breakdown(
    pat: PipePattern, dp: int, seed: int = 1, cause: bool = True, p2p: bool = False
) -> dict[str, object]:
    """The truth of the run at DP = ``dp`` as tests/independent/pipeline.py writes it
    (``write_run``): ``breakdown_s`` (category -> seconds per step, mean over ranks of each
    rank's mean), ``step_s`` (the same mean step) and ``rank_step_s`` (each rank's mean)."""
    ranks = run(pat, dp, pat.steps, seed + dp, record=True)
    tl = {r.rank: _Timeline(r) for r in ranks}
    waits: dict[int, list[tuple[float, float, int]]] = defaultdict(list)
    if cause:
        for kind, members in _instances(ranks):
            if len(members) < 2 or (kind == "p2p" and not p2p):
                continue
            transfer = min(b - a for _, a, b in members)
            late = max(members, key=lambda m: m[1])[0]
            for rank, a, b in members:
                if rank != late and b - a > transfer:
                    waits[rank].append((a, a + (b - a - transfer), late))
    per_rank: dict[int, np.ndarray] = {}
    steps: dict[int, float] = {}
    for rank, t in tl.items():
        mine = sorted(waits.get(rank, []))
        if mine:
            t.split([x for a, b, _ in mine for x in (a, b)])
        total = t.seconds_in(-math.inf, math.inf)
        claimed = -math.inf
        for a, b, late in mine:
            lo = max(a, claimed)
            if b <= lo:
                continue
            claimed = b
            sel = np.flatnonzero((t.cat == _COMM) & (t.edges[:-1] >= lo) & (t.edges[1:] <= b))
            for j in sel.tolist():
                x, y = float(t.edges[j]), float(t.edges[j + 1])
                there = tl[late].seconds_in(x, y)
                if there.sum() <= 0:
                    continue
                moved = there / there.sum() * (y - x)
                moved[_COMM] = 0.0
                total[_COMM] -= moved.sum()
                total += moved
        n = len(t.windows)
        per_rank[rank] = total / n
        steps[rank] = sum(b - a for a, b in t.windows) / n
    mean = np.mean(np.array(list(per_rank.values())), axis=0)
    return {
        "breakdown_s": {c: float(v) for c, v in zip(CATEGORIES, mean, strict=True)},
        "step_s": float(np.mean(list(steps.values()))),
        "rank_step_s": steps,
    }
