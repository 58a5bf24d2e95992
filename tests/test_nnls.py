"""The scipy-free NNLS gives scipy's optimum on the shapes the fits use."""

from __future__ import annotations

import numpy as np
import pytest

from tracescale.scaling.nnls import nnls


def test_known_solutions() -> None:
    n = np.array([1.0, 2.0, 4.0, 8.0])
    x = np.column_stack([np.ones(4), 1.0 / n])
    coef, res = nnls(x, 3.0 + 5.0 / n)
    assert np.allclose(coef, [3.0, 5.0]) and res == pytest.approx(0.0, abs=1e-12)
    # y falls with N faster than b/N allows a positive a: a is clipped at 0.
    coef, _ = nnls(x, np.array([10.0, 4.0, 1.0, 0.1]))
    assert coef[0] == 0.0 and coef[1] > 0
    coef, res = nnls(x, -np.ones(4))  # nothing non-negative helps
    assert coef.tolist() == [0.0, 0.0] and res == pytest.approx(2.0)


def test_collinear_columns_give_the_sparser_answer() -> None:
    x = np.column_stack([np.ones(3), np.ones(3)])
    coef, _ = nnls(x, np.full(3, 2.0))
    assert coef.tolist() == [2.0, 0.0]


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_matches_scipy_on_random_problems(k: int) -> None:
    from scipy.optimize import nnls as scipy_nnls

    rng = np.random.default_rng(k)
    for _ in range(300):
        m = int(rng.integers(k, 9))
        x = rng.normal(size=(m, k)) * rng.uniform(0.1, 10, size=k)
        y = rng.normal(size=m) * 3
        ours, res = nnls(x, y)
        theirs, res_scipy = scipy_nnls(x, y)
        assert (ours >= 0).all()
        assert res <= res_scipy * (1 + 1e-9) + 1e-12
        assert np.allclose(ours, theirs, rtol=1e-7, atol=1e-9)


def test_wide_problems_go_to_scipy() -> None:
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(12, 6)), rng.normal(size=12)
    coef, _ = nnls(x, y)
    assert (coef >= 0).all()
