"""JSON has no spelling for NaN or infinity: the one place a document becomes strictly valid JSON.

A leaf (no tracescale imports) so every renderer that embeds or writes the document — the JSON
format, the HTML page's data island — can share it without importing the dispatcher in
:mod:`tracescale.report.render`, which imports the renderers.

The document is encoded by msgspec, which writes NaN and infinities as null and number keys as
strings, as :func:`finite` does: a study of a million steps holds tens of millions of values, and
the standard library's indenting encoder took most of such an analyze (49 s of 160 s
profiled). Documents msgspec refuses (keys that are not strings or numbers, integers past 64 bits,
strings holding lone surrogates from a file name that is not UTF-8) take the standard library's
path, so every document still writes.
"""

from __future__ import annotations

import json
import math
from typing import Any

import msgspec
import numpy as np


def finite(value: Any) -> Any:
    """NaN and infinities become null, recursively; keys become strings as JSON requires."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def _plain(value: Any) -> Any:
    """numpy's scalars as the Python numbers they stand for (msgspec takes only Python's own)."""
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    raise TypeError(f"cannot write a {type(value).__name__} as JSON")


_ENCODER = msgspec.json.Encoder(enc_hook=_plain)


def dumps(value: Any, *, indent: int | None = None) -> str:
    """``value`` as strictly valid JSON: non-finite numbers null, names exact (not ASCII-escaped).

    ``indent`` spaces per level, or the compact form (no spaces) when None. Indented, a list of
    numbers, strings or nulls (and each row of a list of such lists) is written on one line:
    a million per-step rows are then a million lines, not twenty million. Values equal what
    ``json.dumps(finite(value))`` writes; a float may be spelled differently (``0.000032`` for
    ``3.2e-05``), the same number.
    """
    try:
        if indent is None:
            raw = _ENCODER.encode(value)
        else:
            pieces: list[bytes] = []
            _indented(value, b"\n", b" " * indent, pieces)
            raw = b"".join(pieces)
    except (TypeError, OverflowError, UnicodeEncodeError, msgspec.EncodeError):
        separators = (",", ": ") if indent is not None else (",", ":")
        return json.dumps(
            finite(value), indent=indent, separators=separators, ensure_ascii=False, allow_nan=False
        )
    return raw.decode("utf-8")


_CONTAINERS = (dict, list, tuple)


def _key(key: Any) -> bytes:
    """A dict key as JSON text: strings as they are, numbers as their ``str`` (JSON's keys are
    strings); anything else is refused (the caller takes the standard library's path)."""
    if isinstance(key, str):
        return _ENCODER.encode(key)
    if isinstance(key, (int, float)) and not isinstance(key, bool):
        return _ENCODER.encode(str(key))
    raise TypeError(f"a {type(key).__name__} key")


def _indented(value: Any, pad: bytes, step: bytes, out: list[bytes]) -> None:
    """Append ``value`` indented: ``pad`` is the newline and indentation of its own level."""
    inner = pad + step
    if isinstance(value, dict):
        if not value:
            out.append(b"{}")
            return
        sep = b"{" + inner
        for k, v in value.items():
            out.append(sep + _key(k) + b": ")
            _indented(v, inner, step, out)
            sep = b"," + inner
        out.append(pad + b"}")
        return
    if not isinstance(value, (list, tuple)):
        out.append(_ENCODER.encode(value))
        return
    if not value or not any(isinstance(v, _CONTAINERS) for v in value):
        out.append(_ENCODER.encode(value))
        return
    if all(type(v) is list for v in value):
        rows = _ENCODER.encode(value)  # one row per line when every row is flat, no strings
        if b'"' not in rows and rows.count(b"[") == len(value) + 1:
            out.append(b"[" + inner + rows[1:-1].replace(b"],[", b"]," + inner + b"[") + pad + b"]")
            return
    sep = b"[" + inner
    for v in value:
        out.append(sep)
        _indented(v, inner, step, out)
        sep = b"," + inner
    out.append(pad + b"]")
