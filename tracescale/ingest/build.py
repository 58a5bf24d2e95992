"""Decoded events -> numpy columns: one pass per column, strings interned once."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

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


class _Interner:
    """String -> dense id; pids/tids that are strings get negative ids from a second table."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {"": 0}

    def __call__(self, text: str) -> int:
        ids = self.ids
        got = ids.get(text)
        if got is None:
            got = ids[text] = len(ids)
        return got

    def table(self) -> tuple[str, ...]:
        return tuple(self.ids)


def _int_or_label(values: list[int | str], labels: dict[str, int]) -> list[int]:
    """Integer pid/tid as is; numeric strings ("25738") as ints; other strings negative ids."""
    out: list[int] = []
    for v in values:
        if isinstance(v, int):
            out.append(v)
            continue
        if v.isdigit():
            out.append(int(v))
            continue
        got = labels.get(v)
        if got is None:
            got = labels[v] = -(len(labels) + 1)
        out.append(got)
    return out


def build_trace(
    path: str, size: int, *, events: list[Event], top: TraceFile, malformed: int = 0
) -> RankTrace:
    """Columns from the complete events; metadata from ``M`` events and the top level."""
    from tracescale.errors import InvalidTraceError

    skipped: dict[str, int] = {}
    if malformed:
        skipped["malformed events"] = malformed
    total = len(events)
    meta_events = [e for e in events if e.ph == "M"]
    xs = [e for e in events if e.ph == "X"]
    if total == 0:
        raise InvalidTraceError("'traceEvents' is empty", path=path)
    no_ts = sum(1 for e in xs if not e.ts)
    no_dur = sum(1 for e in xs if not e.dur)
    if no_ts:
        skipped["events without ts"] = no_ts
    if no_dur:
        skipped["events without dur"] = no_dur
    if no_ts or no_dur:
        xs = [e for e in xs if e.ts and e.dur]
    start, ok_start = us_text_to_ns([bytes(e.ts) for e in xs])
    dur, ok_dur = us_text_to_ns([bytes(e.dur) for e in xs])
    good = ok_start & ok_dur
    bad_num = int((~good).sum())
    if bad_num:
        skipped["events with non-numeric ts/dur"] = bad_num
    neg = good & (dur < 0)
    huge = good & (dur > _MAX_DUR_NS)
    if neg.any():
        skipped["events with negative dur"] = int(neg.sum())
    if huge.any():
        skipped["events with absurd dur"] = int(huge.sum())
    keep = good & ~neg & ~huge
    if not keep.all():
        idx = np.flatnonzero(keep)
        xs = [xs[i] for i in idx.tolist()]
        start, dur = start[keep], dur[keep]

    strings = _Interner()
    labels: dict[str, int] = {}
    cat = np.array([strings(e.cat) for e in xs], dtype=np.int32)
    name = np.array([strings(e.name) for e in xs], dtype=np.int32)
    pid = np.array(_int_or_label([e.pid for e in xs], labels), dtype=np.int64)
    tid = np.array(_int_or_label([e.tid for e in xs], labels), dtype=np.int64)
    args = [e.args for e in xs]
    ext = np.array([a.external_id for a in args], dtype=np.int64)
    ext_old = np.array([a.external_id_old for a in args], dtype=np.int64)
    ext = np.where(ext >= 0, ext, ext_old)

    def sid(text: str) -> int:
        return strings(text) if text else -1

    def raw_sid(raw: Any) -> int:
        return strings(bytes(raw).decode("utf-8", "replace")) if raw else -1

    cols = EventColumns(
        start=start,
        dur=dur,
        pid=pid,
        tid=tid,
        cat=cat,
        name=name,
        device=np.array([a.device for a in args], dtype=np.int64),
        stream=np.array([a.stream for a in args], dtype=np.int64),
        correlation=np.array([a.correlation for a in args], dtype=np.int64),
        external_id=ext,
        coll_name=np.array([sid(a.coll_name) for a in args], dtype=np.int32),
        in_nelems=np.array([a.in_nelems for a in args], dtype=np.int64),
        out_nelems=np.array([a.out_nelems for a in args], dtype=np.int64),
        group_size=np.array([a.group_size for a in args], dtype=np.int64),
        dtype=np.array([sid(a.dtype) for a in args], dtype=np.int32),
        seq=np.array([a.seq for a in args], dtype=np.int64),
        nbytes=np.array([a.nbytes for a in args], dtype=np.int64),
        input_dims=np.array([raw_sid(a.input_dims) for a in args], dtype=np.int32),
        input_type=np.array([raw_sid(a.input_type) for a in args], dtype=np.int32),
        is_device=np.zeros(len(xs), dtype=np.bool_),
    )
    table = strings.table()
    device_cats = np.array([t in DEVICE_CATEGORIES for t in table], dtype=np.bool_)
    cols.is_device[:] = device_cats[cols.cat]
    order = np.argsort(cols.start, kind="stable")
    cols = cols.take(order)
    meta = _meta(path, size, top, meta_events, labels, total, skipped)
    pid_names = {v: k for k, v in labels.items()}
    return RankTrace(meta=meta, strings=table, events=cols, pid_names=pid_names)


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
    rank = dist.rank if dist is not None and dist.rank >= 0 else None
    world = dist.world_size if dist is not None and dist.world_size > 0 else None
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
