"""Cycles of steps (gradient accumulation): each phase weighs 1/period in the mean step."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tests.independent.gen import PATTERNS, build_study
from tracescale.api import analyze
from tracescale.replay.engine.cycles import (
    bootstrap_mean,
    cycle_period,
    rare_kind,
    small_sample_factor,
    step_mix,
    weighted_mean,
)


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
    w = step_mix(sig).weights
    assert w.sum() == pytest.approx(1.0)
    assert w.tolist() == pytest.approx([1 / 9, 1 / 9, 1 / 6, 1 / 9, 1 / 9, 1 / 6, 1 / 9, 1 / 9])
    assert weighted_mean(steps, w) == pytest.approx(4e-3)  # the cycle's mean, not 3.5 ms
    assert float(np.mean(steps)) == pytest.approx(3.5e-3)


def test_whole_cycles_and_no_cycle_keep_equal_weights() -> None:
    assert step_mix(np.array([5, 5, 7, 5, 5, 7])).weights.tolist() == pytest.approx([1 / 6] * 6)
    assert step_mix(np.array([3, 4, 5])).weights.tolist() == pytest.approx([1 / 3] * 3)
    assert weighted_mean(np.array([1.0, 3.0]), np.zeros(0)) == 2.0


@pytest.mark.parametrize("m", [4, 5, 6, 7])
def test_one_optimizer_step_in_a_window_weighs_one_over_the_shortest_period(m: int) -> None:
    """A 4-step accumulation cycle profiled from its first micro-step: the optimizer step at
    position 3 of m < 8 steps shows once; no other among the 3 before it means a period of at
    least 4, so it weighs 1/4 (the plain mean gave 1/m)."""
    sig = np.array([26] * m)
    sig[3] = 33
    w = step_mix(sig).weights
    assert w.sum() == pytest.approx(1.0)
    assert w[3] == pytest.approx(1 / 4)
    assert np.delete(w, 3).tolist() == pytest.approx([3 / 4 / (m - 1)] * (m - 1))
    low, high = step_mix(sig).ends
    assert low[3] == pytest.approx(1 / 8) and high[3] == pytest.approx(1 / 4)


def test_the_rare_kind_share_from_its_position_and_spacing() -> None:
    # once, at position 1 of 6: no other in the 4 steps after it, so a period of at least 5
    got = rare_kind(np.array([5, 7, 5, 5, 5, 5]))
    assert got is not None and got[1] == pytest.approx(1 / 5)
    # twice, 4 apart, none missing at either edge of 7 steps: every 4th
    got = rare_kind(np.array([5, 7, 5, 5, 5, 7, 5]))
    assert got is not None and got[1] == pytest.approx(1 / 4)
    # twice, unevenly (or with one missing at an edge): no cycle, equal weights
    assert rare_kind(np.array([7, 5, 5, 7, 5, 7, 5])) is None
    assert rare_kind(np.array([7, 5, 7, 5, 5, 5, 5])) is None
    assert step_mix(np.array([7, 5, 7, 5, 5, 5, 5])).weights.tolist() == pytest.approx([1 / 7] * 7)
    # three kinds, or two equally common: nothing to estimate
    assert rare_kind(np.array([5, 6, 7, 5, 5, 5])) is None
    assert rare_kind(np.array([5, 7, 7, 5])) is None
    assert step_mix(np.array([5, 5, 7, 5, 5, 7, 5, 5])).ends == ()  # a cycle was found


def test_steps_are_strata_only_where_their_kinds_follow_a_cycle() -> None:
    cycle = np.array([5, 5, 7, 5, 5, 7, 5, 5])
    got = step_mix(cycle).strata
    assert got is not None and got.tolist() == cycle.tolist()
    once = np.array([26, 26, 26, 33, 26])
    got = step_mix(once).strata
    assert got is not None and got.tolist() == once.tolist()
    assert step_mix(np.array([5, 5, 5, 5])).strata is None  # alike
    assert step_mix(np.array([7, 5, 5, 7, 5, 7, 5])).strata is None  # no cycle to them
    assert step_mix(np.array([1, 2, 3, 4])).strata is None


def test_the_bootstrap_resamples_within_each_kind_of_step() -> None:
    """2 optimizer steps of 9 ms among 8 (a 4-step cycle), the others 1 ms: the cycle is no
    noise, so with the kinds as strata the interval is the point; drawn iid, the optimizer
    step appears 0 to 5 times in a resample and the interval spans about 2.0-5.0 ms."""
    steps = np.array([1, 1, 1, 9, 1, 1, 1, 9], dtype=float) * 1e-3
    kinds = np.array([26, 26, 26, 33, 26, 26, 26, 33])
    w = step_mix(kinds).weights
    lo, hi = bootstrap_mean(steps, 0, weighted_mean(steps, w), kinds, w)
    assert lo == pytest.approx(3e-3) and hi == pytest.approx(3e-3)
    iid = bootstrap_mean(steps, 0)
    assert iid[0] < 2.1e-3 and iid[1] > 4.9e-3


def test_few_steps_widen_the_bootstrap_to_students_t() -> None:
    """t95(n-1)/z95 * sqrt(n/(n-1)): 1.65x at 4 steps, 1.23x at 8, about 1 at 1,000; nothing
    to widen below 2 steps. Normal steps: the widened interval is close to the t interval."""
    assert small_sample_factor(1) == 1.0
    assert small_sample_factor(4) == pytest.approx(2.3534 / 1.64485 * (4 / 3) ** 0.5, rel=1e-4)
    assert small_sample_factor(8) == pytest.approx(1.2309, rel=1e-3)
    assert small_sample_factor(1000) == pytest.approx(1.0, abs=2e-3)
    steps = np.array([10.0, 11.0, 9.5, 10.5])
    lo, hi = bootstrap_mean(steps, 3)
    half_t = 2.3534 * float(np.std(steps, ddof=1)) / 2.0
    assert (hi - lo) / 2 == pytest.approx(half_t, rel=0.2)


def test_a_window_without_the_optimizer_step_is_flagged(tmp_path: Path) -> None:
    """3 profiled steps of a 4-step accumulation cycle hold no AllReduce at all: the study
    says so (its projections leave the job's communication out) rather than staying silent;
    a window that holds the optimizer step does not get the warning."""
    p = PATTERNS["grad_accum"]()
    for steps, flagged in ((3, True), (4, False)):
        where = tmp_path / str(steps)
        build_study(replace(p, layers=2, steps=steps, sizes=(1, 3), targets=(6,)), str(where))
        warnings = analyze(where, jobs=1, no_cache=True).studies[0]["warnings"]
        hit = [w for w in warnings if w.startswith("the runs at N=3 traced no collective")]
        assert bool(hit) == flagged, warnings
