"""Which event record each stream wait awaits, when the trace names neither: a thread's
``cudaEventRecord``/``cudaStreamWaitEvent`` calls and a causality check on the measured device
times in, (wait call, start of its record) pairs out.

Why apart from the edges they become (``graph_waits``): without correlation args a wait names
no event, so pairing it with a record is a small inference of its own, and the same rule must
hold for every host thread and every kind of code that records events.

Two idioms write these calls. ``stream.wait_stream(other)`` (ProcessGroupNCCL before a
collective, FSDP1, DDP) records on the other stream and waits at once: the wait's record is the
most recent one. Code that issues work, records an event after it and waits for it later
(FSDP2's all-gather event, a prefetching loop) may issue the next transfer and its record
before waiting for the previous one: the wait's record is then the one *before* the most
recent. Both look alike on the host. The device times tell them apart where a transfer was
still running when the waiting stream went on: that kernel cannot be the one awaited. Per host
thread and waiting stream, a wait skips 0, 1 or 2 in-flight records on its producer's stream:
the most recent record unless the measured start times contradict it for some waits and a
deeper reading for none. A trace without contradictions keeps the most recent record
everywhere, and so does one where every reading leaves some wait unexplained (the next kernel
launched after those waits is not what waited).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable

import numpy as np

from tracescale.ingest.trace import RankTrace
from tracescale.replay.graph.device import BOOL, I64

#: (wait start, record start) -> (waiting stream, producer stream, impossible): the stream of
#: the next kernel launched after the wait, the stream of the last kernel launched on another
#: stream before the record, and whether that producer ended after the waiting kernel started.
Judge = Callable[[int, int], tuple[int, int, bool]]

#: Readings tried: a wait skips 0, 1 or 2 more recent records on its producer's stream.
_DEPTHS = (0, 1, 2)


#: Records looked at behind the most recent one (taken ones are skipped): bounds the work per
#: wait on threads with thousands of records.
_LOOK_BACK = 64


def _never(wait_t: int, rec_t: int) -> tuple[int, int, bool]:
    return -1, -1, False


def record_of_waits(
    trace: RankTrace, calls: I64, is_wait: BOOL, judge: Judge = _never
) -> list[tuple[int, int]]:
    """(wait call, start of the record it waits on) for stream waits without correlation args.

    Per host thread in time order, a wait takes the most recent record not yet taken by an
    earlier wait of the same run of records: two consecutive waits (one consumer after two
    process groups' streams) wait on two distinct records, not twice on the last one. A wait
    with no record left takes the latest record (one event waited on by several streams); one
    with none before it, its own start. Where ``judge`` shows that reading impossible for some
    waits of one stream and a deeper one for none (each wait skips the 1 or 2 most recent
    untaken records whose producer is on the same stream as its own: a prefetch issued before
    the wait), the deeper reading holds for that thread's waits on that stream."""
    ev = trace.events
    order = np.lexsort((calls, ev.start[calls], ev.tid[calls], ev.pid[calls]))
    seq = calls[order]
    wait = is_wait[order]
    thread = ev.pid[seq].astype(np.int64) * (1 << 32) + ev.tid[seq].astype(np.int64)
    cuts = np.flatnonzero(np.diff(thread)) + 1
    out: list[tuple[int, int]] = []
    for part in np.split(np.arange(len(seq)), cuts):
        ids = seq[part].tolist()
        starts = [int(t) for t in ev.start[seq[part]].tolist()]
        picks = _thread_pairs(starts, wait[part].tolist(), judge)
        out.extend((ids[w], starts[r if r >= 0 else w]) for w, r in picks)
    return out


def _thread_pairs(starts: list[int], waits: list[bool], judge: Judge) -> list[tuple[int, int]]:
    """(wait, record) positions on one thread: each waiting stream read at the depth
    :func:`_reading` picks from the contradictions of every depth tried."""
    verdict: dict[tuple[int, int], tuple[int, int, bool]] = {}

    def judged(w: int, r: int) -> tuple[int, int, bool]:
        got = verdict.get((w, r))
        if got is None:
            got = verdict[(w, r)] = judge(starts[w], starts[r])
        return got

    wrong: dict[int, list[int]] = {}
    for k, d in enumerate(_DEPTHS):
        picks = _pair(starts, waits, judged, _everywhere(d))
        for w, r in picks:
            stream, _, impossible = judged(w, r) if r >= 0 else (-1, -1, False)
            wrong.setdefault(stream, [0] * len(_DEPTHS))[k] += int(impossible)
        if k == 0 and not any(v[0] for v in wrong.values()):
            return picks  # nothing contradicts the most recent record: the common case
    depth = {s: _reading(v) for s, v in wrong.items()}
    return _pair(starts, waits, judged, lambda s: depth.get(s, 0))


def _reading(wrong: list[int]) -> int:
    """The depth to read a stream's waits at, from the waits each depth makes impossible: the
    shallowest that contradicts none, where the most recent record contradicts some; else 0.
    A reading that some waits contradict too names no record right (the next kernel launched
    after those waits is not what waited: ProcessGroupNCCL's end-of-work waits by a stream
    with no kernel soon after), so the most recent record stands."""
    if wrong[0] == 0:
        return 0
    return next((k for k, v in enumerate(wrong) if v == 0), 0)


def _everywhere(depth: int) -> Callable[[int], int]:
    return lambda stream: depth


def _pair(
    starts: list[int],
    waits: list[bool],
    judged: Callable[[int, int], tuple[int, int, bool]],
    depth_of: Callable[[int], int],
) -> list[tuple[int, int]]:
    """(wait, record) positions on one thread (record -1: none before the wait) when each wait
    skips ``depth_of(its stream)`` more recent untaken records on its producer's stream."""
    taken = [False] * len(starts)
    run: list[int] = []  # untaken records of the current run, oldest first
    records: list[int] = []  # every record so far, oldest first
    after_wait = False
    out: list[tuple[int, int]] = []
    for i, is_wait in enumerate(waits):
        if not is_wait:
            if after_wait:  # a new run of records: untaken older ones are not waited on...
                run, after_wait = [], False
            run.append(i)
            records.append(i)
            continue
        after_wait = True
        if not run:
            out.append((i, records[-1] if records else -1))
            continue
        pick = run[-1]
        stream, producer, _ = judged(i, pick)
        deeper = depth_of(stream)
        at = bisect.bisect_left(records, pick) - 1
        stop = max(at - _LOOK_BACK, -1)
        while deeper and producer >= 0 and at > stop:  # ...unless a prefetch keeps them in flight
            r = records[at]
            at -= 1
            if taken[r]:
                continue
            if judged(i, r)[1] != producer:
                break
            pick, deeper = r, deeper - 1
        taken[pick] = True
        if pick in run:
            run.remove(pick)
        out.append((i, pick))
    return out
