"""Exact microsecond-decimal -> integer-nanosecond conversion, vectorized.

Kineto writes ``ts`` as microseconds with three decimals (ns precision). A float64 cannot hold
1.7e15 µs to the nanosecond (its spacing there is 0.25 µs), so we never go through float: the
decoder hands us the raw JSON number text and this module parses the digits with numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal, InvalidOperation

import numpy as np
import numpy.typing as npt

_MAX_INT_DIGITS = 16  # 16 integer µs digits (year ~2250) + 3 decimals fit int64 if the lead is <= 8
_POW10 = np.array([10**k for k in range(19)], dtype=np.int64)


_BLOCK = 1 << 13  # rows per vectorized block: bounds the n x width scratch matrices


def us_text_to_ns(
    texts: Sequence[bytes],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """Parse JSON number texts in µs to int64 ns; returns (values, valid), in blocks."""
    n = len(texts)
    if n <= _BLOCK:
        return _parse_block(texts)
    values = np.empty(n, dtype=np.int64)
    valid = np.empty(n, dtype=np.bool_)
    for lo in range(0, n, _BLOCK):
        v, ok = _parse_block(texts[lo : lo + _BLOCK])
        values[lo : lo + len(v)] = v
        valid[lo : lo + len(v)] = ok
    return values, valid


def _parse_block(
    texts: Sequence[bytes],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """Parse JSON number texts in µs to int64 ns; returns (values, valid).

    Plain decimals (``-?digits[.digits]``) take the vectorized path; anything else (exponents,
    very long numbers) goes through :class:`~decimal.Decimal`. Invalid or out-of-range
    numbers (NaN, Infinity, strings, > ~31 years in µs) come back with ``valid == False``.
    """
    n = len(texts)
    values = np.zeros(n, dtype=np.int64)
    valid = np.zeros(n, dtype=np.bool_)
    if n == 0:
        return values, valid
    arr = np.array(texts, dtype=np.bytes_)
    width = arr.dtype.itemsize
    if width == 0:
        return values, valid
    mat = arr.view(np.uint8).reshape(n, width)
    neg = mat[:, 0] == ord("-")
    body = mat.copy()
    body[neg, 0] = ord("0")  # a leading zero is harmless for the value
    is_digit = (body >= ord("0")) & (body <= ord("9"))
    is_dot = body == ord(".")
    is_pad = body == 0
    dots = is_dot.sum(axis=1)
    length = width - is_pad.sum(axis=1)
    # Padding must only trail: a row is plain when every non-pad byte is a digit or the dot.
    plain = ((is_digit | is_dot | is_pad).all(axis=1)) & (dots <= 1) & (length > 0)
    plain &= ((mat >= ord("0")) & (mat <= ord("9"))).any(axis=1)  # a lone "-" is not 0
    cols = np.arange(width)
    dotpos = np.where(dots == 1, is_dot.argmax(axis=1), length)
    int_digits = dotpos - neg.astype(np.int64)
    lead = body[np.arange(n), neg.astype(np.int64)]
    plain &= (int_digits < _MAX_INT_DIGITS) | ((int_digits == _MAX_INT_DIGITS) & (lead <= ord("8")))
    # Exponent (power of ten in ns) of each column: integer digits left of the dot, 3 decimals.
    exp = np.where(
        cols[None, :] < dotpos[:, None],
        dotpos[:, None] - 1 - cols[None, :] + 3,
        3 - (cols[None, :] - dotpos[:, None]),
    )
    digits = np.where(is_digit, body - ord("0"), 0).astype(np.int64)
    use = is_digit & (exp >= 0) & (exp <= 18)
    contrib = np.where(use, digits * _POW10[np.clip(exp, 0, 18)], 0)
    total = contrib.sum(axis=1)
    # Round half up on the first sub-nanosecond digit (Kineto never writes one, others might).
    sub = is_digit & (exp == -1)
    total += (np.where(sub, digits, 0).max(axis=1) >= 5).astype(np.int64)
    values[:] = np.where(plain, np.where(neg, -total, total), 0)
    valid[:] = plain
    for i in np.flatnonzero(~plain).tolist():
        parsed = slow_parse(texts[i])
        if parsed is not None:
            values[i] = parsed
            valid[i] = True
    return values, valid


def is_out_of_range(text: bytes) -> bool:
    """Whether a number text that did not parse is a finite number too large for int64 ns
    (``1e400``, 30 digits), not something that is no number at all (NaN, a string, null):
    the two are counted apart, so a warning never calls a number "non-numeric"."""
    try:
        return Decimal(text.decode("ascii", errors="strict")).is_finite()
    except (InvalidOperation, UnicodeDecodeError, ValueError):
        return False


def slow_parse(text: bytes) -> int | None:
    """Exponent notation and other rare spellings; None when not a finite, sane number."""
    try:
        dec = Decimal(text.decode("ascii", errors="strict"))
    except (InvalidOperation, UnicodeDecodeError, ValueError):
        return None
    if not dec.is_finite() or dec.adjusted() > _MAX_INT_DIGITS + 2:
        return None  # also keeps 1e999999 from becoming a million-digit integer
    try:
        ns = int((dec * 1000).to_integral_value())
    except ArithmeticError:  # 1e999999999: beyond the decimal context
        return None
    if abs(ns) >= 9 * 10 ** (_MAX_INT_DIGITS + 2):
        return None
    return ns
