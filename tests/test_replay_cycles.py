"""Cycles of steps (gradient accumulation): each phase weighs 1/period in the mean step."""

from __future__ import annotations

import numpy as np
import pytest

from tracescale.replay.cycles import cycle_period, phase_weights, weighted_mean


def test_cycle_period_is_the_shortest_exact_repeat() -> None:
    assert cycle_period(np.array([5, 5, 7, 5, 5, 7, 5, 5])) == 3
    assert cycle_period(np.array([5, 6, 5, 6])) == 2
    assert cycle_period(np.array([5, 5, 5, 5])) == 1
    assert cycle_period(np.array([1, 2, 3, 4])) == 1  # no repeat
    assert cycle_period(np.array([5, 5, 7, 5])) == 1  # no whole repeat of the cycle


def test_a_partial_cycle_does_not_tilt_the_mean() -> None:
    """8 steps of a 3-step cycle (2 ms, 2 ms, 8 ms): 2 optimizer steps among 8."""
    sig = np.array([5, 5, 7, 5, 5, 7, 5, 5])
    steps = np.where(sig == 7, 8e-3, 2e-3)
    w = phase_weights(sig)
    assert w.sum() == pytest.approx(1.0)
    assert w.tolist() == pytest.approx([1 / 9, 1 / 9, 1 / 6, 1 / 9, 1 / 9, 1 / 6, 1 / 9, 1 / 9])
    assert weighted_mean(steps, w) == pytest.approx(4e-3)  # the cycle's mean, not 3.5 ms
    assert float(np.mean(steps)) == pytest.approx(3.5e-3)


def test_whole_cycles_and_no_cycle_keep_equal_weights() -> None:
    assert phase_weights(np.array([5, 5, 7, 5, 5, 7])).tolist() == pytest.approx([1 / 6] * 6)
    assert phase_weights(np.array([3, 4, 5])).tolist() == pytest.approx([1 / 3] * 3)
    assert weighted_mean(np.array([1.0, 3.0]), np.zeros(0)) == 2.0
