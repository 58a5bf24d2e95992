"""Step windows as column operations equal the step-by-step rule they replace (each step starts
no earlier than the previous one ends and reaches the end of the device work it launched), on
random graphs in float seconds and integer ns."""

from __future__ import annotations

import types

import numpy as np
import pytest

from tracescale.replay.engine.schedule import DEV, step_windows


def _loop(g: types.SimpleNamespace, start: np.ndarray, end: np.ndarray) -> tuple[list, list]:
    k = len(g.step_first)
    floor = -np.inf if np.issubdtype(end.dtype, np.floating) else np.iinfo(end.dtype).min
    dev_end = np.full(k, floor, dtype=end.dtype)
    dev = g.kind >= DEV
    ok = g.step[dev] >= 0
    np.maximum.at(dev_end, g.step[dev][ok], end[dev][ok])
    prev, lo, hi = floor, [], []
    for i in range(k):
        s = max(start[g.step_first[i]], prev)
        e = max(end[g.step_last[i]], dev_end[i], s)
        lo.append(s)
        hi.append(e)
        prev = e
    return lo, hi


@pytest.mark.parametrize("dtype", [np.float64, np.int64])
def test_windows_equal_the_step_by_step_rule(dtype: type) -> None:
    rng = np.random.default_rng(7)
    for _ in range(200):
        k = int(rng.integers(0, 30))
        n = int(rng.integers(max(k, 1), 80))
        step = rng.integers(-1, k, n) if k else np.full(n, -1)
        g = types.SimpleNamespace(
            step_first=rng.integers(0, n, k),
            step_last=rng.integers(0, n, k),
            kind=rng.integers(0, 6, n).astype(np.int8),
            step=step.astype(np.int32),
        )
        start = np.sort(rng.integers(0, 1000, n)).astype(dtype)
        end = (start + rng.integers(0, 300, n)).astype(dtype)
        lo, hi = step_windows(g, start, end)  # type: ignore[arg-type]
        want_lo, want_hi = _loop(g, start, end)
        assert np.array_equal(lo, np.array(want_lo, dtype=dtype))
        assert np.array_equal(hi, np.array(want_hi, dtype=dtype))
