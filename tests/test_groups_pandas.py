"""tracescale.groups gives pandas' groupby numbers bit for bit, also where one long group sits
among many short ones (the shape that made a position-by-position scan quadratic)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tracescale.groups import group_mean, group_std, group_sum


@pytest.mark.parametrize("seed", range(6))
def test_group_sums_and_stds_equal_pandas(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_groups = int(rng.integers(1, 60))
    weights = rng.random(n_groups) ** 4
    codes = rng.choice(n_groups, size=5000, p=weights / weights.sum()).astype(np.int64)
    codes[: int(rng.integers(0, 2000))] = 0  # one long group
    values = rng.normal(size=len(codes)) * 10.0 ** rng.integers(-6, 9, size=len(codes))
    values[rng.random(len(codes)) < 0.05] = np.nan
    frame = pd.DataFrame({"g": codes, "v": values})
    by = frame.groupby("g")["v"]
    present = np.unique(codes)
    assert np.array_equal(group_sum(codes, values, n_groups)[present], by.sum().to_numpy())
    mean = group_mean(codes, values, n_groups)[present]
    assert np.array_equal(mean, by.mean().to_numpy(), equal_nan=True)
    std = group_std(codes, values, n_groups)[present]
    assert np.array_equal(std, by.std().to_numpy(), equal_nan=True)


@pytest.mark.parametrize("seed", range(3))
def test_compiled_sums_equal_the_plain_ones_and_pandas(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The row-at-a-time loop (compiled where numba is already loaded) gives the vectorised
    update's sums to the bit, infinities and NaN rows included."""
    from tracescale import groups

    rng = np.random.default_rng(100 + seed)
    n_groups = int(rng.integers(1, 40))
    codes = rng.integers(0, n_groups, size=20000).astype(np.int64)
    codes[: int(rng.integers(0, 8000))] = 0
    values = rng.normal(size=len(codes)) * 10.0 ** rng.integers(-6, 9, size=len(codes))
    values[rng.random(len(codes)) < 0.05] = np.nan
    values[int(rng.integers(0, len(codes)))] = np.inf
    kernel = groups._kahan_compiled._load()
    with monkeypatch.context() as m:  # the vectorised path, whatever this process loaded
        m.setattr(groups._kahan_compiled, "get", lambda size: None)
        plain = groups.kahan_sum(codes, values, n_groups)
    assert kernel is not None
    total, comp = np.zeros(n_groups), np.zeros(n_groups)
    kernel(np.where(np.isnan(values), -1, codes), values, total, comp)
    assert np.array_equal(total, plain[0], equal_nan=True)
    frame = pd.DataFrame({"g": codes, "v": values})
    want = frame.groupby("g")["v"].sum().to_numpy()
    present = np.unique(codes)
    assert np.array_equal(total[present], want, equal_nan=True)


def test_the_compiled_sums_wait_for_numba_to_be_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    """However many rows are summed, the sums never import numba themselves: only where the
    scanner (or a replay loop) loaded it do they run compiled."""
    from tracescale import compiled, groups

    loop = compiled.Compiled(groups._kahan_rows, imports_numba=False)
    monkeypatch.setattr(compiled, "numba_loaded", lambda: False)
    assert loop.get(100 * compiled.MIN_ELEMENTS) is None and not loop._done
    monkeypatch.setattr(compiled, "numba_loaded", lambda: True)
    assert loop.get(1) is not None
