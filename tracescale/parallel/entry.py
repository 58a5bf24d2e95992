"""RankResult <-> bytes for the on-disk cache: plain arrays and JSON, never pickle.

A cache directory is writable by whoever owns it, so an entry is untrusted input: loading one
must never run code, whatever its bytes. The format therefore holds only data. Layout::

    MAGIC (16 bytes) | sha256 of the rest (32) | header length (8, little endian)
    | header (JSON: format version, cache key, scalars, frame schemas) | payload (.npz, stored)

The checksum is verified before anything is parsed; the payload is a zip of ``.npy`` arrays,
each checked against the header's declared name, dtype and length before it is read, read
with ``allow_pickle=False``, and never decompressed (stored members only, so no zip bomb).
Any deviation raises :class:`EntryError`, which the cache treats as a miss.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import zipfile
from typing import Any

import numpy as np

from tracescale.classify.rank import RankResult
from tracescale.classify.timeline import Segments
from tracescale.table import Table, as_table

MAGIC = b"TRACESCALE-RC-2\n"
FORMAT_VERSION = 2
_DIGEST = 32
#: Column dtypes an entry may hold: numbers and booleans as arrays, strings as JSON lists.
_ARRAY_DTYPES = frozenset(
    [
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float32",
        "float64",
    ]
)
_STRING_DTYPES = frozenset(["str", "object", "string"])
_MAX_HEADER = 64 << 20


class EntryError(ValueError):
    """An entry that is not exactly what this version writes (damaged, crafted or foreign)."""


def frame_schema(name: str, frame: Any, arrays: dict[str, Any]) -> dict[str, Any]:
    """The header entry of a table's columns; its numeric columns go into ``arrays``."""
    frame = as_table(frame)
    columns: list[dict[str, Any]] = []
    for pos, col in enumerate(frame.columns):
        if not isinstance(col, str):
            raise EntryError(f"{name}: column name {col!r} is not a string")
        values = frame.col(col)
        dtype = str(values.dtype)
        if dtype in _ARRAY_DTYPES:
            key = f"{name}.{pos}"
            arrays[key] = values
            columns.append({"name": col, "dtype": dtype, "array": key})
        elif dtype in _STRING_DTYPES:
            listed = values.tolist()
            if not all(isinstance(v, str) for v in listed):
                raise EntryError(f"{name}.{col}: not all strings")
            columns.append({"name": col, "dtype": dtype, "values": listed})
        else:
            raise EntryError(f"{name}.{col}: dtype {dtype} is not cacheable")
    return {"rows": len(frame), "columns": columns}


def _plain(name: str, value: Any) -> dict[str, Any]:
    """A non-frame field as a tagged JSON value (tags restore tuples and check types)."""
    if value is None:
        return {"type": "none"}
    for tag, kind in (("bool", bool), ("int", int), ("float", float), ("str", str)):
        if type(value) is kind:
            return {"type": tag, "value": value}
    if isinstance(value, tuple) and all(isinstance(v, str) for v in value):
        return {"type": "str_tuple", "value": list(value)}
    if isinstance(value, dict) and all(
        isinstance(k, str) and type(v) in (int, float) for k, v in value.items()
    ):
        return {"type": "float_dict", "value": {k: float(v) for k, v in value.items()}}
    raise EntryError(f"{name}: {type(value).__name__} is not cacheable")


def encode(result: RankResult, key: dict[str, Any]) -> bytes:
    """The entry bytes of ``result`` under ``key``; raises EntryError for uncacheable data.

    Every field of :class:`RankResult` is stored by its value's kind (frame, timeline or plain
    JSON), so a field added later is cached too, or refused, never silently dropped.
    """
    arrays: dict[str, Any] = {}
    frames: dict[str, Any] = {}
    plain: dict[str, Any] = {}
    for f in dataclasses.fields(result):
        key_ = "_table_" + f.name
        value = result.__dict__[key_] if key_ in result.__dict__ else getattr(result, f.name)
        if isinstance(value, Table):
            frames[f.name] = frame_schema(f.name, value, arrays)
        elif isinstance(value, Segments):
            arrays[f.name + ".start"] = np.ascontiguousarray(value.start, dtype=np.int64)
            arrays[f.name + ".cat"] = np.ascontiguousarray(value.cat, dtype=np.int8)
            plain[f.name] = {"type": "segments", "value": int(value.stop)}
        else:
            plain[f.name] = _plain(f.name, value)
    header = {
        "format": FORMAT_VERSION,
        "key": key,
        "fields": plain,
        "frames": frames,
        "arrays": {
            k: {"dtype": str(v.dtype), "shape": list(v.shape)} for k, v in sorted(arrays.items())
        },
    }
    return pack(header, arrays)


def pack(header: dict[str, Any], arrays: dict[str, Any]) -> bytes:
    """MAGIC, checksum, the JSON ``header`` and ``arrays`` as stored ``.npy`` zip members."""
    head = json.dumps(header, sort_keys=True, allow_nan=True).encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as zf:
        for k, v in sorted(arrays.items()):
            with zf.open(k + ".npy", "w") as fh:
                np.lib.format.write_array(fh, v, allow_pickle=False)
    body = len(head).to_bytes(8, "little") + head + buf.getvalue()
    return MAGIC + hashlib.sha256(body).digest() + body


def read_header(blob: bytes) -> tuple[dict[str, Any], memoryview]:
    """Verified header and payload of an entry; EntryError on any damage."""
    fixed = len(MAGIC) + _DIGEST + 8
    if len(blob) < fixed or blob[: len(MAGIC)] != MAGIC:
        raise EntryError("not a tracescale cache entry of this format")
    body = memoryview(blob)[len(MAGIC) + _DIGEST :]
    if hashlib.sha256(body).digest() != blob[len(MAGIC) : len(MAGIC) + _DIGEST]:
        raise EntryError("checksum mismatch")
    n = int.from_bytes(body[:8], "little")
    if n > min(_MAX_HEADER, len(body) - 8):
        raise EntryError("header length out of range")
    try:
        header = json.loads(bytes(body[8 : 8 + n]))
    except (ValueError, RecursionError) as exc:
        raise EntryError(f"header is not JSON: {exc}") from exc
    if not isinstance(header, dict) or header.get("format") != FORMAT_VERSION:
        raise EntryError("unknown format version")
    return header, body[8 + n :]


def arrays_of(header: dict[str, Any], payload: memoryview) -> dict[str, np.ndarray[Any, Any]]:
    declared = header["arrays"]
    if not isinstance(declared, dict):
        raise EntryError("bad array table")
    out: dict[str, np.ndarray[Any, Any]] = {}
    with zipfile.ZipFile(io.BytesIO(payload)) as zf:
        infos = {i.filename: i for i in zf.infolist()}
        if set(infos) != {k + ".npy" for k in declared}:
            raise EntryError("payload members differ from the header")
        for name, spec in declared.items():
            info = infos[name + ".npy"]
            if info.compress_type != zipfile.ZIP_STORED or info.file_size > len(payload):
                raise EntryError(f"{name}: compressed or oversized member")
            with zf.open(info) as fh:
                arr = np.lib.format.read_array(fh, allow_pickle=False)
            if str(arr.dtype) != spec["dtype"] or list(arr.shape) != spec["shape"]:
                raise EntryError(f"{name}: dtype or shape differs from the header")
            if arr.dtype.kind not in "biuf":
                raise EntryError(f"{name}: not a numeric array")
            out[name] = arr
    return out


def frame_from_schema(schema: dict[str, Any], arrays: dict[str, np.ndarray[Any, Any]]) -> Table:
    rows = int(schema["rows"])
    data: dict[str, Any] = {}
    names: list[str] = []
    for col in schema["columns"]:
        name, dtype = str(col["name"]), str(col["dtype"])
        if dtype in _ARRAY_DTYPES and "array" in col:
            values: Any = arrays[str(col["array"])]
            if str(values.dtype) != dtype or values.ndim != 1:
                raise EntryError(f"column {name}: dtype differs")
        elif dtype in _STRING_DTYPES and isinstance(col.get("values"), list):
            if not all(isinstance(v, str) for v in col["values"]):
                raise EntryError(f"column {name}: not all strings")
            values = np.empty(len(col["values"]), dtype=object)
            values[:] = col["values"]
        else:
            raise EntryError(f"column {name}: unknown dtype {dtype}")
        if len(values) != rows or name in data:
            raise EntryError(f"column {name}: wrong length or duplicate")
        data[name] = values
        names.append(name)
    return Table(data, columns=names)


def _restore(name: str, spec: Any, arrays: dict[str, np.ndarray[Any, Any]]) -> Any:
    tag = spec["type"]
    value: Any = spec.get("value")
    if tag == "none":
        return None
    if tag == "float" and type(value) in (int, float):
        return float(value)
    kinds: dict[str, type] = {"bool": bool, "int": int, "str": str}
    if tag in kinds and type(value) is kinds[tag]:
        return value
    if tag == "str_tuple" and isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    if tag == "float_dict" and isinstance(value, dict):
        return {str(k): float(v) for k, v in dict(value).items()}
    if tag == "segments" and type(value) is int:
        start, cat = arrays[name + ".start"], arrays[name + ".cat"]
        if start.dtype != np.int64 or cat.dtype != np.int8 or start.shape != cat.shape:
            raise EntryError(f"{name}: wrong dtypes or lengths")
        return Segments(start=start, cat=cat, stop=value)
    raise EntryError(f"{name}: bad value of type {tag!r}")


def decode(blob: bytes, key: dict[str, Any]) -> RankResult:
    """The RankResult stored in ``blob`` if its header holds exactly ``key``."""
    header, payload = read_header(blob)
    if header.get("key") != key:
        raise EntryError("stale entry (key differs)")
    try:
        arrays = arrays_of(header, payload)
        frames, plain = header["frames"], header["fields"]
        names = [f.name for f in dataclasses.fields(RankResult)]
        if sorted(names) != sorted([*frames, *plain]):
            raise EntryError("fields differ from this version's RankResult")
        values: dict[str, Any] = {n: frame_from_schema(frames[n], arrays) for n in frames}
        values.update({n: _restore(n, plain[n], arrays) for n in plain})
        return RankResult(**values)
    except EntryError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, zipfile.BadZipFile) as exc:
        raise EntryError(f"malformed entry: {type(exc).__name__}: {exc}") from exc
