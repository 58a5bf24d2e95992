"""Per-step rows of the document: one list of floats per step, None where not finite, the same
whether a column's repeated values share one float object (many steps) or not (few)."""

from __future__ import annotations

import numpy as np

from tracescale.runs import _SHARE_FROM, _rows


def _expected(values: np.ndarray) -> list[list[float | None]]:
    return [[float(v) if np.isfinite(v) else None for v in row] for row in values.tolist()]


def test_rows_equal_the_plain_conversion_on_both_paths() -> None:
    rng = np.random.default_rng(3)
    for n in (5, _SHARE_FROM + 17):
        values = rng.random((n, 6))
        values[:, 1] = 0.0  # a category absent from every step
        values[:, 2] = rng.integers(0, 4, n)  # the rank
        values[n // 2, 1] = np.nan
        values[1, 3] = np.inf
        values[2, 2] = -np.inf
        rows = _rows(values)
        assert rows == _expected(values)
        assert all(type(v) is float for row in rows for v in row if v is not None)


def test_many_steps_share_the_repeated_values() -> None:
    n = _SHARE_FROM + 1
    values = np.zeros((n, 3))
    values[:, 2] = np.arange(n)  # distinct in every step: converted, not shared
    rows = _rows(values)
    assert rows[0][0] is rows[-1][0] and rows[0][1] is rows[5][1]
    assert rows[0][2] == 0.0 and rows[-1][2] == float(n - 1)
