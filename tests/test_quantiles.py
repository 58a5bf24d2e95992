"""The scipy-free Student's t percentile the alpha-beta fits use equals scipy's."""

from __future__ import annotations

import pytest
from scipy.stats import t

from tracescale.scaling.quantiles import student_t95


@pytest.mark.parametrize("dof", [1, 2, 3, 5, 10, 29, 30, 31, 32, 40, 100, 1000, 10**6])
def test_student_t95_matches_scipy(dof: int) -> None:
    assert student_t95(dof) == pytest.approx(float(t.ppf(0.95, dof)), abs=6e-5)


def test_student_t95_rejects_no_degrees_of_freedom() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        student_t95(0)
