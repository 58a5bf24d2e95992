"""Byte-level JSON primitives for the compiled scanner (numba): whitespace, strings, values,
keys, integers, microsecond decimals, and an interning hash table over byte slices.

They assume JSON that msgspec has already validated, and never read past ``n``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

#: Status of a ts/dur text.
NUM_MISSING, NUM_PLAIN, NUM_SLOW = 0, 1, 2
_MAX_INT_DIGITS = 16
_I64_MAX = 2**63 - 1


@njit(cache=True, nogil=True)
def skip_ws(b: Any, i: int, n: int) -> int:
    while i < n and (b[i] == 32 or b[i] == 10 or b[i] == 13 or b[i] == 9):
        i += 1
    return i


@njit(cache=True, nogil=True)
def string_end(b: Any, i: int, n: int) -> tuple[int, bool]:
    """``b[i]`` is the opening quote: index after the closing one, and whether it escapes."""
    i += 1
    esc = False
    while i < n:
        c = b[i]
        if c == 34:
            return i + 1, esc
        if c == 92:
            esc = True
            i += 2
        else:
            i += 1
    return -1, esc


@njit(cache=True, nogil=True)
def skip_value(b: Any, i: int, n: int) -> int:
    """Index after the (already validated) JSON value starting at ``b[i]``; -1 if cut."""
    c = b[i]
    if c == 34:
        return string_end(b, i, n)[0]
    if c == 123 or c == 91:
        depth = 0
        while i < n:
            c = b[i]
            if c == 34:
                i = string_end(b, i, n)[0]
                if i < 0:
                    return -1
                continue
            if c == 123 or c == 91:
                depth += 1
            elif c == 125 or c == 93:
                depth -= 1
                if depth == 0:
                    return i + 1
            i += 1
        return -1
    while i < n:
        c = b[i]
        if c == 44 or c == 125 or c == 93 or c == 32 or c == 10 or c == 13 or c == 9:
            return i
        i += 1
    return i


@njit(cache=True, nogil=True)
def match_key(b: Any, s: int, e: int, blob: Any, offs: Any, lens: Any) -> int:
    """Index of the key ``b[s:e]`` in the table, -1 when unknown (measured: a plain scan of
    ~20 keys beats a hashed lookup here)."""
    length = e - s
    for k in range(lens.shape[0]):
        if lens[k] != length:
            continue
        o = offs[k]
        same = True
        for j in range(length):
            if b[s + j] != blob[o + j]:
                same = False
                break
        if same:
            return k
    return -1


@njit(cache=True, nogil=True)
def parse_int(b: Any, s: int, e: int) -> tuple[bool, int]:
    """A JSON integer that fits int64 (but -2**63); False for anything else."""
    neg = b[s] == 45
    i = s + 1 if neg else s
    if i >= e or e - i > 19:
        return False, 0
    v = 0
    for j in range(i, e):
        c = b[j]
        if c < 48 or c > 57:
            return False, 0
        d = c - 48
        if v > (_I64_MAX - d) // 10:
            return False, 0
        v = v * 10 + d
    return True, -v if neg else v


@njit(cache=True, nogil=True)
def parse_us(b: Any, s: int, e: int) -> tuple[int, int]:
    """Microsecond text -> (status, ns), the rules of ``numbers.us_text_to_ns`` exactly.

    Plain decimals (``-?[0-9.]+``, one dot at most, a digit somewhere, < 16 integer digits or
    16 with a lead <= 8): the digits down to the ns, half up on the next one. Anything else is
    ``NUM_SLOW`` (the caller parses it with Decimal) and an empty text ``NUM_MISSING``.
    """
    if e <= s:
        return NUM_MISSING, 0
    neg = b[s] == 45
    first = s + 1 if neg else s
    dot = -1
    digits = 0
    for j in range(first, e):
        c = b[j]
        if c == 46:
            if dot >= 0:
                return NUM_SLOW, 0
            dot = j
        elif 48 <= c <= 57:
            digits += 1
        else:
            return NUM_SLOW, 0
    if digits == 0:
        return NUM_SLOW, 0
    dotpos = dot if dot >= 0 else e
    int_digits = dotpos - first
    lead = b[first] if first < e else 48
    if not (int_digits < _MAX_INT_DIGITS or (int_digits == _MAX_INT_DIGITS and lead <= 56)):
        return NUM_SLOW, 0
    v = 0
    for j in range(first, dotpos):
        v = v * 10 + (b[j] - 48)
    v *= 1000
    scale = 100
    j = dotpos + 1
    while j < e and scale > 0:
        v += (b[j] - 48) * scale
        scale //= 10
        j += 1
    if j < e and b[j] >= 53:  # the first sub-ns digit rounds half up
        v += 1
    return NUM_PLAIN, -v if neg else v


@njit(cache=True, nogil=True)
def fnv_hash(b: Any, s: int, e: int, kind: int) -> np.uint64:
    h = np.uint64(14695981039346656037) ^ np.uint64(kind)
    for j in range(s, e):
        h = (h ^ np.uint64(b[j])) * np.uint64(1099511628211)
    return h


@njit(cache=True, nogil=True)
def rehash(b: Any, spans: Any, count: int, size: int) -> Any:
    """A hash table of ``size`` slots over the first ``count`` interned slices."""
    table = np.full(size, -1, dtype=np.int64)
    mask = np.uint64(size - 1)
    for r in range(count):
        slot = fnv_hash(b, spans[r, 0], spans[r, 1], spans[r, 2]) & mask
        while table[slot] >= 0:
            slot = (slot + np.uint64(1)) & mask
        table[slot] = r
    return table


@njit(cache=True, nogil=True)
def intern(b: Any, s: int, e: int, kind: int, table: Any, spans: Any, count: int) -> int:
    """Id of the byte slice (of ``kind``); a new one gets id ``count``. The caller keeps the
    table under half full and ``spans`` roomy (checked once per event)."""
    mask = np.uint64(table.shape[0] - 1)
    slot = fnv_hash(b, s, e, kind) & mask
    length = e - s
    while True:
        r = table[slot]
        if r < 0:
            table[slot] = count
            spans[count, 0], spans[count, 1], spans[count, 2] = s, e, kind
            return count
        rs = spans[r, 0]
        if spans[r, 2] == kind and spans[r, 1] - rs == length:
            same = True
            for j in range(length):
                if b[rs + j] != b[s + j]:
                    same = False
                    break
            if same:
                return int(r)
        slot = (slot + np.uint64(1)) & mask
