"""HTA's per-rank frames -> tracescale's columnar RankTrace (no file is read).

HTA (package ``traceinsight``, import name ``hta``) holds each rank as one pandas frame of
aligned µs ``ts``/``dur`` and symbol ids; this module reads the documented attributes of the
objects it is given (``analysis.t`` is a ``hta.common.trace.Trace`` with ``get_ranks()``,
``get_trace(rank)``, ``symbol_table.sym_table``, ``meta_data``, ``trace_files`` and ``min_ts``)
and never imports HTA itself.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from tracescale.errors import UsageError
from tracescale.ingest.trace import DEVICE_CATEGORIES, EventColumns, PGConfig, RankTrace, TraceMeta

_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
HTA_HINT = "pass hta.trace_analysis.TraceAnalysis objects (or their .t Trace)"


def trace_of(analysis: Any) -> Any:
    """The ``hta.common.trace.Trace`` of a TraceAnalysis (or the Trace itself)."""
    t = getattr(analysis, "t", analysis)
    for attr in ("get_ranks", "get_trace", "symbol_table"):
        if not hasattr(t, attr):
            raise UsageError(f"from_hta: {type(analysis).__name__} has no {attr!r}; {HTA_HINT}")
    return t


def _ids(values: pd.Series, labels: dict[str, int]) -> npt.NDArray[np.int64]:
    """pid/tid as tracescale's ingest has them: ints, numeric strings as ints, labels negative."""
    if pd.api.types.is_integer_dtype(values.dtype):
        ints: npt.NDArray[np.int64] = values.to_numpy(dtype=np.int64)
        return ints
    codes, uniques = pd.factorize(values, use_na_sentinel=False)
    mapped = np.empty(len(uniques), dtype=np.int64)
    for k, v in enumerate(uniques.tolist()):
        if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
            mapped[k] = int(v) if _I64_MIN <= int(v) <= _I64_MAX else 0
        elif (isinstance(v, float) and v.is_integer()) or (
            isinstance(v, str) and v.isascii() and v.isdigit() and len(v) < 19
        ):
            mapped[k] = int(v)
        else:
            got = labels.get(str(v))
            if got is None:
                got = labels[str(v)] = -(len(labels) + 1)
            mapped[k] = got
    return mapped[codes] if len(codes) else np.zeros(0, dtype=np.int64)


def _int_col(df: pd.DataFrame, name: str, *, positive: bool = False) -> npt.NDArray[np.int64]:
    """An int64 column, -1 where absent; ``positive``: HTA's 0 defaults also become -1."""
    n = len(df)
    if name not in df.columns:
        return np.full(n, -1, dtype=np.int64)
    col = pd.to_numeric(df[name], errors="coerce").fillna(-1).to_numpy(dtype=np.float64)
    out = np.where(np.isfinite(col), col, -1).astype(np.int64)
    # HTA reads 32-bit stream ids into small ints; Kineto's uint32 -1 is -1 here either way.
    out[out == 4294967295] = -1
    if positive:
        out[out <= 0] = -1
    return out


def _text_col(df: pd.DataFrame, name: str) -> list[str]:
    """A string arg column; HTA's missing markers ('' and '-1') become ''."""
    if name not in df.columns:
        return [""] * len(df)
    out: list[str] = []
    for v in df[name].tolist():
        if v is None or (isinstance(v, float) and v != v):
            out.append("")
        elif isinstance(v, str):
            out.append("" if v in ("", "-1") else v)
        elif isinstance(v, (list, tuple, dict)):
            out.append(json.dumps(v, separators=(",", ":")))
        else:
            s = str(v)
            out.append("" if s == "-1" else s)
    return out


def _symbols(t: Any, df: pd.DataFrame, col: str) -> npt.NDArray[np.object_]:
    """Decoded ``cat``/``name`` strings (HTA stores ids into ``t.symbol_table.sym_table``)."""
    values = df[col]
    if pd.api.types.is_integer_dtype(values.dtype):
        table = np.asarray([*t.symbol_table.sym_table, ""], dtype=object)
        ids = values.to_numpy(dtype=np.int64)
        ids = np.where((ids >= 0) & (ids < len(table) - 1), ids, len(table) - 1)
        return np.asarray(table[ids], dtype=object)
    return np.asarray(values.astype(str).to_numpy(), dtype=object)


def _time_ns(df: pd.DataFrame, min_ts: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Absolute start and duration in int64 ns from HTA's aligned µs ``ts`` and ``dur``."""
    ts = df["ts"].to_numpy()
    if np.issubdtype(ts.dtype, np.integer):
        start = (ts.astype(np.int64) + np.int64(min_ts)) * 1000
    else:
        tsf = ts.astype(np.float64)
        whole = np.floor(tsf)
        start = (whole.astype(np.int64) + np.int64(min_ts)) * 1000 + np.rint(
            (tsf - whole) * 1000
        ).astype(np.int64)
    dur = np.rint(df["dur"].to_numpy(dtype=np.float64) * 1000)
    return start.astype(np.int64), np.where(np.isfinite(dur), dur, -1).astype(np.int64)


def _meta(t: Any, rank: int, path: str, n: int, skipped: dict[str, int]) -> TraceMeta:
    raw = (getattr(t, "meta_data", None) or {}).get(rank) or {}
    dist = raw.get("distributedInfo") or {}
    pgs = tuple(
        PGConfig(
            name=str(pg.get("pg_name", "")),
            desc=str(pg.get("pg_desc", "")),
            backend=str(pg.get("backend_config", "")),
            size=int(pg.get("pg_size", -1)),
            ranks=tuple(int(r) for r in pg.get("ranks", [])),
        )
        for pg in dist.get("pg_config", []) or []
        if isinstance(pg, Mapping)
    )
    world = dist.get("world_size")
    try:
        size = os.path.getsize(path)
    except OSError:
        size = 0
    return TraceMeta(
        path=path,
        size_bytes=size,
        rank=rank,
        world_size=int(world) if isinstance(world, int) and world > 0 else None,
        backend=dist.get("backend") or None,
        pg_config=pgs,
        device_names=tuple(
            str(d.get("name", "")) for d in raw.get("deviceProperties", []) or [] if d
        ),
        schema_version=raw.get("schemaVersion"),
        base_time_ns=raw.get("baseTimeNanoseconds"),
        total_events=n,
        skipped=skipped,
    )


def hta_trace_to_rank_trace(analysis: Any, rank: int) -> RankTrace:
    """One rank of a loaded HTA trace as tracescale's :class:`RankTrace` (no file is read).

    ``ts``/``dur`` are µs (``ts`` aligned by HTA to ``Trace.min_ts``) -> absolute int64 ns;
    ``cat``/``name`` ids are decoded through HTA's symbol table; the collective args HTA parses
    by default (``collective_name``, ``in_msg_nelems``, ``out_msg_nelems``, ``group_size``,
    ``msg_dtype``, ``bytes``, ``Input Dims``/``Input type``) fill the matching columns, and
    ``seq``/``device`` when the user's ``ParserConfig`` added them.
    """
    t = trace_of(analysis)
    df = t.get_trace(rank)
    path = str((getattr(t, "trace_files", None) or {}).get(rank, f"<hta rank {rank}>"))
    skipped: dict[str, int] = {}
    if "index" in df.columns:
        df = df.sort_values("index", kind="stable")
    start, dur = _time_ns(df, int(getattr(t, "min_ts", 0) or 0))
    bad = dur < 0
    if bad.any():
        skipped["events with negative or missing dur"] = int(bad.sum())
        keep = ~bad
        df, start, dur = df[keep], start[keep], dur[keep]
    n = len(df)
    labels: dict[str, int] = {}
    pid = _ids(df["pid"], labels)
    tid = _ids(df["tid"], labels)
    str_cols: list[Sequence[Any] | npt.NDArray[np.object_]] = [
        _symbols(t, df, "cat"),
        _symbols(t, df, "name"),
        _text_col(df, "collective_name"),
        _text_col(df, "msg_dtype"),
        _text_col(df, "input_dims"),
        _text_col(df, "input_type"),
    ]
    flat = np.empty(1 + n * len(str_cols), dtype=object)
    flat[0] = ""
    for k, col in enumerate(str_cols):
        flat[1 + k * n : 1 + (k + 1) * n] = list(col)
    codes, uniques = pd.factorize(flat)
    table = tuple(str(s) for s in uniques)
    c32 = codes[1:].astype(np.int32).reshape(len(str_cols), n)

    def opt(k: int) -> npt.NDArray[np.int32]:
        return np.where(c32[k] == 0, np.int32(-1), c32[k]).astype(np.int32)

    device_cats = np.array([s in DEVICE_CATEGORIES for s in table], dtype=np.bool_)
    seq_col = "seq" if "seq" in df.columns else "Seq"
    cols = EventColumns(
        start=start,
        dur=dur,
        pid=pid,
        tid=tid,
        cat=c32[0].copy(),
        name=c32[1].copy(),
        device=_int_col(df, "device"),
        stream=_int_col(df, "stream"),
        correlation=_int_col(df, "correlation"),
        external_id=_int_col(df, "external_id"),
        coll_name=opt(2),
        in_nelems=_int_col(df, "in_msg_nelems", positive=True),
        out_nelems=_int_col(df, "out_msg_nelems", positive=True),
        group_size=_int_col(df, "group_size", positive=True),
        dtype=opt(3),
        seq=_int_col(df, seq_col),
        nbytes=_int_col(df, "bytes"),
        wait_on_stream=_int_col(df, "wait_on_stream"),
        wait_on_corr=_int_col(df, "wait_on_cuda_event_record_corr_id"),
        input_dims=opt(4),
        input_type=opt(5),
        is_device=device_cats[c32[0]] if n else np.zeros(0, dtype=np.bool_),
        pg_name=np.full(len(start), -1, dtype=np.int32),  # HTA's frames drop it
        pg_ranks=np.full(len(start), -1, dtype=np.int32),
        pg_desc=np.full(len(start), -1, dtype=np.int32),
        rank_start=np.full(len(start), -1, dtype=np.int32),
        rank_stride=np.full(len(start), -1, dtype=np.int32),
        rf_id=np.full(len(start), -1, dtype=np.int64),
    )
    # by start, the longer first where starts tie: HTA rounds ts to whole µs, which gives a
    # parent and its first child one start, and the thread's nesting reads the parent first
    cols = cols.take(np.lexsort((-cols.dur, cols.start)))
    return RankTrace(
        meta=_meta(t, rank, path, n, skipped),
        strings=table,
        events=cols,
        pid_names={v: k for k, v in labels.items()},
    )
