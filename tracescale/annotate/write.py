"""Added tracks -> a copy of a trace file: the original bytes with events spliced in.

The original events are not re-serialized (their numbers keep their exact text); the added
events go at the start of ``traceEvents``, in their own process with ``process_name`` and
``thread_name`` metadata, ``cat`` :data:`ANNOTATION_CAT` (which ingest skips), and ``ts``/``dur``
written as microseconds with exactly three decimals, so nanoseconds survive the round trip.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import msgspec

from tracescale.annotate.tracks import Slice
from tracescale.categories import ANNOTATION_CAT
from tracescale.errors import InvalidTraceError

#: What a chunk of a written file may be: bytes, or a view of the original's without a copy.
Buffer = bytes | bytearray | memoryview

_deflate: Any
try:  # ISA-L deflates several times faster than zlib, with the same streaming interface
    from isal import isal_zlib as _deflate

    _LEVEL = 2
except ImportError:  # pragma: no cover - isal is a dependency; zlib where it has no wheel
    _deflate, _LEVEL = zlib, 6

#: A bare array's opening bracket, and the first token after a position (no copy of the
#: text is made to find them: a trace may be hundreds of MB)
_BARE_ARRAY = re.compile(rb"\s*\[")
_NEXT_TOKEN = re.compile(rb"\s*(.)", re.S)
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
CATEGORY_TID = 1
#: Metadata events :func:`added_events` puts before the tracks.
METADATA_EVENTS = 6
STEP_TID = 2


def us_text(ns: int) -> str:
    """Integer nanoseconds as microseconds with three decimals (exact): 1234567 -> 1234.567."""
    sign = "-" if ns < 0 else ""
    q, r = divmod(abs(ns), 1000)
    return f"{sign}{q}.{r:03d}"


def _meta(pid: int, tid: int, name: str, args: dict[str, Any]) -> str:
    body = {"ph": "M", "cat": ANNOTATION_CAT, "name": name, "pid": pid, "tid": tid, "args": args}
    return json.dumps(body, separators=(",", ":"))


def _complete(pid: int, tid: int, s: Slice) -> str:
    return (
        f'{{"ph":"X","cat":"{ANNOTATION_CAT}","name":{json.dumps(s.name)},"pid":{pid},'
        f'"tid":{tid},"ts":{us_text(s.start_ns)},"dur":{us_text(s.end_ns - s.start_ns)},'
        f'"args":{json.dumps(s.args, separators=(",", ":"))}}}'
    )


def added_events(
    pid: int, rank: int, categories: Iterable[Slice], steps: Iterable[Slice]
) -> Iterator[str]:
    """The added process: metadata first, then the category and step tracks, one event at a
    time (a trace of a million steps adds two million of them)."""
    yield _meta(pid, 0, "process_name", {"name": f"tracescale attribution (rank {rank})"})
    yield _meta(pid, 0, "process_sort_index", {"sort_index": -1})
    yield _meta(pid, CATEGORY_TID, "thread_name", {"name": "categories"})
    yield _meta(pid, CATEGORY_TID, "thread_sort_index", {"sort_index": 0})
    yield _meta(pid, STEP_TID, "thread_name", {"name": "steps"})
    yield _meta(pid, STEP_TID, "thread_sort_index", {"sort_index": 1})
    for s in categories:
        yield _complete(pid, CATEGORY_TID, s)
    for s in steps:
        yield _complete(pid, STEP_TID, s)


_NUMERIC_PID = re.compile(rb'"pid"\s*:\s*(-?\d+)')


def unused_pid(data: bytes | bytearray) -> int:
    """A numeric pid no event of the trace (its JSON text) uses: one above the largest."""
    return max((int(m) for m in _NUMERIC_PID.findall(data)), default=0) + 1


class _Top(msgspec.Struct):
    traceEvents: list[msgspec.Raw] | None = None


_COUNT_DECODER = msgspec.json.Decoder(_Top | list[msgspec.Raw])


def event_count(data: bytes | bytearray, path: str) -> int:
    """How many entries ``traceEvents`` has (events left undecoded: cheap on big traces)."""
    try:
        doc = _COUNT_DECODER.decode(data)
    except msgspec.DecodeError:  # NaN/Infinity (Python's json writes them): the slow path
        try:
            loaded = json.loads(data)
        except ValueError as exc:
            raise InvalidTraceError(f"not valid JSON ({exc})", path=path) from exc
        listed = loaded.get("traceEvents") if isinstance(loaded, dict) else loaded
        if not isinstance(listed, list):
            raise InvalidTraceError("no 'traceEvents' array to add tracks to", path=path) from None
        return len(listed)
    except msgspec.ValidationError as exc:
        raise InvalidTraceError(f"no 'traceEvents' array ({exc})", path=path) from exc
    events = doc if isinstance(doc, list) else doc.traceEvents
    if events is None:
        raise InvalidTraceError("no 'traceEvents' array to add tracks to", path=path)
    return len(events)


def splice_point(data: bytes | bytearray, path: str) -> int:
    """Where added events go in ``data`` (a trace's JSON text): first in ``traceEvents``."""
    bare = _BARE_ARRAY.match(data)  # a bare array of events (allowed by the format)
    if bare is not None:
        return bare.end()
    m = _EVENTS_KEY.search(data)
    if m is None:
        raise InvalidTraceError("no 'traceEvents' array to add tracks to", path=path)
    return m.end()


#: Added events joined per written chunk.
_BATCH = 4096


def spliced(data: bytes | bytearray, events: Iterable[str], path: str) -> Iterator[Buffer]:
    """``data`` with ``events`` first in its ``traceEvents`` array, in chunks (the original
    bytes untouched, the added ones as they are made)."""
    at = splice_point(data, path)
    view = memoryview(data)  # the original's parts are written without a copy
    yield view[:at]
    first = True
    batch: list[str] = []
    for e in events:
        batch.append(e)
        if len(batch) == _BATCH:
            yield (("" if first else ",") + ",".join(batch)).encode()
            first, batch = False, []
    if batch:
        yield (("" if first else ",") + ",".join(batch)).encode()
        first = False
    after = _NEXT_TOKEN.match(data, at)
    sep = b"" if first or (after is not None and after.group(1) == b"]") else b","
    yield sep
    yield view[at:]


def splice(data: bytes, events: Sequence[str], path: str) -> bytes:
    """``data`` (a trace's JSON text) with ``events`` first in its ``traceEvents`` array."""
    return b"".join(spliced(data, events, path))


def encoded_like(original: bytes, chunks: Iterable[Buffer]) -> Iterator[Buffer]:
    """``chunks`` gzipped when the original file was (same name, same kind of file)."""
    if original[:2] != b"\x1f\x8b":
        yield from chunks
        return
    deflate = _deflate.compressobj(_LEVEL, _deflate.DEFLATED, 31)
    for chunk in chunks:
        out = deflate.compress(chunk)
        if out:
            yield out
    yield deflate.flush()


def encode_like(original: bytes, text: bytes) -> bytes:
    """Gzip ``text`` when the original file was gzipped (same name, same kind of file)."""
    return b"".join(encoded_like(original, [text]))
