"""Read just the head of a trace file: is it a Kineto trace, and which rank / world size.

Kineto writes ``distributedInfo`` before ``traceEvents``, so 64 KB of decompressed text is
enough to group thousands of rank files without parsing any of them.
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


@dataclass(frozen=True)
class FileHead:
    """What the head of a file says; ``error`` is set when it is clearly not a trace."""

    path: str
    size: int
    rank: int | None
    world_size: int | None
    error: str | None = None


def _head_bytes(path: str) -> bytes:
    if remote.is_url(path):
        raw = remote.head(path, _HEAD)
    else:
        with open(path, "rb") as fh:
            raw = fh.read(_HEAD)
    if raw[:2] != b"\x1f\x8b":
        return raw
    try:
        return zlib.decompressobj(wbits=31).decompress(raw, _HEAD)
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
    if not text:
        err = "empty file"
    elif text[:1] == b"[" or b'"traceEvents"' in head or b'"schemaVersion"' in head:
        err = None
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
        if (r := _RANK_RE.search(body)) is not None and int(r.group(1)) >= 0:
            rank = int(r.group(1))
        if (w := _WS_RE.search(body)) is not None and int(w.group(1)) > 0:
            world = int(w.group(1))
    return FileHead(path, size, rank, world, error=err)
