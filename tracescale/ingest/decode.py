"""Bytes on disk -> :class:`RankTrace`: gzip, typed JSON decoding, one vectorized pass.

msgspec decodes straight into small Structs holding only the fields we keep (no dicts, unknown
keys skipped in C), ``ts``/``dur`` arrive as raw number text for exact ns parsing. Files that
break the typed schema (wrong types, >64-bit ints, NaN) take a slower lenient path that skips and
counts the bad events instead of failing the whole file.
"""

from __future__ import annotations

import os
import sys
import zlib
from collections.abc import Iterator
from typing import Any

import msgspec

from tracescale.errors import InvalidTraceError
from tracescale.ingest.build import build_trace_chunks
from tracescale.ingest.lenient import load_lenient, not_kineto, short_error
from tracescale.ingest.lenient import open_text as open_text
from tracescale.ingest.schema import (
    CHUNK_DECODER,
    CHUNK_EVENTS,
    RAW_DECODER,
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
        return load_lenient(data, path, size)
    except msgspec.DecodeError as exc:
        text = str(exc)
        # NaN/Infinity (Python's json writes them) and bad UTF-8 in names: slow path copes.
        if "UTF-8" in text or b"NaN" in data or b"Infinity" in data:
            return load_lenient(data, path, size)
        hint = (
            ": data after the end of the JSON document (two traces in one file, or gzip "
            "members that do not make one document?)"
            if "trailing characters" in text
            else ""
        )
        raise InvalidTraceError(f"not valid JSON ({short_error(exc)}){hint}", path=path) from exc
    if isinstance(raw_doc, list):
        raws, top = raw_doc, TraceFile()
    else:
        if raw_doc.traceEvents is None:
            raise InvalidTraceError(not_kineto(path), path=path)
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
        return load_lenient(read_bytes(path, memory_budget=memory_budget), path, size)


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
