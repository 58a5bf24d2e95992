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


def unused_pid(doc: Any) -> int:
    """A numeric pid no event of the trace uses (one above the largest)."""
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    pids = [0]
    for e in events or []:
        pid = e.get("pid") if isinstance(e, dict) else None
        if isinstance(pid, int) and not isinstance(pid, bool):
            pids.append(pid)
    return max(pids) + 1


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
