"""Cross-stream waits of a rank's graph: device columns and the host's record/wait calls in,
producer edges (``dep2``) and zero-duration join nodes out.

Why apart from the other device edges: a stream wait without correlation args names neither
its streams nor its event, so matching it to a record, a producer and a consumer is inference
with rules of its own (stated in docs/DESIGN.md), and one consumer may wait on several
producers while the replay keeps two dependencies per node.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tracescale.ingest.trace import RankTrace
from tracescale.replay.graph.device import I64, QUEUED_NS, CorrIndex
from tracescale.replay.waits.event_records import record_of_waits

_WAIT_CALLS = frozenset({"cudaStreamWaitEvent", "hipStreamWaitEvent"})
_RECORD_CALLS = frozenset({"cudaEventRecord", "hipEventRecord"})


@dataclass(frozen=True)
class _StreamIndex:
    """Device nodes in launch order, indexed per stream, so each stream-wait edge is found by
    binary search instead of a scan of every kernel (waits x kernels was quadratic)."""

    stream: I64
    positions: dict[int, I64]
    #: per position x: the last position <= x on another stream than x's, -1 when none.
    other_before: I64

    @classmethod
    def of(cls, d_stream: I64) -> _StreamIndex:
        n = len(d_stream)
        order = np.argsort(d_stream, kind="stable")
        cuts = np.flatnonzero(np.diff(d_stream[order])) + 1
        positions = {int(d_stream[c[0]]): c for c in np.split(order, cuts) if len(c)}
        change = np.ones(n, dtype=np.bool_)
        change[1:] = d_stream[1:] != d_stream[:-1]
        run_start = np.maximum.accumulate(np.where(change, np.arange(n), 0))
        return cls(d_stream, positions, (run_start - 1).astype(np.int64))

    def first_from(self, stream: int, j: int) -> int:
        """First position >= ``j`` on ``stream``, -1 when none."""
        p = self.positions.get(stream)
        if p is None:
            return -1
        q = int(np.searchsorted(p, j, side="left"))
        return int(p[q]) if q < len(p) else -1

    def last_before(self, k: int, stream: int, other: bool) -> int:
        """Last position < ``k`` on ``stream`` (on any other stream when ``other``), -1."""
        if other:
            x = min(k, len(self.stream)) - 1
            if x < 0:
                return -1
            return x if int(self.stream[x]) != stream else int(self.other_before[x])
        p = self.positions.get(stream)
        if p is None:
            return -1
        q = int(np.searchsorted(p, k, side="left")) - 1
        return int(p[q]) if q >= 0 else -1


@dataclass(frozen=True)
class _Launched:
    """Device nodes in launch order: their nodes, launch times, streams and a stream index."""

    node: I64
    launch: I64
    stream: I64
    index: _StreamIndex

    @classmethod
    def of(cls, trace: RankTrace, dev_idx: I64, first: int, launched: I64) -> _Launched:
        d_launch = launched[dev_idx]
        order = np.argsort(d_launch, kind="stable")
        stream = trace.events.stream[dev_idx[order]]
        return cls(first + order.astype(np.int64), d_launch[order], stream,
                   _StreamIndex.of(stream))  # fmt: skip

    def link(
        self, producers: dict[int, set[int]], awaited: dict[int, dict[int, int]], wait_t: int,
        limit: int, stream: int, producer_stream: int,
    ) -> None:  # fmt: skip
        """First kernel on ``stream`` launched after ``wait_t`` waits for the last kernel
        launched before ``limit`` on ``producer_stream`` (when -1: :meth:`unawaited_before`),
        added to that consumer's ``producers``. ``awaited``: per consumer stream, the last
        position awaited so far on each producer stream."""
        j = int(np.searchsorted(self.launch, wait_t, side="left"))
        first = self.index.first_from(stream, j)
        if first < 0:
            return
        k = int(np.searchsorted(self.launch, limit, side="left"))
        seen = awaited.setdefault(stream, {})
        if producer_stream >= 0:
            last = self.index.last_before(k, producer_stream, other=False)
        else:
            last = self.unawaited_before(k, stream, seen)
        if last >= 0:
            s = int(self.stream[last])
            seen[s] = max(seen.get(s, -1), last)
            producers.setdefault(int(self.node[first]), set()).add(int(self.node[last]))

    def link_inferred(
        self, c: dict[str, I64], producers: dict[int, set[int]],
        awaited: dict[int, dict[int, int]], wait_t: int, limit: int,
    ) -> None:  # fmt: skip
        """A wait without stream args: its consumer is any stream whose first kernel launched
        after ``wait_t`` started right as its producer ended (the wait visibly held it; the
        next kernel launched may be another stream's, e.g. a collective queued between the wait
        and the kernel that waited), else the stream of the next kernel launched."""
        j = int(np.searchsorted(self.launch, wait_t, side="left"))
        if j >= len(self.node):
            return
        k = int(np.searchsorted(self.launch, limit, side="left"))
        start, dur = c["start"], c["dur"]
        visible: list[int] = []
        for s in self.index.positions:
            first = self.index.first_from(s, j)
            if first < 0:
                continue
            last = self.unawaited_before(k, s, awaited.get(s, {}))
            if last < 0:
                continue
            p = self.node[last]
            gap = int(start[self.node[first]]) - int(start[p]) - int(dur[p])
            if 0 <= gap <= QUEUED_NS:
                visible.append(s)
        for s in visible or [int(self.stream[j])]:
            self.link(producers, awaited, wait_t, limit, s, -1)

    def judge(self, c: dict[str, I64], wait_t: int, rec_t: int) -> tuple[int, int, bool]:
        """(waiting stream, producer stream, impossible) of a wait at ``wait_t`` on the record
        at ``rec_t``: the stream of the next kernel launched, the stream of the last kernel
        launched on another one before the record, and whether that kernel ended after the
        waiting one started (it cannot have been awaited). -1 where there is none."""
        j = int(np.searchsorted(self.launch, wait_t, side="left"))
        if j >= len(self.node):
            return -1, -1, False
        stream = int(self.stream[j])
        k = int(np.searchsorted(self.launch, rec_t, side="left"))
        last = self.index.last_before(k, stream, other=True)
        if last < 0:
            return stream, -1, False
        p, w = int(self.node[last]), int(self.node[j])
        ended = int(c["start"][p]) + int(c["dur"][p])
        return stream, int(self.stream[last]), ended > int(c["start"][w]) + QUEUED_NS

    def unawaited_before(self, k: int, stream: int, seen: dict[int, int]) -> int:
        """Last position < ``k`` on a stream other than ``stream`` whose work ``stream`` has not
        awaited yet (waiting again on awaited work changes nothing, so a wait without stream
        args is about the rest); the last on any other stream when all was awaited, -1."""
        best = -1
        for s in self.index.positions:
            if s != stream:
                x = self.index.last_before(k, s, other=False)
                if x > seen.get(s, -1) and x > best:
                    best = x
        return best if best >= 0 else self.index.last_before(k, stream, other=True)


def cross_stream(
    trace: RankTrace,
    c: dict[str, I64],
    dev_idx: I64,
    first: int,
    call_events: I64,
    corr: CorrIndex,
    launched: I64,
) -> tuple[list[tuple[int, int]], int]:
    """Producer edges: a kernel after a stream wait starts after the awaited kernel ends
    (``cuda_sync`` records name the streams and the record call; else each
    ``cudaStreamWaitEvent`` call waits on the last kernel launched before its own event record
    (``graph_records.record_of_waits``) on another stream, :meth:`_Launched.unawaited_before`).

    A consumer may wait on several producers (an optimizer after the gradients of two process
    groups): the one that ended last in the trace becomes its ``dep2``; the others are returned
    as (consumer, producer) pairs for join nodes (:func:`add_joins`), with how many of those
    pairs :func:`optimizer_waits` inferred."""
    ev, strings = trace.events, trace.strings
    if len(dev_idx) == 0:
        return [], 0
    dv = _Launched.of(trace, dev_idx, first, launched)
    producers: dict[int, set[int]] = {}
    awaited: dict[int, dict[int, int]] = {}
    covered: set[int] = set()
    sync_cat = trace.string_id("cuda_sync")
    waits: list[int] = []
    if sync_cat >= 0:
        waits = np.flatnonzero((ev.cat == sync_cat) & (ev.wait_on_stream >= 0)).tolist()
    at = np.asarray(waits, dtype=np.int64)  # each wait's call and record, looked up at once
    calls_of = corr.find(ev.correlation[at].astype(np.int64)).tolist()
    recs_of = corr.find(ev.wait_on_corr[at].astype(np.int64)).tolist()
    for w, call, rec in zip(waits, calls_of, recs_of, strict=True):
        if strings[ev.name[w]] != "Stream Wait Event":
            continue
        if call < 0:
            continue
        covered.add(call)
        limit = int(ev.start[call])
        if ev.wait_on_corr[w] >= 0 and rec >= 0:
            limit = int(ev.start[rec])
        dv.link(producers, awaited, int(ev.start[call]), limit, int(ev.stream[w]),
                int(ev.wait_on_stream[w]))  # fmt: skip
    names = ev.name[call_events]
    wait_ids = [k for k, s in enumerate(strings) if s in _WAIT_CALLS]
    rec_ids = [k for k, s in enumerate(strings) if s in _RECORD_CALLS]
    is_wait = np.isin(names, wait_ids) & ~np.isin(call_events, list(covered))
    calls = call_events[is_wait | np.isin(names, rec_ids)]
    matched = record_of_waits(
        trace, calls, is_wait[is_wait | np.isin(names, rec_ids)], functools.partial(dv.judge, c)
    )
    for w, limit in sorted(matched, key=lambda m: (int(ev.start[m[0]]), m[0])):
        dv.link_inferred(c, producers, awaited, int(ev.start[w]), limit)
    joins = _split_producers(c, producers)
    inferred = optimizer_waits(trace, c, dv) if not waits and not is_wait.any() else []
    return joins + inferred, len(inferred)


#: torch.optim.Optimizer wraps every ``step`` in this record_function (any subclass).
_OPTIMIZER_STEP = "Optimizer.step#"


def optimizer_waits(trace: RankTrace, c: dict[str, I64], dv: _Launched) -> list[tuple[int, int]]:
    """In a trace without any stream-wait record: (consumer, producer) pairs, for join nodes,
    where the first kernel each stream runs inside an ``Optimizer.step#`` range waits for the
    last collective launched on every other stream since the previous optimizer step.

    Why: the optimizer reads every gradient, and DDP, FSDP and ZeRO reduce gradients with
    collectives that the step waits for (``work.wait()`` at the end of backward writes a
    ``cudaStreamWaitEvent``, whichever stream the reduction ran on). A trace that lost those
    calls still shows the order: where the reduction ended before the optimizer started, no
    time tells the edge, and projected to a larger N, where the reduction outgrows backward,
    the optimizer would overlap it. Join nodes, not ``dep2``: a wait the times do show
    (``graph_device.launch_lags``) keeps its edge. A consumer that started before such a
    collective ended did not wait for it: no pair."""
    ev, strings = trace.events, trace.strings
    ids = [k for k, s in enumerate(strings) if s.startswith(_OPTIMIZER_STEP)]
    if not ids or len(dv.node) == 0:
        return []
    ranges = np.flatnonzero(np.isin(ev.name, ids) & ~ev.is_device)
    ranges = ranges[np.argsort(ev.start[ranges], kind="stable")]
    is_coll = c["coll"][dv.node] >= 0
    end_of = c["start"] + c["dur"]
    since = -(2**62)
    pairs: list[tuple[int, int]] = []
    for r in ranges.tolist():
        begin, end = int(ev.start[r]), int(ev.start[r] + ev.dur[r])
        lo, j0, j1 = np.searchsorted(dv.launch, [since, begin, end], side="left").tolist()
        since = max(since, end)
        before = lo + np.flatnonzero(is_coll[lo:j0])
        if len(before) == 0 or j1 <= j0:
            continue
        last = {int(dv.stream[p]): int(dv.node[p]) for p in before.tolist()}
        inside = np.arange(j0, j1)
        _, first = np.unique(dv.stream[inside], return_index=True)
        for q in inside[first].tolist():
            node, mine = int(dv.node[q]), int(dv.stream[q])
            pairs += [
                (node, p)
                for s, p in sorted(last.items())
                if s != mine and end_of[p] <= c["start"][node] + QUEUED_NS
            ]
    return pairs


def _split_producers(c: dict[str, I64], producers: dict[int, set[int]]) -> list[tuple[int, int]]:
    """Each consumer's latest-ending producer (in the trace) as its ``dep2``; the rest as
    (consumer, producer) pairs.

    Only producers that had ended by the consumer's start (within ``QUEUED_NS``) are kept: a
    wait holds its consumer until the awaited work ends, so a match the trace shows running on
    past the consumer's start awaited something else. Kept, such an edge made the replay of the
    measured step longer than the step (HTA's trace_diff: a collective ending 1.5-7 ms after
    the kernel it was matched to had started)."""
    end = c["start"] + c["dur"]
    extra: list[tuple[int, int]] = []
    for consumer, found in producers.items():
        start = int(c["start"][consumer])
        ranked = sorted(
            (p for p in found if int(end[p]) <= start + QUEUED_NS), key=lambda p: (int(end[p]), p)
        )
        if not ranked:
            continue
        c["dep2"][consumer] = ranked[-1]
        extra.extend((consumer, p) for p in ranked[:-1])
    return extra


def add_joins(c: dict[str, npt.NDArray[Any]], pairs: list[tuple[int, int]], kind: int) -> int:
    """Append one zero-duration join node per (consumer, producer) pair on the consumer's stream,
    just before it (same start, ordered first) with the producer as its
    ``dep2`` and ``kind`` (a device node): the consumer then waits for every producer while
    the replay keeps two dependencies per node. Returns the number of nodes before the joins."""
    n = len(c["kind"])
    if not pairs:
        return n
    cons = np.array([p[0] for p in pairs], dtype=np.int64)
    prod = np.array([p[1] for p in pairs], dtype=np.int64)
    m = len(pairs)
    add: dict[str, npt.NDArray[Any]] = {
        "kind": np.full(m, kind, dtype=np.int8),
        "res": c["res"][cons],
        "start": c["start"][cons],
        "dur": np.zeros(m, dtype=np.int64),
        "dep": np.full(m, -1),
        "lag": np.zeros(m, dtype=np.int64),
        "dep2": prod,
        "fixed": np.zeros(m, dtype=np.int64),
        "tail": np.zeros(m, dtype=np.int64),
        "release": np.full(m, -(2**62), dtype=np.int64),
        "group": c["group"][cons],
        "coll": np.full(m, -1),
        "event": c["event"][cons],
    }
    for k, v in add.items():
        c[k] = np.concatenate([c[k], v.astype(c[k].dtype)])
    return n
