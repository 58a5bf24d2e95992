"""Decoded events -> numpy columns: C-level passes (``map``/``attrgetter``/``fromiter``) per column.

Speed and peak memory matter here (a 54 MB trace decodes to ~200k structs), so there is no
per-event Python code on the hot path: columns come from ``np.fromiter(map(attrgetter(...)))``,
strings are interned for all columns at once with ``pandas.factorize``, and the decoded structs
are released as soon as their columns exist.
"""

from __future__ import annotations

from collections.abc import Iterable
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from tracescale.errors import InvalidTraceError
from tracescale.ingest.numbers import us_text_to_ns
from tracescale.ingest.trace import (
    DEVICE_CATEGORIES,
    EventColumns,
    PGConfig,
    RankTrace,
    TraceMeta,
)

if TYPE_CHECKING:
    from tracescale.ingest.decode import Event, TraceFile

_MAX_DUR_NS = 7 * 24 * 3600 * 10**9  # a week: longer "durations" are corrupt, not profiles
_INT_ARGS = (
    "correlation",
    "stream",
    "device",
    "external_id",
    "external_id_old",
    "in_nelems",
    "out_nelems",
    "group_size",
    "seq",
    "nbytes",
)
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
_PH = attrgetter("ph")
_ARGS = attrgetter("args")


def _int_column(values: Iterable[Any], n: int, default: int = -1) -> npt.NDArray[np.int64]:
    """int64 column; values beyond 64 bits (msgspec decodes them as Python ints) -> ``default``."""
    seq = list(values)
    try:
        return np.fromiter(seq, dtype=np.int64, count=n)
    except (OverflowError, TypeError, ValueError):
        return np.array(
            [v if isinstance(v, int) and _I64_MIN <= v <= _I64_MAX else default for v in seq],
            dtype=np.int64,
        )


def _int_or_label(values: list[Any], labels: dict[str, int]) -> list[int]:
    """Integer pid/tid as is; numeric strings ("25738") as ints; other strings negative ids."""
    out: list[int] = []
    for v in values:
        if isinstance(v, int):
            out.append(v if _I64_MIN <= v <= _I64_MAX else 0)
        elif isinstance(v, str) and v.isascii() and v.isdigit() and len(v) < 19:
            out.append(int(v))
        else:
            got = labels.get(str(v))
            if got is None:
                got = labels[str(v)] = -(len(labels) + 1)
            out.append(got)
    return out


def _id_column(values: list[Any], n: int, labels: dict[str, int]) -> npt.NDArray[np.int64]:
    """pid/tid column: the all-int common case in C, strings (``"Spans"``) via the label table."""
    if all(type(v) is int for v in values):
        try:
            return np.fromiter(values, dtype=np.int64, count=n)
        except OverflowError:
            pass
    return np.array(_int_or_label(values, labels), dtype=np.int64)


def _raw_text(raw: Any) -> str:
    return bytes(raw).decode("utf-8", "replace") if raw else ""


def build_trace(
    path: str, size: int, *, events: list[Event], top: TraceFile, malformed: int = 0
) -> RankTrace:
    """Columns from the complete events; metadata from ``M`` events and the top level.

    Consumes ``events`` (the list is cleared) so the decoded structs are freed early.
    """
    skipped: dict[str, int] = {}
    if malformed:
        skipped["malformed events"] = malformed
    total = len(events) + malformed
    if total == 0:
        raise InvalidTraceError("'traceEvents' is empty", path=path)
    phases = list(map(_PH, events))
    xs = [e for e, ph in zip(events, phases, strict=True) if ph == "X"]
    meta_events = [e for e, ph in zip(events, phases, strict=True) if ph == "M"]
    no_ph = phases.count("")
    begin_end = phases.count("B") + phases.count("E")
    del phases
    events.clear()  # flows, instants, counters: freed now
    if no_ph:
        skipped["events without ph"] = no_ph
    if begin_end:
        # Kineto writes complete events only; other tools' B/E pairs are not read.
        skipped["begin/end (B/E) events"] = begin_end
    n = len(xs)
    texts_ts = [bytes(e.ts) for e in xs]
    texts_dur = [bytes(e.dur) for e in xs]
    missing = (np.fromiter(map(len, texts_ts), np.int64, n) == 0) | (
        np.fromiter(map(len, texts_dur), np.int64, n) == 0
    )
    no_ts, no_dur = texts_ts.count(b""), texts_dur.count(b"")
    if no_ts:
        skipped["events without ts"] = no_ts
    if no_dur:
        skipped["events without dur"] = no_dur
    start, ok_start = us_text_to_ns(texts_ts)
    dur, ok_dur = us_text_to_ns(texts_dur)
    del texts_ts, texts_dur
    has = ok_start & ok_dur
    bad_num = int((~has & ~missing).sum())
    if bad_num:
        skipped["events with non-numeric ts/dur"] = bad_num
    neg = has & (dur < 0)
    huge = has & (dur > _MAX_DUR_NS)
    if neg.any():
        skipped["events with negative dur"] = int(neg.sum())
    if huge.any():
        skipped["events with absurd dur"] = int(huge.sum())
    keep = has & ~neg & ~huge
    if not keep.all():
        xs = [xs[i] for i in np.flatnonzero(keep).tolist()]
        start, dur = start[keep], dur[keep]
    cols, table, labels = _columns(xs, start, dur)
    del xs
    order = np.argsort(cols.start, kind="stable")
    cols = cols.take(order)
    meta = _meta(path, size, top, meta_events, labels, total, skipped)
    pid_names = {v: k for k, v in labels.items()}
    return RankTrace(meta=meta, strings=table, events=cols, pid_names=pid_names)


def _columns(
    xs: list[Event], start: npt.NDArray[np.int64], dur: npt.NDArray[np.int64]
) -> tuple[EventColumns, tuple[str, ...], dict[str, int]]:
    n = len(xs)
    args = list(map(_ARGS, xs))
    ints = {f: _int_column(map(attrgetter(f), args), n) for f in _INT_ARGS}
    ext = np.where(ints["external_id"] >= 0, ints["external_id"], ints["external_id_old"])
    labels: dict[str, int] = {}
    pid = _id_column(list(map(attrgetter("pid"), xs)), n, labels)
    tid = _id_column(list(map(attrgetter("tid"), xs)), n, labels)
    # One string table for every string column; "" first so it gets id 0.
    str_lists: list[list[str]] = [
        list(map(attrgetter("cat"), xs)),
        list(map(attrgetter("name"), xs)),
        list(map(attrgetter("coll_name"), args)),
        list(map(attrgetter("dtype"), args)),
        list(map(_raw_text, map(attrgetter("input_dims"), args))),
        list(map(_raw_text, map(attrgetter("input_type"), args))),
    ]
    del args
    flat = np.empty(1 + n * len(str_lists), dtype=object)
    flat[0] = ""
    for k, lst in enumerate(str_lists):
        flat[1 + k * n : 1 + (k + 1) * n] = lst
    del str_lists
    codes, uniques = pd.factorize(flat)
    del flat
    table = tuple(str(s) for s in uniques)
    codes32 = codes[1:].astype(np.int32).reshape(6, n) if n else np.zeros((6, 0), np.int32)

    def opt(k: int) -> npt.NDArray[np.int32]:
        c = codes32[k]
        return np.where(c == 0, np.int32(-1), c)

    device_cats = np.array([t in DEVICE_CATEGORIES for t in table], dtype=np.bool_)
    cols = EventColumns(
        start=start,
        dur=dur,
        pid=pid,
        tid=tid,
        cat=codes32[0].copy(),
        name=codes32[1].copy(),
        device=ints["device"],
        stream=ints["stream"],
        correlation=ints["correlation"],
        external_id=ext,
        coll_name=opt(2),
        in_nelems=ints["in_nelems"],
        out_nelems=ints["out_nelems"],
        group_size=ints["group_size"],
        dtype=opt(3),
        seq=ints["seq"],
        nbytes=ints["nbytes"],
        input_dims=opt(4),
        input_type=opt(5),
        is_device=device_cats[codes32[0]] if n else np.zeros(0, dtype=np.bool_),
    )
    return cols, table, labels


def _meta(
    path: str,
    size: int,
    top: TraceFile,
    meta_events: list[Event],
    labels: dict[str, int],
    total: int,
    skipped: dict[str, int],
) -> TraceMeta:
    thread_names: dict[tuple[int, int], str] = {}
    process_labels: dict[int, str] = {}
    for e in meta_events:
        pid, tid = _int_or_label([e.pid, e.tid], labels)
        if e.name == "thread_name" and e.args.name:
            thread_names[(pid, tid)] = e.args.name
        elif e.name == "process_labels" and e.args.labels:
            process_labels[pid] = e.args.labels
    dist = top.distributedInfo
    rank = dist.rank if dist is not None and 0 <= dist.rank <= _I64_MAX else None
    world = dist.world_size if dist is not None and 0 < dist.world_size <= _I64_MAX else None
    pgs = tuple(
        PGConfig(
            name=pg.pg_name,
            desc=pg.pg_desc,
            backend=pg.backend_config,
            size=pg.pg_size,
            ranks=tuple(pg.ranks),
        )
        for pg in (dist.pg_config if dist is not None else [])
    )
    return TraceMeta(
        path=path,
        size_bytes=size,
        rank=rank,
        world_size=world,
        backend=(dist.backend or None) if dist is not None else None,
        pg_config=pgs,
        device_names=tuple(d.name for d in top.deviceProperties),
        schema_version=top.schemaVersion,
        base_time_ns=top.baseTimeNanoseconds,
        thread_names=thread_names,
        process_labels=process_labels,
        total_events=total,
        skipped=skipped,
    )
