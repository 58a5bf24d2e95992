"""Exact µs-text -> ns parsing (floats cannot hold 1.7e15 µs to the nanosecond)."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from tracescale.ingest.numbers import us_text_to_ns


def test_exact_values():
    texts = [b"1712195495519689.047", b"0", b"-12.5", b"3", b"1e3", b"0.0005", b"", b"NaN", b"abc",
             b"1" * 30, b"2.", b"-"]  # fmt: skip
    values, valid = us_text_to_ns(texts)
    assert values[:6].tolist() == [1712195495519689047, 0, -12500, 3000, 1_000_000, 1]
    assert valid.tolist() == [True] * 6 + [False] * 4 + [True, False]
    assert values[10] == 2000


def test_blocks_match_single_pass():
    texts = [str(i * 1.001).encode() for i in range(20000)]
    values, valid = us_text_to_ns(texts)
    assert valid.all()
    assert values[12345] == int(Decimal(texts[12345].decode()) * 1000)


@given(st.integers(min_value=-(10**15), max_value=8 * 10**15), st.integers(0, 999))
def test_matches_decimal(whole, frac):
    text = f"{whole}.{frac:03d}".encode()
    values, valid = us_text_to_ns([text])
    assert valid[0]
    assert values[0] == int(Decimal(text.decode()) * 1000)
