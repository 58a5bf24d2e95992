"""JSON that breaks the typed schema -> :class:`RankTrace`, skipping and counting bad events.

Why a second decoder: msgspec's typed path refuses a whole file for one event with a wrong
type, a >64-bit integer or NaN (Python's json writes them). This path takes Python's json,
keeps numbers as their text (ns-exact) and checks each event, so one bad event costs itself,
not the file. It also names the JSON kinds people pass by mistake.
"""

from __future__ import annotations

import json
import zlib
from typing import Any

import msgspec

from tracescale.errors import InvalidTraceError
from tracescale.ingest.build import build_trace
from tracescale.ingest.schema import NO_ARGS, NO_RAW, Args, Event, TraceFile
from tracescale.ingest.trace import RankTrace


def not_kineto(path: str) -> str:
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


def short_error(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:120]


class _Num(str):
    """A JSON number kept as its text so the lenient path stays ns-exact."""


def load_lenient(data: bytes | bytearray, path: str, size: int) -> RankTrace:
    """Slow path: Python's json (accepts NaN/Infinity, big ints), then per-event checks."""
    try:
        text = data.decode("utf-8", errors="replace")
        doc = json.loads(text, parse_float=_Num, parse_constant=_Num)
    except (ValueError, RecursionError) as exc:
        raise InvalidTraceError(f"not valid JSON ({short_error(exc)})", path=path) from exc
    if isinstance(doc, dict):
        raw_events = doc.get("traceEvents")
        if raw_events is None:
            raise InvalidTraceError(not_kineto(path), path=path)
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
    "Record function id",
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
