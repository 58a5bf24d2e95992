"""A compiled (numba) scanner over the bytes of ``traceEvents``: columns without Python objects.

Why: building columns from decoded Python objects costs ~0.2 s per 50k events however it is
done (structs, dicts, ``attrgetter`` maps); the scanner walks the JSON bytes once and writes
numbers, nanoseconds and string ids straight into arrays, several times faster.

It is a fast path with exactly the typed decoder's results, not a second parser: the caller
has already validated the whole document with msgspec, and the scanner gives up (returns
``BAIL``) on anything the typed decoder would not read the plain way: a wrong type (the typed
decoder would fail and the lenient path run), a duplicate key, an escaped key or ``ph``,
integers beyond 18 digits. The caller then takes the typed path. Strings are interned as raw
byte slices here; the caller decodes the few distinct ones.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

OK, BAIL = 0, 1
#: Per-event phase codes in ``phases``.
PH_NONE, PH_X, PH_M, PH_B, PH_E, PH_OTHER = 0, 1, 2, 3, 4, 5
#: Status of a ts/dur text in ``flags`` (2 bits each: ts at bit 0, dur at bit 2).
NUM_MISSING, NUM_PLAIN, NUM_SLOW = 0, 1, 2
PID_STR, TID_STR = 16, 32
#: Fixed int64 columns before the int args, and int32 columns before the string args.
I_TS, I_DUR, I_PID, I_TID, N_FIXED_I64 = 0, 1, 2, 3, 4
J_EVIDX, J_FLAGS, J_CAT, J_NAME, N_FIXED_I32 = 0, 1, 2, 3, 4
#: Kinds of arg keys (``arg_kind``).
ARG_INT, ARG_STR, ARG_RAW, ARG_CHECK_STR = 0, 1, 2, 3
_EVENT_KEYS = (b"ph", b"cat", b"name", b"pid", b"tid", b"ts", b"dur", b"args")
_MAX_INT_DIGITS = 16
_I64_MAX = 2**63 - 1
_MAX_NEW_STRINGS = 64  # strings one event can add: well above its keys that hold strings


def key_table(keys: list[bytes]) -> tuple[Any, Any, Any]:
    """Concatenated key bytes, offsets and lengths, as the kernel matches them."""
    blob = np.frombuffer(b"".join(keys) or b"\0", dtype=np.uint8).copy()
    lens = np.array([len(k) for k in keys], dtype=np.int64)
    offs = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
    return blob, offs, lens


EVENT_KEYS = key_table(list(_EVENT_KEYS))


@njit(cache=True, nogil=True)
def _ws(b: Any, i: int, n: int) -> int:
    while i < n and (b[i] == 32 or b[i] == 10 or b[i] == 13 or b[i] == 9):
        i += 1
    return i


@njit(cache=True, nogil=True)
def _string_end(b: Any, i: int, n: int) -> tuple[int, bool]:
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
def _skip_value(b: Any, i: int, n: int) -> int:
    """Index after the (already validated) JSON value starting at ``b[i]``; -1 if cut."""
    c = b[i]
    if c == 34:
        return _string_end(b, i, n)[0]
    if c == 123 or c == 91:
        depth = 0
        while i < n:
            c = b[i]
            if c == 34:
                i = _string_end(b, i, n)[0]
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
def _match(b: Any, s: int, e: int, blob: Any, offs: Any, lens: Any) -> int:
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
def _parse_int(b: Any, s: int, e: int) -> tuple[bool, int]:
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
def _fnv(b: Any, s: int, e: int, kind: int) -> np.uint64:
    h = np.uint64(14695981039346656037) ^ np.uint64(kind)
    for j in range(s, e):
        h = (h ^ np.uint64(b[j])) * np.uint64(1099511628211)
    return h


@njit(cache=True, nogil=True)
def _rehash(b: Any, spans: Any, count: int, size: int) -> Any:
    """A hash table of ``size`` slots over the first ``count`` interned slices."""
    table = np.full(size, -1, dtype=np.int64)
    mask = np.uint64(size - 1)
    for r in range(count):
        slot = _fnv(b, spans[r, 0], spans[r, 1], spans[r, 2]) & mask
        while table[slot] >= 0:
            slot = (slot + np.uint64(1)) & mask
        table[slot] = r
    return table


@njit(cache=True, nogil=True)
def _intern(b: Any, s: int, e: int, kind: int, table: Any, spans: Any, count: int) -> int:
    """Id of the byte slice (of ``kind``); a new one gets id ``count``. The caller keeps the
    table under half full and ``spans`` roomy (checked once per event)."""
    mask = np.uint64(table.shape[0] - 1)
    slot = _fnv(b, s, e, kind) & mask
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


@njit(cache=True, nogil=True)
def scan_events(
    b: Any,
    lo: int,
    hi: int,
    ev_keys: tuple[Any, Any, Any],
    arg_keys: tuple[Any, Any, Any],
    arg_kind: Any,
    arg_slot: Any,
    n_i64: int,
    n_i32: int,
    capacity: int,
) -> tuple[int, int, int, Any, Any, Any, Any, int, Any, int, Any, int]:
    """Scan the array ``b[lo:hi]`` of trace events.

    Returns (status, events, X rows, phases, i64 rows, i32 rows, slow numbers, their count,
    M spans, their count, string spans, strings), arrays over-allocated: the counts say how
    much is filled. Only complete (``X``) events get rows; ``M`` events come back as byte
    spans; every event gets a phase code.
    """
    eblob, eoffs, elens = ev_keys
    ablob, aoffs, alens = arg_keys
    cap = max(capacity, 16)
    i64 = np.empty((n_i64, cap), dtype=np.int64)  # column-major: columns come out as views
    i32 = np.empty((n_i32, cap), dtype=np.int32)
    phases = np.empty(cap, dtype=np.uint8)
    slow = np.empty((16, 4), dtype=np.int64)
    n_slow = 0
    metas = np.empty((16, 2), dtype=np.int64)
    n_meta = 0
    table = np.full(1024, -1, dtype=np.int64)
    spans = np.empty((512, 3), dtype=np.int64)
    n_str = 1
    spans[0, 0], spans[0, 1], spans[0, 2] = 0, 0, 0  # id 0 is the empty string
    n_ev = 0
    nx = 0
    fail = (BAIL, 0, 0, phases, i64, i32, slow, 0, metas, 0, spans, 0)
    i = _ws(b, lo + 1, hi)  # after '['
    if i < hi and b[i] == 93:
        return (OK, 0, 0, phases, i64, i32, slow, 0, metas, 0, spans, 1)
    while i < hi:
        if b[i] != 123:
            return fail  # not an object: the typed decoder would reject it
        if n_ev >= phases.shape[0]:  # phases and rows grow together (n_ev >= nx)
            new_cap = phases.shape[0] + phases.shape[0] // 2 + 16
            g64 = np.empty((n_i64, new_cap), dtype=np.int64)
            g64[:, :nx] = i64[:, :nx]
            i64 = g64
            g32 = np.empty((n_i32, new_cap), dtype=np.int32)
            g32[:, :nx] = i32[:, :nx]
            i32 = g32
            gph = np.empty(new_cap, dtype=np.uint8)
            gph[:n_ev] = phases[:n_ev]
            phases = gph
        if (n_str + _MAX_NEW_STRINGS) * 2 > table.shape[0]:  # room for this event's strings
            table = _rehash(b, spans, n_str, table.shape[0] * 2)
        if n_str + _MAX_NEW_STRINGS > spans.shape[0]:
            grown = np.empty((spans.shape[0] * 2, 3), dtype=np.int64)
            grown[:n_str] = spans[:n_str]
            spans = grown
        obj_start = i
        for k in range(n_i64):
            i64[k, nx] = -1
        for k in range(n_i32):
            i32[k, nx] = -1
        i64[I_PID, nx] = 0
        i64[I_TID, nx] = 0
        i32[J_EVIDX, nx] = n_ev
        i32[J_FLAGS, nx] = 0
        ph = PH_NONE
        ts_s = ts_e = dur_s = dur_e = 0
        seen = 0
        i = _ws(b, i + 1, hi)
        while i < hi and b[i] != 125:
            if b[i] != 34:
                return fail
            ke, kesc = _string_end(b, i, hi)
            if ke < 0 or kesc:
                return fail
            key = _match(b, i + 1, ke - 1, eblob, eoffs, elens)
            i = _ws(b, ke, hi)
            i = _ws(b, i + 1, hi)  # after ':'
            vs = i
            if key >= 0:
                if seen & (1 << key):
                    return fail  # duplicate key: the typed decoder keeps the last one
                seen |= 1 << key
            if key == 0 or key == 1 or key == 2:  # ph, cat, name: strings
                if b[vs] != 34:
                    return fail
                ve, vesc = _string_end(b, vs, hi)
                if key == 0:
                    if vesc:
                        return fail
                    length = ve - vs - 2
                    c = b[vs + 1]
                    if length == 0:
                        ph = PH_NONE
                    elif length == 1 and c == 88:
                        ph = PH_X
                    elif length == 1 and c == 77:
                        ph = PH_M
                    elif length == 1 and c == 66:
                        ph = PH_B
                    elif length == 1 and c == 69:
                        ph = PH_E
                    else:
                        ph = PH_OTHER
                else:
                    sid = _intern(b, vs + 1, ve - 1, 0, table, spans, n_str)
                    if sid == n_str:
                        n_str += 1
                    i32[J_CAT if key == 1 else J_NAME, nx] = sid
                i = ve
            elif key == 3 or key == 4:  # pid, tid: int or string
                if b[vs] == 34:
                    ve, _esc = _string_end(b, vs, hi)
                    sid = _intern(b, vs + 1, ve - 1, 0, table, spans, n_str)
                    if sid == n_str:
                        n_str += 1
                    i64[I_PID if key == 3 else I_TID, nx] = sid
                    i32[J_FLAGS, nx] |= PID_STR if key == 3 else TID_STR
                else:
                    ve = _skip_value(b, vs, hi)
                    ok, v = _parse_int(b, vs, ve)
                    if not ok:
                        return fail
                    i64[I_PID if key == 3 else I_TID, nx] = v
                i = ve
            elif key == 5 or key == 6:  # ts, dur: any value, kept as its text
                ve = _skip_value(b, vs, hi)
                if key == 5:
                    ts_s, ts_e = vs, ve
                else:
                    dur_s, dur_e = vs, ve
                i = ve
            elif key == 7:  # args
                if b[vs] != 123:
                    return fail
                aseen = 0
                i = _ws(b, vs + 1, hi)
                while i < hi and b[i] != 125:
                    if b[i] != 34:
                        return fail
                    ke, kesc = _string_end(b, i, hi)
                    if ke < 0 or kesc:
                        return fail
                    ak = _match(b, i + 1, ke - 1, ablob, aoffs, alens)
                    i = _ws(b, ke, hi)
                    avs = _ws(b, i + 1, hi)
                    ave = _skip_value(b, avs, hi)
                    if ave < 0:
                        return fail
                    if ak >= 0:
                        if aseen & (1 << ak):
                            return fail
                        aseen |= 1 << ak
                        kind = arg_kind[ak]
                        slot = arg_slot[ak]
                        if kind == ARG_INT:
                            ok, v = _parse_int(b, avs, ave)
                            if not ok:
                                return fail
                            i64[slot, nx] = v
                        elif kind == ARG_RAW:
                            sid = _intern(b, avs, ave, 1, table, spans, n_str)
                            if sid == n_str:
                                n_str += 1
                            i32[slot, nx] = sid
                        else:  # a string arg: a column, or only checked to be a string
                            if b[avs] != 34:
                                return fail
                            if kind == ARG_STR:
                                sid = _intern(b, avs + 1, ave - 1, 0, table, spans, n_str)
                                if sid == n_str:
                                    n_str += 1
                                i32[slot, nx] = sid
                    i = _ws(b, ave, hi)
                    if i < hi and b[i] == 44:
                        i = _ws(b, i + 1, hi)
                i += 1  # '}' of args
            else:
                i = _skip_value(b, vs, hi)
            if i < 0:
                return fail
            i = _ws(b, i, hi)
            if i < hi and b[i] == 44:
                i = _ws(b, i + 1, hi)
        obj_end = i + 1
        phases[n_ev] = ph
        if ph == PH_X:
            st, v = parse_us(b, ts_s, ts_e)
            i64[I_TS, nx] = v
            st2, v2 = parse_us(b, dur_s, dur_e)
            i64[I_DUR, nx] = v2
            i32[J_FLAGS, nx] |= st | (st2 << 2)
            for which in range(2):
                status = st if which == 0 else st2
                if status == NUM_SLOW:
                    if n_slow >= slow.shape[0]:
                        gs = np.empty((slow.shape[0] * 2, 4), dtype=np.int64)
                        gs[:n_slow] = slow[:n_slow]
                        slow = gs
                    slow[n_slow, 0] = nx
                    slow[n_slow, 1] = which
                    slow[n_slow, 2] = ts_s if which == 0 else dur_s
                    slow[n_slow, 3] = ts_e if which == 0 else dur_e
                    n_slow += 1
            nx += 1
        elif ph == PH_M:
            if n_meta >= metas.shape[0]:
                gm = np.empty((metas.shape[0] * 2, 2), dtype=np.int64)
                gm[:n_meta] = metas[:n_meta]
                metas = gm
            metas[n_meta, 0] = obj_start
            metas[n_meta, 1] = obj_end
            n_meta += 1
        n_ev += 1
        i = _ws(b, obj_end, hi)
        if i < hi and b[i] == 44:
            i = _ws(b, i + 1, hi)
        elif i < hi and b[i] == 93:
            break
    return (OK, n_ev, nx, phases, i64, i32, slow, n_slow, metas, n_meta, spans, n_str)


@njit(cache=True, nogil=True)
def first_keys(ids: Any, evidx: Any, n_ids: int, chunk: int) -> Any:
    """Per id, the smallest ``(chunk, column, row)`` key it appears at, as one int64.

    ``ids`` is (rows, columns), rows in event order: the order in which the typed path's
    chunk-by-chunk, column-by-column interning meets each string first.
    """
    big = np.iinfo(np.int64).max
    out = np.full(n_ids, big, dtype=np.int64)
    n_cols = ids.shape[1]
    for r in range(ids.shape[0]):
        c = evidx[r] // chunk
        pos = evidx[r] % chunk
        for k in range(n_cols):
            key = (c * n_cols + k) * chunk + pos
            v = ids[r, k]
            if key < out[v]:
                out[v] = key
    return out
