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
