"""Read just the head of a trace file: is it a Kineto trace, and which rank / world size.

Kineto writes ``distributedInfo`` before ``traceEvents``, so 64 KB of decompressed text is
enough to group thousands of rank files without parsing any of them.

A PyTorch execution trace (ET: ``"schema": "1.x..."`` then ``"nodes"``, the operator graph
that Chakra and ET replay read) is often saved beside its Kineto trace. It is never a rank:
its head says ``kind = "execution_trace"`` and :func:`companion_notes` pairs it with the rank
file of the same process (pid) or rank, so one run is analyzed and the pair is named.
"""

from __future__ import annotations

import os
import re
import zlib
from collections.abc import Iterable
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
_NAME_RANK_RE = re.compile(r"(?:rank|worker)[-_]?(\d+)|(?:^|[^0-9])(\d+)(?=\D*$)", re.I)

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


def _name_rank(path: str) -> int | None:
    """The rank a file name states: ``rank3``/``worker3``, else its last number."""
    base = os.path.basename(path).split(".")[0]
    m = _NAME_RANK_RE.search(base)
    if m is None:
        return None
    return int(m.group(1) or m.group(2))


def pair_companion(et: FileHead, ranks: list[tuple[FileHead, int]]) -> tuple[FileHead, str] | None:
    """The rank file an execution trace belongs to and why: the same pid, else the same rank
    in the file name, else the only rank file of the folder; None when none qualifies."""
    if et.pids:
        same = [h for h, _ in ranks if et.pids[0] in h.pids]
        if len(same) == 1:
            return same[0], f"same pid {et.pids[0]}"
    want = _name_rank(et.path)
    if want is not None:
        same = [h for h, r in ranks if r == want]
        if len(same) == 1:
            return same[0], f"same rank {want}"
    if len(ranks) == 1:
        return ranks[0][0], "the only rank file beside it"
    return None


def companion_notes(
    companions: list[FileHead], heads: list[FileHead], files: Iterable[tuple[str, int]]
) -> list[str]:
    """One line per execution trace of a run folder: which rank file it pairs with, or that
    it is left out. ``heads``: the folder's Kineto heads; ``files``: (path, rank) of those the
    run kept.

    A paired ET is recognized and named; its data dependencies are not read into the replay
    graph (Kineto's own flows and stream order build it), and the note says so.
    """
    rank_of = dict(files)
    ranks = [(h, rank_of[h.path]) for h in heads if h.path in rank_of]
    out = []
    for et in companions:
        found = pair_companion(et, ranks)
        name = os.path.basename(et.path)
        what = f"{ET_NOTE} (schema {et.schema})"
        if found is None:
            out.append(
                f"{et.path}: {what} with no Kineto rank file of the same pid or rank beside "
                "it: not analyzed"
            )
            continue
        head, why = found
        rank = next(r for h, r in ranks if h is head)
        out.append(
            f"{et.path}: {what} paired with rank {rank} ({os.path.basename(head.path)}, {why}); "
            f"{name}'s data dependencies are not used (the replay reads Kineto's flows)"
        )
    return out
