"""How the replayed ends of each uncertain input make one interval
(``replay.uncertainty.intervals``)."""

from __future__ import annotations

import math

import pytest

from tracescale.replay.uncertainty.intervals import combine_ends


def test_one_source_keeps_its_own_ends() -> None:
    assert combine_ends(10.0, [(9.0, 12.0)]) == pytest.approx((9.0, 12.0), rel=1e-12)
    assert combine_ends(10.0, [(10.0, 10.0), ()]) == (10.0, 10.0)


def test_sources_add_in_quadrature_on_the_log_scale() -> None:
    """Each source's widest end on each side; a source with ends on one side only widens that
    side; independent sources add as sqrt(sum of squared log factors)."""
    lo, hi = combine_ends(10.0, [(9.0, 11.0), (8.0, 9.5), (10.5, 12.5), ()])
    assert lo == pytest.approx(10.0 * math.exp(-math.hypot(math.log(0.9), math.log(0.8))))
    assert hi == pytest.approx(10.0 * math.exp(math.hypot(math.log(1.1), math.log(1.25))))
    assert lo == pytest.approx(7.8132, abs=1e-4) and hi == pytest.approx(12.7462, abs=1e-4)


def test_never_narrower_than_the_widest_source_and_never_below_zero() -> None:
    lo, hi = combine_ends(1.0, [(0.1, 1.0), (0.05, 3.0), (0.5, 2.9)])
    assert 0.0 < lo < 0.05 and hi > 3.0
    assert combine_ends(0.0, [(0.0, 1.0)]) == (0.0, 0.0)
