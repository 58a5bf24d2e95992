"""Added tracks -> a copy of a trace file: the original bytes with events spliced in.

The original events are not re-serialized (their numbers keep their exact text); the added
events go at the start of ``traceEvents``, in their own process with ``process_name`` and
``thread_name`` metadata, ``cat`` :data:`ANNOTATION_CAT` (which ingest skips), and ``ts``/``dur``
written as microseconds with exactly three decimals, so nanoseconds survive the round trip.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Sequence
from typing import Any

import msgspec

from tracescale.annotate.tracks import Slice
from tracescale.categories import ANNOTATION_CAT
from tracescale.errors import InvalidTraceError

_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
CATEGORY_TID = 1
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
    pid: int, rank: int, categories: Sequence[Slice], steps: Sequence[Slice]
) -> list[str]:
    """The added process: metadata first, then the category and step tracks."""
    out = [
        _meta(pid, 0, "process_name", {"name": f"tracescale attribution (rank {rank})"}),
        _meta(pid, 0, "process_sort_index", {"sort_index": -1}),
        _meta(pid, CATEGORY_TID, "thread_name", {"name": "categories"}),
        _meta(pid, CATEGORY_TID, "thread_sort_index", {"sort_index": 0}),
        _meta(pid, STEP_TID, "thread_name", {"name": "steps"}),
        _meta(pid, STEP_TID, "thread_sort_index", {"sort_index": 1}),
    ]
    out += [_complete(pid, CATEGORY_TID, s) for s in categories]
    out += [_complete(pid, STEP_TID, s) for s in steps]
    return out


_NUMERIC_PID = re.compile(rb'"pid"\s*:\s*(-?\d+)')


def unused_pid(data: bytes) -> int:
    """A numeric pid no event of the trace (its JSON text) uses: one above the largest."""
    return max((int(m) for m in _NUMERIC_PID.findall(data)), default=0) + 1


class _Top(msgspec.Struct):
    traceEvents: list[msgspec.Raw] | None = None


_COUNT_DECODER = msgspec.json.Decoder(_Top | list[msgspec.Raw])


def event_count(data: bytes, path: str) -> int:
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


def splice(data: bytes, events: Sequence[str], path: str) -> bytes:
    """``data`` (a trace's JSON text) with ``events`` first in its ``traceEvents`` array."""
    if data.lstrip()[:1] == b"[":  # a bare array of events (allowed by the format)
        at = data.index(b"[") + 1
    else:
        m = _EVENTS_KEY.search(data)
        if m is None:
            raise InvalidTraceError("no 'traceEvents' array to add tracks to", path=path)
        at = m.end()
    added = ",".join(events).encode()
    if not added:
        return data
    sep = b"" if data[at:].lstrip()[:1] == b"]" else b","
    return data[:at] + added + sep + data[at:]


def encode_like(original: bytes, text: bytes) -> bytes:
    """Gzip ``text`` when the original file was gzipped (same name, same kind of file)."""
    return gzip.compress(text, compresslevel=6) if original[:2] == b"\x1f\x8b" else text
