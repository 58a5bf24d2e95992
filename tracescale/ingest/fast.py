"""JSON bytes -> filled :class:`Builder` through the compiled scanner (:mod:`.scan`).

Used when numba is installed; the typed msgspec path of :mod:`.decode` runs otherwise, and
whenever the scanner gives up on a file. The result is the typed path's exactly, column by
column and id by id: string ids in the order the typed path's chunk-by-chunk interning meets
the strings, the same negative labels for string pids, skipped events counted and named in
the same order (tested on every shipped, real and simulated trace against both paths).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from tracescale.categories import ANNOTATION_CAT
from tracescale.ingest.build import STRING_COLUMNS, Builder
from tracescale.ingest.numbers import is_out_of_range, slow_parse
from tracescale.ingest.schema import CHUNK_DECODER, CHUNK_EVENTS, TOP_DECODER, Args, TraceFile

try:  # numba is optional: without it every file takes the typed path
    from tracescale.ingest import jsonbytes, scan
except ImportError:  # pragma: no cover - exercised where numba is not installed
    scan = None  # type: ignore[assignment]

_I64 = npt.NDArray[np.int64]
#: Files holding this string (as tracescale annotate writes its tracks) take the typed path.
_ANNOTATION_TEXT = b'"' + ANNOTATION_CAT.encode() + b'"'
#: String columns read from the event's args (``cat`` and ``name`` are the event's own; the
#: args' ``name`` is a thread name of ``M`` events, not a column).
_ARG_STRING_COLUMNS = tuple(c for c in STRING_COLUMNS if c not in ("cat", "name"))


def _arg_layout() -> dict[str, Any] | None:
    """The scanner's arg keys and column slots, derived from the typed decoder's ``Args`` (an
    arg added there is read here too); None when it has a type the scanner cannot read."""
    if scan is None:
        return None
    keys: list[bytes] = []
    kinds: list[int] = []
    slots: list[int] = []
    int_cols: list[str] = []
    str_cols: list[str] = []
    for f in msgspec.structs.fields(Args):
        keys.append(f.encode_name.encode())
        if f.type is int:
            kinds.append(scan.ARG_INT)
            slots.append(scan.N_FIXED_I64 + len(int_cols))
            int_cols.append(f.name)
        elif f.type in (str, msgspec.Raw) and f.name in _ARG_STRING_COLUMNS:
            kinds.append(scan.ARG_RAW if f.type is msgspec.Raw else scan.ARG_STR)
            slots.append(scan.N_FIXED_I32 + len(str_cols))
            str_cols.append(f.name)
        elif f.type is str:
            kinds.append(scan.ARG_CHECK_STR)
            slots.append(-1)
        else:
            return None
    if len(keys) > 62:  # one bit per key in the duplicate check
        return None
    return {
        "arg_keys": scan.key_table(keys),
        "kinds": np.array(kinds, dtype=np.int64),
        "slots": np.array(slots, dtype=np.int64),
        "int_cols": int_cols,
        "str_cols": str_cols,
    }


_LAYOUT = _arg_layout()
_TRACE_EVENTS = np.frombuffer(b"traceEvents", dtype=np.uint8)


_loaded: list[bool] = []


def warm_up() -> None:
    """Load the compiled scanner now (from numba's cache, or compile it once). Called before
    workers are forked, so they share the machine code instead of each loading it."""
    if available() and not _loaded:
        scanned = scan_trace(bytearray(_TINY))
        if scanned is not None:
            build_columns(scanned)
        _loaded.append(True)


def loaded() -> bool:
    """Whether this process has the scanner loaded (then every file goes through it)."""
    return bool(_loaded)


_TINY = (
    b'{"traceEvents": [{"ph": "X", "cat": "c", "name": "n", "pid": "p", "tid": 1, "ts": 1,'
    b' "dur": 1, "args": {"Seq": 1, "dtype": "f", "Input Dims": [[1]]}}]}'
)


def available() -> bool:
    """Whether the compiled scanner runs here (numba imports and the schema fits it)."""
    return _LAYOUT is not None


@dataclass
class Scanned:
    """What the scanner read from one file: arrays and decoded strings, no reference left to
    the JSON bytes (the caller frees them before the columns are built)."""

    top: TraceFile
    n_events: int
    phases: npt.NDArray[np.uint8]
    i64: _I64
    i32: npt.NDArray[np.int32]
    slow_rows: list[list[int]]
    slow_values: list[int | None]
    texts: list[str]
    meta_events: list[Any]
    #: Rows whose ts or dur did not parse but is a number (only too large): "out of range"
    huge_rows: list[int] = field(default_factory=list)


def scan_trace(data: bytes | bytearray) -> Scanned | None:
    """The scanner's pass over one file; None where the typed path must read it."""
    layout = _LAYOUT
    if layout is None or scan is None or not data.isascii():
        return None
    if data.find(_ANNOTATION_TEXT) >= 0:
        return None  # annotated copies: the typed path drops tracescale's own tracks
    try:
        top_raw = TOP_DECODER.decode(data)  # validates all of the JSON, decodes the top
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None
    whole = np.frombuffer(data, dtype=np.uint8)
    whole.flags.writeable = False  # one compiled signature for bytes and bytearray input
    lo, hi, count = scan.find_top_key(whole, _TRACE_EVENTS)
    if count != 1 or hi - lo < 2 or whole[lo] != ord("["):
        return None
    buf = whole[lo:hi]  # a view: the JSON is never copied
    del whole
    n_i64 = scan.N_FIXED_I64 + len(layout["int_cols"])
    n_i32 = scan.N_FIXED_I32 + len(layout["str_cols"])
    out = scan.scan_events(
        buf,
        0,
        buf.shape[0],
        scan.EVENT_KEYS,
        layout["arg_keys"],
        layout["kinds"],
        layout["slots"],
        n_i64,
        n_i32,
    )
    status, n_ev, nx, phases, i64, i32, slow, n_slow, metas, n_meta, spans, n_str = out
    del out
    if status != scan.OK:
        return None
    texts = _decode_strings(buf, spans[:n_str])
    meta_events = _meta_events(buf, metas[:n_meta])
    if texts is None or meta_events is None:
        return None
    slow_rows = slow[:n_slow].tolist()
    slow_values = [slow_parse(buf[s:e].tobytes()) for _r, _w, s, e in slow_rows]
    huge_rows = [
        r
        for (r, _w, s, e), v in zip(slow_rows, slow_values, strict=True)
        if v is None and is_out_of_range(buf[s:e].tobytes())
    ]
    del buf
    top = TraceFile(
        schemaVersion=top_raw.schemaVersion,
        distributedInfo=top_raw.distributedInfo,
        deviceProperties=top_raw.deviceProperties,
        baseTimeNanoseconds=top_raw.baseTimeNanoseconds,
    )
    return Scanned(
        top,
        int(n_ev),
        phases[:n_ev],
        i64[:, :nx],
        i32[:, :nx],
        slow_rows,
        slow_values,
        texts,
        meta_events,
        huge_rows,
    )


def build_columns(scanned: Scanned) -> tuple[TraceFile, Builder]:
    """The top level and a builder filled as the typed path fills it (JSON already freed)."""
    assert scan is not None and _LAYOUT is not None
    layout = _LAYOUT
    i64, i32, texts = scanned.i64, scanned.i32, scanned.texts
    builder = Builder()
    builder.total = scanned.n_events
    builder.meta_events = scanned.meta_events
    chunk_phases = _count_phases(scanned.phases)
    # Column-major: each column is a contiguous view; copies only where rows are dropped.
    keep = _times(
        builder,
        chunk_phases,
        i64,
        i32,
        (scanned.slow_rows, scanned.slow_values, scanned.huge_rows),
    )
    if not keep.all():
        i64, i32 = i64[:, keep], i32[:, keep]
    scanned_top = scanned.top
    del scanned
    cols: dict[str, npt.NDArray[Any]] = {"start": i64[scan.I_TS], "dur": i64[scan.I_DUR]}
    for k, name in enumerate(layout["int_cols"]):
        cols[name] = i64[scan.N_FIXED_I64 + k]
    _strings(builder, cols, i32, texts, layout["str_cols"])
    flags = i32[scan.J_FLAGS]
    evidx = i32[scan.J_EVIDX]
    _pids(builder, cols, i64[scan.I_PID], i64[scan.I_TID], flags, evidx, texts)
    builder.parts.append(cols)
    return scanned_top, builder


def _count_phases(phases: npt.NDArray[np.uint8]) -> list[tuple[int, int]]:
    """Per chunk of events: how many have no phase, and how many are B/E."""
    assert scan is not None
    chunk = np.arange(phases.shape[0]) // CHUNK_EVENTS
    n_chunks = int(chunk[-1]) + 1 if phases.shape[0] else 0
    no_ph = np.bincount(chunk[phases == scan.PH_NONE], minlength=n_chunks)
    be = np.bincount(chunk[(phases == scan.PH_B) | (phases == scan.PH_E)], minlength=n_chunks)
    return list(zip(no_ph.tolist(), be.tolist(), strict=True))


def _times(
    builder: Builder,
    chunk_phases: list[tuple[int, int]],
    i64: _I64,
    i32: npt.NDArray[np.int32],
    slow: tuple[list[list[int]], list[int | None], list[int]],
) -> npt.NDArray[np.bool_]:
    """Rows with usable times, the skipped ones counted chunk by chunk as the typed path does."""
    assert scan is not None
    slow_rows, slow_values, huge_rows = slow
    flags = i32[scan.J_FLAGS]
    ts_st, dur_st = flags & 3, (flags >> 2) & 3
    ok_start, ok_dur = ts_st == jsonbytes.NUM_PLAIN, dur_st == jsonbytes.NUM_PLAIN
    for (row, which, _s, _e), value in zip(slow_rows, slow_values, strict=True):
        if value is not None:
            i64[scan.I_TS if which == 0 else scan.I_DUR, row] = value
            (ok_start if which == 0 else ok_dur)[row] = True
    no_ts, no_dur = ts_st == jsonbytes.NUM_MISSING, dur_st == jsonbytes.NUM_MISSING
    huge = np.zeros(i64.shape[1], dtype=np.bool_)
    for row in huge_rows:
        huge[row] = True
    dur = i64[scan.I_DUR]
    row_chunk = i32[scan.J_EVIDX] // CHUNK_EVENTS
    bounds = np.searchsorted(row_chunk, np.arange(len(chunk_phases) + 1))
    keep = np.zeros(i64.shape[1], dtype=np.bool_)
    for c, (no_ph, be) in enumerate(chunk_phases):
        builder.skip_phases(no_ph, be)
        lo, hi = int(bounds[c]), int(bounds[c + 1])
        part = slice(lo, hi)
        keep[part] = builder.valid_times(
            dur[part], ok_start[part], ok_dur[part], no_ts[part], no_dur[part], huge[part]
        )
    return keep


def _strings(
    builder: Builder,
    cols: dict[str, npt.NDArray[Any]],
    i32: npt.NDArray[np.int32],
    texts: list[str],
    str_cols: list[str],
) -> None:
    """String columns as table ids, the table in the typed path's first-seen order."""
    assert scan is not None
    distinct: dict[str, int] = {"": 0}
    # Slice id -> distinct text id; the extra last entry is for -1 (absent: "").
    text_id = np.array([distinct.setdefault(t, len(distinct)) for t in texts] + [0], np.int64)
    where = {"cat": scan.J_CAT, "name": scan.J_NAME}
    where.update({name: scan.N_FIXED_I32 + k for k, name in enumerate(str_cols)})
    ids = np.stack([text_id[i32[where[c]]] for c in STRING_COLUMNS], axis=1).astype(np.int32)
    first = scan.first_keys(ids, i32[scan.J_EVIDX], len(distinct), CHUNK_EVENTS)
    first[0] = -1  # "" is id 0 whatever comes first
    seen = np.flatnonzero(first < np.iinfo(np.int64).max)
    order = seen[np.argsort(first[seen], kind="stable")]
    final = np.full(len(distinct), -1, dtype=np.int32)
    final[order] = np.arange(order.shape[0], dtype=np.int32)
    by_id = list(distinct)
    builder.strings.ids = {by_id[i]: k for k, i in enumerate(order.tolist())}
    for k, name in enumerate(STRING_COLUMNS):
        cols[name] = final[ids[:, k]]


def _pids(
    builder: Builder,
    cols: dict[str, npt.NDArray[Any]],
    pid: _I64,
    tid: _I64,
    flags: npt.NDArray[np.int32],
    evidx: npt.NDArray[np.int32],
    texts: list[str],
) -> None:
    """pid/tid: ints as they are; numeric strings as ints; other strings negative labels,
    numbered in the order the typed path meets them (per chunk, pids before tids)."""
    assert scan is not None
    is_str = np.stack([(flags & scan.PID_STR) != 0, (flags & scan.TID_STR) != 0], axis=1)
    values = np.stack([pid, tid], axis=1)
    if not is_str.any():
        cols["pid"], cols["tid"] = pid, tid
        return
    n = len(texts)
    slice_ids = np.where(is_str, values, n)  # n: "not a string" (ignored below)
    first = scan.first_keys(slice_ids, evidx, n + 1, CHUNK_EVENTS)[:n]
    used = np.flatnonzero(first < np.iinfo(np.int64).max)
    as_int = np.zeros(n + 1, dtype=np.int64)
    for sid in used[np.argsort(first[used], kind="stable")].tolist():
        text = texts[sid]
        if text.isascii() and text.isdigit() and len(text) < 19:
            as_int[sid] = int(text)
        else:
            got = builder.labels.get(text)
            if got is None:
                got = builder.labels[text] = -(len(builder.labels) + 1)
            as_int[sid] = got
    out = np.where(is_str, as_int[slice_ids], values)
    cols["pid"], cols["tid"] = out[:, 0].copy(), out[:, 1].copy()


def _decode_strings(buf: npt.NDArray[np.uint8], spans: npt.NDArray[np.int64]) -> list[str] | None:
    """Each interned slice as text: string contents unescaped as JSON does, raw values as is."""
    out: list[str] = []
    for s, e, kind in spans.tolist():
        piece = buf[s:e].tobytes()
        if kind == 1:
            out.append(piece.decode("utf-8", "replace"))
        elif b"\\" in piece:
            try:
                out.append(msgspec.json.decode(b'"' + piece + b'"', type=str))
            except msgspec.DecodeError:
                return None
        else:
            out.append(piece.decode("ascii"))
    return out


def _meta_events(buf: npt.NDArray[np.uint8], spans: npt.NDArray[np.int64]) -> list[Any] | None:
    """``M`` events through the typed decoder (a handful per file)."""
    if spans.shape[0] == 0:
        return []
    body = b",".join(buf[s:e].tobytes() for s, e in spans.tolist())
    try:
        return list(CHUNK_DECODER.decode(b"[" + body + b"]"))
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None
