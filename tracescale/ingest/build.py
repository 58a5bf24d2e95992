"""Decoded events -> numpy columns: C-level passes (``map``/``attrgetter``/``fromiter``) per column.

Speed and peak memory matter here (a 54 MB trace decodes to ~200k structs), so there is no
per-event Python code on the hot path: columns come from ``np.fromiter(map(attrgetter(...)))``,
strings are interned for all columns at once (C-level ``dict.fromkeys`` and ``map``; ids in
order of first appearance, as ``pandas.factorize`` gave them, without importing pandas), and
the decoded structs are released as soon as their columns exist.
"""

from __future__ import annotations

from collections.abc import Iterable
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from tracescale.categories import ANNOTATION_CAT
from tracescale.errors import InvalidTraceError
from tracescale.ingest.devices import queue_streams
from tracescale.ingest.numbers import is_out_of_range, us_text_to_ns
from tracescale.ingest.trace import (
    DEVICE_CATEGORIES,
    EventColumns,
    PGConfig,
    RankTrace,
    TraceMeta,
)

if TYPE_CHECKING:
    from tracescale.ingest.schema import Event, TraceFile

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
    "rank_start",
    "rank_stride",
    "nbytes",
    "rf_id",
    "wait_on_stream",
    "wait_on_corr",
)
#: String-id columns, in the order their strings are interned (which fixes the ids).
STRING_COLUMNS = (
    "cat",
    "name",
    "coll_name",
    "dtype",
    "input_dims",
    "input_type",
    "pg_name",
    "pg_ranks",
    "pg_desc",
)
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
_PH = attrgetter("ph")
_ARGS = attrgetter("args")
_CAT = attrgetter("cat")


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


def _out_of_range_rows(texts: list[bytes], ok: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
    """Rows whose present but unusable time text is a number too large (see is_out_of_range)."""
    out = np.zeros(len(texts), dtype=np.bool_)
    for i in np.flatnonzero(~ok).tolist():
        out[i] = bool(texts[i]) and is_out_of_range(texts[i])
    return out


def _raw_text(raw: Any) -> str:
    return bytes(raw).decode("utf-8", "replace") if raw else ""


class _Strings:
    """One string table across chunks; "" is id 0 (absent values map to -1 by the caller)."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {"": 0}

    def encode(self, flat: npt.NDArray[np.object_]) -> npt.NDArray[np.int32]:
        """Global ids of an object array of strings: the uniques found in C (first appearance
        first), given ids, then every value mapped in C."""
        if flat.shape[0] == 0:
            return np.zeros(0, dtype=np.int32)
        ids = self.ids
        local = {u: ids.setdefault(str(u), len(ids)) for u in dict.fromkeys(flat.tolist())}
        out: npt.NDArray[np.int32] = np.fromiter(
            map(local.__getitem__, flat.tolist()), dtype=np.int32, count=flat.shape[0]
        )
        return out

    def table(self) -> tuple[str, ...]:
        return tuple(self.ids)


class Builder:
    """Accumulates columns chunk by chunk, so only one chunk of decoded structs is alive.

    The compiled scanner fills one part with all columns and the same bookkeeping (string
    table, pid labels, skip counts) instead of calling :meth:`add`.
    """

    def __init__(self) -> None:
        self.parts: list[dict[str, npt.NDArray[Any]]] = []
        self.meta_events: list[Event] = []
        self.strings = _Strings()
        self.labels: dict[str, int] = {}
        self.skipped: dict[str, int] = {}
        self.total = 0

    def skip(self, what: str, count: int) -> None:
        if count:
            self.skipped[what] = self.skipped.get(what, 0) + int(count)

    def skip_phases(self, no_ph: int, begin_end: int) -> None:
        """Count events without a phase, and B/E pairs (Kineto writes complete events only;
        other tools' B/E pairs are not read)."""
        self.skip("events without ph", no_ph)
        self.skip("begin/end (B/E) events", begin_end)

    def valid_times(
        self,
        dur: npt.NDArray[np.int64],
        ok_start: npt.NDArray[np.bool_],
        ok_dur: npt.NDArray[np.bool_],
        no_ts: npt.NDArray[np.bool_],
        no_dur: npt.NDArray[np.bool_],
        out_of_range: npt.NDArray[np.bool_] | None = None,
    ) -> npt.NDArray[np.bool_]:
        """Which complete events have usable times; the others are counted by reason
        (``out_of_range``: rows whose unusable ts or dur is a number, only too large)."""
        self.skip("events without ts", int(no_ts.sum()))
        self.skip("events without dur", int(no_dur.sum()))
        has = ok_start & ok_dur
        bad = ~has & ~(no_ts | no_dur)
        huge_time = bad & out_of_range if out_of_range is not None else np.zeros_like(bad)
        self.skip("events with ts/dur out of range", int(huge_time.sum()))
        self.skip("events with non-numeric ts/dur", int((bad & ~huge_time).sum()))
        neg = has & (dur < 0)
        huge = has & (dur > _MAX_DUR_NS)
        self.skip("events with negative dur", int(neg.sum()))
        self.skip("events with absurd dur", int(huge.sum()))
        keep: npt.NDArray[np.bool_] = has & ~neg & ~huge
        return keep

    def add(self, events: list[Event]) -> None:
        """Columns of one chunk's complete events; consumes (clears) ``events``."""
        if list(map(_CAT, events)).count(ANNOTATION_CAT):  # tracescale's own added tracks
            kept = [e for e in events if e.cat != ANNOTATION_CAT]
            events.clear()
            events.extend(kept)
        self.total += len(events)
        phases = list(map(_PH, events))
        xs = [e for e, ph in zip(events, phases, strict=True) if ph == "X"]
        self.meta_events.extend(e for e, ph in zip(events, phases, strict=True) if ph == "M")
        self.skip_phases(phases.count(""), phases.count("B") + phases.count("E"))
        del phases
        events.clear()  # flows, instants, counters: freed now
        texts_ts = [bytes(e.ts) for e in xs]
        texts_dur = [bytes(e.dur) for e in xs]
        no_ts = np.fromiter(map(len, texts_ts), np.int64, len(xs)) == 0
        no_dur = np.fromiter(map(len, texts_dur), np.int64, len(xs)) == 0
        start, ok_start = us_text_to_ns(texts_ts)
        dur, ok_dur = us_text_to_ns(texts_dur)
        huge = _out_of_range_rows(texts_ts, ok_start) | _out_of_range_rows(texts_dur, ok_dur)
        del texts_ts, texts_dur
        keep = self.valid_times(dur, ok_start, ok_dur, no_ts, no_dur, huge)
        if not keep.all():
            xs = [xs[i] for i in np.flatnonzero(keep).tolist()]
            start, dur = start[keep], dur[keep]
        self.parts.append(self._columns(xs, start, dur))

    def _columns(
        self, xs: list[Event], start: npt.NDArray[np.int64], dur: npt.NDArray[np.int64]
    ) -> dict[str, npt.NDArray[Any]]:
        n = len(xs)
        args = list(map(_ARGS, xs))
        cols: dict[str, npt.NDArray[Any]] = {
            f: _int_column(map(attrgetter(f), args), n) for f in _INT_ARGS
        }
        cols["start"], cols["dur"] = start, dur
        cols["pid"] = _id_column(list(map(attrgetter("pid"), xs)), n, self.labels)
        cols["tid"] = _id_column(list(map(attrgetter("tid"), xs)), n, self.labels)
        str_lists: list[list[str]] = [
            list(map(attrgetter("cat"), xs)),
            list(map(attrgetter("name"), xs)),
            list(map(attrgetter("coll_name"), args)),
            list(map(attrgetter("dtype"), args)),
            list(map(_raw_text, map(attrgetter("input_dims"), args))),
            list(map(_raw_text, map(attrgetter("input_type"), args))),
            list(map(attrgetter("pg_name"), args)),
            list(map(_raw_text, map(attrgetter("pg_ranks"), args))),
            list(map(attrgetter("pg_desc"), args)),
        ]
        del args
        flat = np.empty(n * len(str_lists), dtype=object)
        for k, lst in enumerate(str_lists):
            flat[k * n : (k + 1) * n] = lst
        del str_lists
        codes = self.strings.encode(flat).reshape(len(STRING_COLUMNS), n)
        for k, key in enumerate(STRING_COLUMNS):
            cols[key] = codes[k].copy()
        return cols

    def finish(self, path: str, size: int, top: TraceFile, malformed: int) -> RankTrace:
        self.skip("malformed events", malformed)
        total = self.total + malformed
        if total == 0:
            raise InvalidTraceError("'traceEvents' is empty", path=path)
        parts = self.parts
        start_all = np.concatenate([p["start"] for p in parts]) if parts else np.zeros(0, np.int64)
        order = np.argsort(start_all, kind="stable")
        del start_all

        def cat(key: str, dtype: type) -> npt.NDArray[Any]:
            """One sorted column; the chunks' pieces of it are freed as soon as it exists."""
            if not parts:
                return np.zeros(0, dtype=dtype)
            pieces = [p.pop(key) for p in parts]
            out: npt.NDArray[Any] = pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
            del pieces
            return out.astype(dtype, copy=False)[order]

        table = self.strings.table()

        def rank_col(key: str) -> npt.NDArray[np.int32]:
            """A rank or stride: int32 (ranks are far below 2**31), -1 when out of range."""
            c = cat(key, np.int64)
            return np.where((c >= -1) & (c < 2**31), c, -1).astype(np.int32)

        def opt(key: str) -> npt.NDArray[np.int32]:
            c = cat(key, np.int32)
            return np.where(c == 0, np.int32(-1), c)

        ext, ext_old = cat("external_id", np.int64), cat("external_id_old", np.int64)
        cat_ids = cat("cat", np.int32)
        device_cats = np.array([t in DEVICE_CATEGORIES for t in table], dtype=np.bool_)
        tid = cat("tid", np.int64)
        cols = EventColumns(
            start=cat("start", np.int64),
            dur=cat("dur", np.int64),
            pid=cat("pid", np.int64),
            tid=tid,
            cat=cat_ids,
            name=cat("name", np.int32),
            device=cat("device", np.int64),
            stream=queue_streams(cat("stream", np.int64), tid, cat_ids, table),
            correlation=cat("correlation", np.int64),
            external_id=np.where(ext >= 0, ext, ext_old),
            rf_id=cat("rf_id", np.int64),
            coll_name=opt("coll_name"),
            in_nelems=cat("in_nelems", np.int64),
            out_nelems=cat("out_nelems", np.int64),
            group_size=cat("group_size", np.int64),
            dtype=opt("dtype"),
            seq=cat("seq", np.int64),
            nbytes=cat("nbytes", np.int64),
            wait_on_stream=cat("wait_on_stream", np.int64),
            wait_on_corr=cat("wait_on_corr", np.int64),
            input_dims=opt("input_dims"),
            input_type=opt("input_type"),
            pg_name=opt("pg_name"),
            pg_ranks=opt("pg_ranks"),
            pg_desc=opt("pg_desc"),
            rank_start=rank_col("rank_start"),
            rank_stride=rank_col("rank_stride"),
            is_device=device_cats[cat_ids],
        )
        self.parts = []
        meta = _meta(path, size, top, self.meta_events, self.labels, total, self.skipped)
        pid_names = {v: k for k, v in self.labels.items()}
        return RankTrace(meta=meta, strings=table, events=cols, pid_names=pid_names)


def build_trace(
    path: str, size: int, *, events: list[Event], top: TraceFile, malformed: int = 0
) -> RankTrace:
    """Columns from the complete events; metadata from ``M`` events and the top level.

    Consumes ``events`` (the list is cleared) so the decoded structs are freed early.
    """
    builder = Builder()
    builder.add(events)
    return builder.finish(path, size, top, malformed)


def build_trace_chunks(
    path: str, size: int, *, chunks: Iterable[list[Event]], top: TraceFile
) -> RankTrace:
    """Like :func:`build_trace` over successive chunks of events (bounded decode memory)."""
    builder = Builder()
    for events in chunks:
        builder.add(events)
    return builder.finish(path, size, top, 0)


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
    ids: dict[tuple[Any, Any], list[int]] = {}  # a trace repeats its few (pid, tid) pairs
    for e in meta_events:
        name = e.name  # most metadata events are sort indices and names no figure reads
        if name != "thread_name" and name != "process_labels":
            continue
        raw = (e.pid, e.tid)
        got = ids.get(raw)
        if got is None:
            got = ids[raw] = _int_or_label(list(raw), labels)
        if name == "thread_name" and e.args.name:
            thread_names[(got[0], got[1])] = e.args.name
        elif name == "process_labels" and e.args.labels:
            process_labels[got[0]] = e.args.labels
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
