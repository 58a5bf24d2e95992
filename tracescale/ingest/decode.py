"""Bytes on disk -> :class:`RankTrace`: gzip, typed JSON decoding, one vectorized pass.

msgspec decodes straight into small Structs holding only the fields we keep (no dicts, unknown
keys skipped in C), ``ts``/``dur`` arrive as raw number text for exact ns parsing. Files that
break the typed schema (wrong types, >64-bit ints, NaN) take a slower lenient path that skips and
counts the bad events instead of failing the whole file.
"""

from __future__ import annotations

import json
import os
import sys
import zlib
from collections.abc import Iterator
from typing import Any

import msgspec

from tracescale.errors import InvalidTraceError
from tracescale.ingest.build import build_trace, build_trace_chunks
from tracescale.ingest.schema import (
    CHUNK_DECODER,
    CHUNK_EVENTS,
    NO_ARGS,
    NO_RAW,
    RAW_DECODER,
    Args,
    Event,
    TraceFile,
)
from tracescale.ingest.sniff import DEFAULT_MEMORY_BUDGET as DEFAULT_MEMORY_BUDGET
from tracescale.ingest.trace import RankTrace

_inflate: Any
try:  # ISA-L inflates gzip ~2x faster than zlib, with the same streaming interface
    from isal import isal_zlib as _inflate
except ImportError:  # pragma: no cover - isal is a dependency; zlib where it has no wheel
    _inflate = zlib

#: JSON bytes from which loading the compiled scanner (numba: about a second, once per
#: process) pays for itself; it saves ~10 ms per MB over the typed path.
SCANNER_WORTH_BYTES = 100_000_000
_CHUNK = 1024 * 1024  # compressed bytes read at a time
_MAX_RATIO = 1032  # deflate never compresses better than this
_PREALLOC_RATIO = 64  # traces compress ~20-30x; beyond this, grow instead of trusting it
_OUT_CHUNK = 1024 * 1024  # most decompressed bytes per zlib call (bigger ones overshoot RSS)


def read_bytes(path: str, *, memory_budget: int = DEFAULT_MEMORY_BUDGET) -> bytes | bytearray:
    """The file's JSON bytes, gunzipped when it starts with the gzip magic (any file name)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(2)
            fh.seek(0)
            if head != b"\x1f\x8b":
                size = os.fstat(fh.fileno()).st_size
                if size > memory_budget:
                    raise InvalidTraceError(
                        f"file is {_gb(size)}, over the memory budget of "
                        f"{_gb(memory_budget)} (raise it with --memory-budget)",
                        path=path,
                    )
                return fh.read()
            return _gunzip(fh, path, memory_budget)
    except IsADirectoryError as exc:
        raise InvalidTraceError("is a directory, not a trace file", path=path) from exc
    except PermissionError as exc:
        raise InvalidTraceError("permission denied", path=path) from exc
    except FileNotFoundError as exc:
        raise InvalidTraceError("no such file", path=path) from exc
    except OSError as exc:
        raise InvalidTraceError(f"cannot read: {exc.strerror or exc}", path=path) from exc


def _gb(nbytes: int | float) -> str:
    """Sizes in messages: GB, or MB below 1 GB (a 0.0 GB budget reads like a bug)."""
    return f"{nbytes / 1e9:.1f} GB" if nbytes >= 1e9 else f"{nbytes / 1e6:.1f} MB"


def _gunzip(fh: Any, path: str, memory_budget: int) -> bytearray:
    """Inflate in large chunks (ISA-L or zlib), enforcing the budget before memory runs out.

    Every member is read: a gzip file may be several members back to back (``cat a.gz b.gz``,
    pigz), and the file is their concatenation; stopping at the first would analyze part of
    a trace as if it were all of it. NUL padding after the last member is ignored; any other
    data after a member is refused.
    """
    size = os.fstat(fh.fileno()).st_size
    isize = 0
    if size >= 18:
        fh.seek(size - 4)
        isize = int.from_bytes(fh.read(4), "little")  # gzip trailer: length mod 2**32
        fh.seek(0)
        if isize > size * _MAX_RATIO:  # corrupt or truncated file: the trailer is noise
            isize = 0
        if isize > memory_budget:
            raise InvalidTraceError(
                f"decompresses to {_gb(isize)}, over the memory budget of "
                f"{_gb(memory_budget)} (raise it with --memory-budget)",
                path=path,
            )
    inflater = _inflate.decompressobj(wbits=31)
    # Preallocated from the trailer so growth never holds two copies; grows if it lied.
    buf = bytearray(isize if isize <= size * _PREALLOC_RATIO else 0)
    filled = 0
    chunk = fh.read(_CHUNK)
    while chunk:
        try:
            out = inflater.decompress(chunk, _OUT_CHUNK)
        except (zlib.error, _inflate.error) as exc:
            raise InvalidTraceError(f"corrupt gzip data ({exc})", path=path) from exc
        end = filled + len(out)
        if end > memory_budget:
            raise InvalidTraceError(
                "decompressed size exceeds the memory budget of "
                f"{_gb(memory_budget)} (raise it with --memory-budget)",
                path=path,
            )
        if end <= len(buf):
            buf[filled:end] = out
        else:
            del buf[filled:]
            buf += out
        filled = end
        if inflater.eof:
            chunk = _next_member(fh, inflater.unused_data, path)
            if chunk:
                inflater = _inflate.decompressobj(wbits=31)
            continue
        chunk = inflater.unconsumed_tail or fh.read(_CHUNK)
    del buf[filled:]
    if not inflater.eof:
        raise InvalidTraceError("truncated gzip file (unexpected end of data)", path=path)
    return buf


def _next_member(fh: Any, rest: bytes, path: str) -> bytes:
    """The start of the gzip member after the one just ended (``rest``: the bytes read past
    its end), or b"" at the end of the file, NUL padding skipped; other data is an error."""
    while not (rest := rest.lstrip(b"\0")):
        rest = fh.read(_CHUNK)
        if not rest:
            return b""
    if len(rest) < 2:
        rest += fh.read(1)
    if rest[:2] != b"\x1f\x8b":
        raise InvalidTraceError(
            "data after the end of the gzip stream that is not another gzip member", path=path
        )
    return rest


def load_trace(path: str, *, memory_budget: int = DEFAULT_MEMORY_BUDGET) -> RankTrace:
    """Read one Kineto trace file into a :class:`RankTrace`.

    ``memory_budget`` bounds the decompressed JSON size (peak memory is about twice that);
    a bigger file fails before it is inflated. Raises :class:`InvalidTraceError` naming
    what is wrong with the file.
    """
    data = read_bytes(path, memory_budget=memory_budget)
    size = os.path.getsize(path)
    if not data or data.isspace():
        raise InvalidTraceError("empty file", path=path)
    if _use_scanner(len(data)):
        from tracescale.ingest import fast

        scanned = fast.scan_trace(data)
        if scanned is not None:
            del data  # the JSON is freed before the columns are built and sorted
            top, builder = fast.build_columns(scanned)
            del scanned
            return builder.finish(path, size, top, 0)
    try:
        raw_doc = RAW_DECODER.decode(data)
    except msgspec.ValidationError:
        return _load_lenient(data, path, size)
    except msgspec.DecodeError as exc:
        text = str(exc)
        # NaN/Infinity (Python's json writes them) and bad UTF-8 in names: slow path copes.
        if "UTF-8" in text or b"NaN" in data or b"Infinity" in data:
            return _load_lenient(data, path, size)
        hint = (
            ": data after the end of the JSON document (two traces in one file, or gzip "
            "members that do not make one document?)"
            if "trailing characters" in text
            else ""
        )
        raise InvalidTraceError(f"not valid JSON ({_short(exc)}){hint}", path=path) from exc
    if isinstance(raw_doc, list):
        raws, top = raw_doc, TraceFile()
    else:
        if raw_doc.traceEvents is None:
            raise InvalidTraceError(_not_kineto(path), path=path)
        raws = raw_doc.traceEvents
        raw_doc.traceEvents = None
        top = TraceFile(
            schemaVersion=raw_doc.schemaVersion,
            distributedInfo=raw_doc.distributedInfo,
            deviceProperties=raw_doc.deviceProperties,
            baseTimeNanoseconds=raw_doc.baseTimeNanoseconds,
        )
    # The raw views keep the JSON buffer alive only until the last chunk is decoded; the
    # rare file that breaks the typed schema is read again for the lenient path.
    del data, raw_doc
    try:
        return build_trace_chunks(path, size, chunks=_decode_chunks(raws), top=top)
    except (msgspec.ValidationError, msgspec.DecodeError):  # wrong types, bad UTF-8 in names
        del raws
        return _load_lenient(read_bytes(path, memory_budget=memory_budget), path, size)


def _use_scanner(nbytes: int) -> bool:
    """The compiled scanner once it is loaded, or for a file big enough to load it for."""
    fast = sys.modules.get("tracescale.ingest.fast")
    if fast is not None and fast.loaded():
        return True
    if nbytes < SCANNER_WORTH_BYTES:
        return False
    from tracescale.ingest.fast import loaded, warm_up  # imports numba

    warm_up()
    return loaded()


def _decode_chunks(raws: list[msgspec.Raw]) -> Iterator[list[Event]]:
    """Typed events, CHUNK_EVENTS at a time (each chunk's structs die before the next)."""
    while raws:
        part = raws[:CHUNK_EVENTS]
        del raws[:CHUNK_EVENTS]  # each raw view is released once its chunk is decoded
        chunk = CHUNK_DECODER.decode(b"[" + b",".join(part) + b"]")
        del part
        yield chunk


def _not_kineto(path: str) -> str:
    """Name the JSON kinds people pass by mistake, from the keys in the file's head."""
    try:
        head = open_text(path, 65536)
    except (OSError, zlib.error, EOFError):
        head = b""
    if b'"nodes"' in head and (b'"schema"' in head or b'"finish_ts"' in head):
        return "not a Kineto trace: this is a PyTorch execution trace (ExecutionTraceObserver)"
    if b'"segments"' in head or b'"device_traces"' in head:
        return "not a Kineto trace: this is a CUDA memory snapshot"
    return "not a Kineto trace: no 'traceEvents' key (memory snapshot or execution trace?)"


def _short(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:120]


class _Num(str):
    """A JSON number kept as its text so the lenient path stays ns-exact."""


def _load_lenient(data: bytes | bytearray, path: str, size: int) -> RankTrace:
    """Slow path: Python's json (accepts NaN/Infinity, big ints), then per-event checks."""
    try:
        text = data.decode("utf-8", errors="replace")
        doc = json.loads(text, parse_float=_Num, parse_constant=_Num)
    except (ValueError, RecursionError) as exc:
        raise InvalidTraceError(f"not valid JSON ({_short(exc)})", path=path) from exc
    if isinstance(doc, dict):
        raw_events = doc.get("traceEvents")
        if raw_events is None:
            raise InvalidTraceError(_not_kineto(path), path=path)
        if not isinstance(raw_events, list):
            raise InvalidTraceError("'traceEvents' is not a list", path=path)
        top = _lenient_top(doc)
    elif isinstance(doc, list):
        raw_events, top = doc, TraceFile()
    else:
        raise InvalidTraceError(
            "top-level JSON is neither an object with 'traceEvents' nor an array of events",
            path=path,
        )
    events: list[Event] = []
    bad = 0
    for raw in raw_events:
        ev = _lenient_event(raw)
        if ev is None:
            bad += 1
        else:
            events.append(ev)
    return build_trace(path, size, events=events, top=top, malformed=bad)


def _as_int(value: Any, default: int = -1) -> int:
    if isinstance(value, _Num):  # some writers put counts as floats ("6250000.0")
        try:
            as_float = float(value)
        except ValueError:
            return default
        if not (as_float.is_integer() and abs(as_float) < 2**63):
            return default
        value = int(as_float)
    if isinstance(value, bool) or not isinstance(value, int):
        return default
    return value if -(2**63) <= value < 2**63 else default


_ABSENT = object()
_NOT_A_NUMBER = msgspec.Raw(b"null")


def _raw_number(value: Any) -> msgspec.Raw:
    """The number's text; a present value that is no number reads as non-numeric (not as
    missing), as on the typed path."""
    if value is _ABSENT:
        return NO_RAW
    if isinstance(value, int) and not isinstance(value, bool):
        return msgspec.Raw(str(value).encode())
    if isinstance(value, _Num):
        return msgspec.Raw(str.__str__(value).encode())
    return _NOT_A_NUMBER


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _lenient_event(raw: Any) -> Event | None:
    if not isinstance(raw, dict):
        return None
    args_in = raw.get("args")
    args = NO_ARGS
    if isinstance(args_in, dict):
        try:
            args = msgspec.convert(
                {k: _arg_value(k, v) for k, v in args_in.items() if _arg_ok(k, v)},
                Args,
                from_attributes=False,
            )
        except (msgspec.ValidationError, TypeError):
            args = NO_ARGS
    pid, tid = raw.get("pid", 0), raw.get("tid", 0)
    return Event(
        ph=_str(raw.get("ph")),
        cat=_str(raw.get("cat")),
        name=_str(raw.get("name")),
        pid=pid if isinstance(pid, str) else _as_int(pid, 0),
        tid=tid if isinstance(tid, str) else _as_int(tid, 0),
        ts=_raw_number(raw.get("ts", _ABSENT)),
        dur=_raw_number(raw.get("dur", _ABSENT)),
        args=args,
    )


_INT_ARGS = {
    "correlation",
    "stream",
    "device",
    "External id",
    "external id",
    "In msg nelems",
    "Out msg nelems",
    "Group size",
    "Seq",
    "Global rank start",
    "Global rank stride",
    "bytes",
    "wait_on_stream",
    "wait_on_cuda_event_record_corr_id",
}
_STR_ARGS = {
    "Collective name",
    "dtype",
    "name",
    "labels",
    "Process Group Name",
    "Process Group Description",
}


#: Args kept as their JSON text (shapes and dtypes of an op's inputs).
_RAW_ARGS = {"Input Dims", "Input type", "Process Group Ranks"}


def _arg_value(key: str, value: Any) -> Any:
    if key in _INT_ARGS:
        return _as_int(value)
    if key in _RAW_ARGS:
        return msgspec.Raw(_json_text(value).encode())
    return str(value)


def _json_text(value: Any) -> str:
    """JSON text of a value as Kineto spells it (``[[1, 2], []]``), number texts kept."""
    if isinstance(value, _Num):
        return str.__str__(value)
    if isinstance(value, list):
        return "[" + ", ".join(_json_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {_json_text(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)


def _arg_ok(key: str, value: Any) -> bool:
    if key in _RAW_ARGS:
        return True
    if key in _INT_ARGS:
        return _as_int(value, default=-(2**64)) != -(2**64)
    if key in _STR_ARGS:
        return isinstance(value, str)
    return False


def _lenient_top(doc: dict[str, Any]) -> TraceFile:
    keep = {
        k: doc[k]
        for k in ("schemaVersion", "distributedInfo", "deviceProperties", "baseTimeNanoseconds")
        if k in doc
    }
    try:
        return msgspec.convert(keep, TraceFile)
    except msgspec.ValidationError:
        return TraceFile()


def open_text(path: str, limit: int = 4096) -> bytes:
    """The first ``limit`` decompressed bytes of a file, for sniffing."""
    with open(path, "rb") as fh:
        raw = fh.read(limit)
    if raw[:2] != b"\x1f\x8b":
        return raw
    return zlib.decompressobj(wbits=31).decompress(raw, limit)
