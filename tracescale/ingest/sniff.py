"""Read just the head of a trace file: is it a Kineto trace, and which rank / world size.

Kineto writes ``distributedInfo`` before ``traceEvents``, so 64 KB of decompressed text is
enough to group thousands of rank files without parsing any of them.

A PyTorch execution trace (ET: ``"schema": "1.x..."`` then ``"nodes"``, the operator graph
that Chakra and ET replay read) is often saved beside its Kineto trace. It is never a rank:
its head says ``kind = "execution_trace"`` and :mod:`tracescale.ingest.companions` pairs it
with the rank file of the same process (pid) or rank, so one run is analyzed and the pair is
named.
"""

from __future__ import annotations

import os
import re
import zlib
from dataclasses import dataclass

from tracescale.errors import InvalidTraceError
from tracescale.ingest import remote

#: Bytes of decompressed JSON accepted per file. Defined here, beside the file heads, so the
#: light half of ``analyze`` can name it without loading the decoders.
DEFAULT_MEMORY_BUDGET = 8 * 1024**3

_HEAD = 64 * 1024
_DIST_RE = re.compile(rb'"distributedInfo"\s*:\s*\{([^{}]*(?:\{[^{}]*\}[^{}]*)*)', re.S)
_RANK_RE = re.compile(rb'"rank"\s*:\s*(-?\d+)')
_WS_RE = re.compile(rb'"world_size"\s*:\s*(-?\d+)')
_ET_RE = re.compile(rb'^\{\s*"schema"\s*:\s*"(\d+\.\d+[^"]{0,60})"')
_PID_RE = re.compile(rb'"pid"\s*:\s*(\d+)')
_SNAPSHOT_RE = re.compile(rb'^\{\s*"(segments|device_traces)"\s*:')

#: ``FileHead.kind`` of a Kineto trace, of a PyTorch execution trace, of any other file.
KINETO = "kineto"
EXECUTION_TRACE = "execution_trace"
#: The phrase every execution-trace note starts its reason with (inspect lists them apart).
ET_NOTE = "PyTorch execution trace"


@dataclass(frozen=True)
class FileHead:
    """What the head of a file says; ``error`` is set when it is clearly not a trace."""

    path: str
    size: int
    rank: int | None
    world_size: int | None
    error: str | None = None
    #: :data:`KINETO` or :data:`EXECUTION_TRACE` (whose ``error`` says it is not a rank).
    kind: str = KINETO
    #: Process ids the head names (an ET's top-level ``pid``; a Kineto trace's event pids).
    pids: tuple[int, ...] = ()
    #: An execution trace's ``schema`` string.
    schema: str = ""


def stamp(path: str) -> str:
    """``size:mtime_ns`` of ``path`` (what a cache key holds of an execution trace), "" when
    it cannot be read."""
    try:
        st = os.stat(path)
    except OSError:
        return ""
    return f"{st.st_size}:{st.st_mtime_ns}"


def _head_bytes(path: str) -> bytes:
    if remote.is_url(path):
        raw = remote.head(path, _HEAD)
    else:
        with open(path, "rb") as fh:
            raw = fh.read(_HEAD)
    if raw[:2] != b"\x1f\x8b":
        return raw
    out = b""
    try:  # through every gzip member (bgzip writes 64 KB ones), as the full read does
        while True:
            inflater = zlib.decompressobj(wbits=31)
            out += inflater.decompress(raw, _HEAD - len(out))
            raw = inflater.unused_data
            if len(out) >= _HEAD or not inflater.eof or raw[:2] != b"\x1f\x8b":
                return out
    except zlib.error as exc:
        raise InvalidTraceError(f"corrupt gzip data ({exc})", path=path) from exc


def sniff(path: str, *, strict: bool) -> FileHead:
    """Head facts of ``path``; with ``strict`` a non-trace raises, else it goes in ``error``."""
    try:
        size = remote.size(path) if remote.is_url(path) else os.path.getsize(path)
        head = _head_bytes(path)
    except InvalidTraceError as exc:
        if strict:
            raise
        return FileHead(path, 0, None, None, error=exc.message)
    except PermissionError as exc:
        if strict:
            raise InvalidTraceError("permission denied", path=path) from exc
        return FileHead(path, 0, None, None, error="permission denied")
    except OSError as exc:
        if strict:
            raise InvalidTraceError(f"cannot read: {exc.strerror or exc}", path=path) from exc
        return FileHead(path, 0, None, None, error=f"cannot read: {exc.strerror or exc}")
    text = head.lstrip()
    pids = tuple(sorted({int(m.group(1)) for m in _PID_RE.finditer(head)}))
    et = _ET_RE.match(text)
    if et is not None and b'"traceEvents"' not in head:
        why = f"{ET_NOTE} (schema {et.group(1).decode('ascii', 'replace')}), not a Kineto trace"
        if strict:
            raise InvalidTraceError(
                f"{why}: analyze the Kineto trace captured with it (the folder holding both)",
                path=path,
            )
        schema = et.group(1).decode("ascii", "replace")
        pid = _PID_RE.search(text)
        own = (int(pid.group(1)),) if pid else ()
        return FileHead(path, size, None, None, why, EXECUTION_TRACE, own, schema)
    if not text:
        err = "empty file"
    elif text[:1] == b"[" or b'"traceEvents"' in head or b'"schemaVersion"' in head:
        err = None
    elif _SNAPSHOT_RE.match(text):
        err = "not a Kineto trace: a CUDA memory snapshot (its 'segments'/'device_traces')"
    elif text[:1] == b"{" and len(head) < _HEAD:
        err = "not a Kineto trace: no 'traceEvents' key (memory snapshot or execution trace?)"
    elif text[:1] == b"{":
        err = None  # traceEvents may come later in a big file; the full load decides
    else:
        err = "not a JSON trace file"
    if err and strict:
        raise InvalidTraceError(err, path=path)
    rank = world = None
    m = _DIST_RE.search(head)
    if m:
        body = m.group(1)
        if (r := _RANK_RE.search(body)) is not None and _claimed(r.group(1)) >= 0:
            rank = _claimed(r.group(1))
        if (w := _WS_RE.search(body)) is not None and _claimed(w.group(1)) > 0:
            world = _claimed(w.group(1))
    return FileHead(path, size, rank, world, error=err, pids=pids)


#: Stands for any claimed number of more than 19 digits (int() refuses over 4,300 of them).
HUGE_CLAIM = 10**19


def _claimed(digits: bytes) -> int:
    """A number the head claims; past 19 digits :data:`HUGE_CLAIM` (beyond every ceiling)."""
    negative = digits.startswith(b"-")
    if len(digits.lstrip(b"-0")) <= 19:
        return int(digits)
    return -1 if negative else HUGE_CLAIM
