"""Choosing the delay tail's threshold: a GPD fitted where one fits, the draws alone elsewhere."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tracescale.replay.arrivals.variability import delay_assumption
from tracescale.replay.uncertainty.delays import (
    DelayModel,
    empirical_max,
    expected_max_sum,
    model_max,
    pool_delays,
    sorted_quantile,
)
from tracescale.replay.uncertainty.tail_choice import (
    combined,
    held_out_max,
    mixture_grid,
    ranked,
    stall_count,
)
from tracescale.replay.uncertainty.tail_fit import TAIL_SHARES, choose_tail, forward_stop

ONE = np.zeros(1)


def test_sorted_quantile_is_numpys_linear_quantile() -> None:
    rng = np.random.default_rng(3)
    for m in (1, 2, 7, 256):
        x = np.sort(rng.lognormal(-6, 1.5, m))
        p = np.concatenate([[0.0, 1.0], rng.uniform(0, 1, 9), (np.arange(16) + 0.5) / 16])
        assert sorted_quantile(x, p) == pytest.approx(np.quantile(x, p), rel=1e-14, abs=0)


def test_forward_stop_rejects_a_leading_run_of_poor_fits_only() -> None:
    assert forward_stop([0.5, 0.4, 0.9]) == 0  # the lowest threshold fits
    # two poor fits, then good ones: mean -log(1-p) is 0.0015 after two, 0.23 after three
    assert forward_stop([0.001, 0.002, 0.5, 0.6]) == 2
    assert forward_stop([0.001, 0.01, 0.02]) == 3  # none fits
    # one unlucky small p-value among good fits does not reject the lowest threshold
    assert forward_stop([0.5, 0.01, 0.7]) == 0


def test_empirical_max_is_exact() -> None:
    # max of two draws from {1, 2, 3}: over the 9 ordered pairs the maxima sum to 22
    assert empirical_max(np.array([1.0, 2.0, 3.0]), 2) == pytest.approx(22 / 9)
    assert empirical_max(np.array([1.0, 2.0, 3.0]), 1) == pytest.approx(2.0)


def test_a_pareto_sample_is_fitted_from_its_lowest_threshold() -> None:
    """A Lomax delay is Pareto from its bottom: every draw informs the shape."""
    draws = np.sort(2.0 * np.random.default_rng(3).pareto(2.2, size=300))
    got = choose_tail(draws, seed=0)
    assert got.share == TAIL_SHARES[0]
    assert got.tail is not None and 0.3 < got.tail.shape < 0.6
    assert len(got.alternatives) == len(TAIL_SHARES) - 1  # the higher thresholds, for the ends


def test_rare_fixed_stalls_get_no_tail_and_the_draws_give_the_slowest_rank() -> None:
    """Ordinary steps plus 3% stalls of ~25 ms: no GPD fits above any threshold (a fitted one
    spread the stalls over a smooth tail and read the slowest of 16 ranks ~60% low)."""
    rng = np.random.default_rng(11)

    def draw(n: int) -> np.ndarray:
        stall = np.where(rng.random(n) < 0.03, 25e-3 * (1 + 0.1 * rng.random(n)), 0.0)
        return rng.gamma(4, 1e-4, n) + stall

    truth = {n: float(draw(n * 20000).reshape(20000, n).max(axis=1).mean()) for n in (16, 64)}
    errors = {16: [], 64: []}
    for seed in range(8):
        x = draw(150)
        med = float(np.median(x))
        model = pool_delays([x - med], seed=seed)
        assert model is not None and model.tail is None and model.resampled > 0
        for n in errors:
            got = expected_max_sum(ONE, [n], model, 1.0, ONE, n) + med
            errors[n].append(got / truth[n] - 1)
            lo, hi = sorted(expected_max_sum(ONE, [n], m, 1.0, ONE, n) + med for m in model.ends(n))
            assert lo < hi
    for n, err in errors.items():
        assert abs(float(np.median(err))) < 0.3, (n, err)
    assert "no generalized Pareto tail fits" in delay_assumption(model)


def test_too_few_draws_keep_the_draws_alone_without_resampling() -> None:
    model = pool_delays([np.linspace(0.0, 1.0, 20)])
    assert model is not None and model.tail is None and model.resampled == 0
    assert model.ends(8) == (model, model)
    assert "too few to fit a tail" in delay_assumption(model)


def test_many_draws_are_fitted_on_a_bounded_subsample(monkeypatch: pytest.MonkeyPatch) -> None:
    """A long study pools ~100k delays: the fit's temporary grows with rows x draws^1.5
    (4.9 GB at 20k draws before the bound), so every fit sees at most FIT_DRAWS of them."""
    from tracescale.replay.uncertainty import tail_fit

    widths: list[tuple[int, int]] = []
    real = tail_fit._zhang_stephens

    def spy(exc: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        widths.append(exc.shape)
        return real(exc, k)

    monkeypatch.setattr(tail_fit, "_zhang_stephens", spy)
    draws = 2.0 * np.random.default_rng(5).pareto(2.2, size=50_000)
    model = pool_delays([draws - np.median(draws)])
    assert model is not None and widths
    assert max(w[1] for w in widths) <= tail_fit.FIT_DRAWS
    # rows x grid x exceedances per chunk: bounded (a single row may exceed it on its own)
    assert max(r * m * (30 + int(np.sqrt(m))) for r, m in widths if r > 1) <= 2_000_000
    if model.tail is not None:  # the share below the threshold is counted over all draws
        assert model.tail.p_u == pytest.approx(np.mean(model.draws <= model.tail.u), abs=1e-9)


def _runs(seed: int, draw: str) -> list[np.ndarray]:
    """Per-run centred delays of 1, 2, 4, 8 ranks x 20 steps (seeded)."""
    rng = np.random.default_rng(seed)
    out = []
    for k in (1, 2, 4, 8):
        if draw == "mixed":  # lognormal body of 2 ms plus 3% stalls of 20 ms
            x = 2e-3 * rng.lognormal(0.0, 0.5, 20 * k) + 20e-3 * (rng.random(20 * k) < 0.03)
        else:
            x = 2e-3 * rng.pareto(2.2, 20 * k)
        out.append(x - np.median(x))
    return out


def test_held_out_slowest_of_k_and_the_mixture_grid_are_exact() -> None:
    # the six pairs of {1, 2, 3, 4} have maxima 2, 3, 4, 3, 4, 4: mean 10/3
    assert held_out_max(np.array([1.0, 2.0, 3.0, 4.0]), 2) == pytest.approx(10 / 3)
    # body {0, 1, 2}, one stall of 10 - 1 = 9 at rate 1/4
    q, x = mixture_grid(np.array([0.0, 1.0, 2.0, 10.0]), 1)
    assert x.tolist() == [0.0, 1.0, 2.0, 9.0, 10.0, 11.0]
    assert q == pytest.approx(np.cumsum([0.25, 0.25, 0.25, 1 / 12, 1 / 12, 1 / 12]))


def test_stalls_of_a_fixed_size_cluster_apart_and_a_power_tail_does_not() -> None:
    body = np.linspace(0.0, 1e-3, 95)
    stalls = 20e-3 + np.linspace(0.0, 4e-4, 5)
    assert stall_count(np.sort(np.concatenate([body, stalls]))) == 5
    assert stall_count(np.sort(2.0 ** np.arange(10.0))) == 0  # each gap wider than the last
    lomax = 2e-3 * ((1 - (np.arange(300) + 0.5) / 300) ** (-1 / 2.2) - 1)
    assert stall_count(lomax) == 0


def test_a_stall_mixture_chooses_the_bounded_model_by_predicting_the_largest_run() -> None:
    """Seed 6 of the mixture: a GPD fits the pooled draws (Anderson-Darling), but each run held
    out is predicted better by a body plus 7 stalls of one size fitted on the others; the GPD,
    within twice the mixture's error, stays an end of the interval."""
    model = pool_delays(_runs(6, "mixed"))
    assert model is not None and model.tail is None
    assert model.chosen == "mixture" and model.stalls == 7 and len(model.alternatives) == 1
    scores = dict(model.scores)
    assert scores == pytest.approx({"gpd": 1.5773, "mixture": 1.3313}, abs=1e-4)
    lo, hi = (model_max(m, 64) for m in model.ends(64))
    assert lo < model_max(model, 64) < hi
    assert hi == pytest.approx(model_max(DelayModel(model.draws, model.alternatives[0]), 64))
    assert "stalls of about" in delay_assumption(model)


def test_lomax_draws_choose_the_power_tail() -> None:
    for seed in (0, 1, 2):
        model = pool_delays(_runs(seed, "lomax"))
        assert model is not None and model.chosen == "gpd" and model.tail is not None
        assert model.stalls == 0 and 0.2 < model.tail.shape < 0.8


@pytest.fixture(scope="module")
def stall_study(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Any]:
    """Lognormal body plus 3% stalls of 20 ms, 1-8 ranks x 20 steps, seed 2: with the GPD
    chosen by shape it projected 16 ranks 49% slow."""
    from dataclasses import replace

    from tests.independent.gen import _p, build_study
    from tests.independent.sched import Style
    from tracescale.api import analyze

    p = replace(
        _p("mix", (1, 2, 4, 8), tail=20e-3, tail_shape=0.03, steps=20, layers=4, truth_steps=300),
        targets=(16,),
        style=Style(delay="mixed"),
    )
    where = tmp_path_factory.mktemp("stalls")
    truth = build_study(p, str(where), seed=2)
    study = analyze(where, project=[16], jobs=1, no_cache=True)
    return truth, study.studies[0]


def test_a_stall_mixture_projects_within_20_percent_at_2x(
    stall_study: tuple[dict[str, Any], Any],
) -> None:
    truth, entry = stall_study
    (proj,) = [q for q in entry["scaling"]["projections"] if q["world_size"] == 16]
    true = truth["speedup"]["16"]
    lo, hi = proj["speedup_ci90"]
    assert abs(proj["speedup"] / true - 1) <= 0.2, (proj["speedup"], true)
    assert lo <= true <= hi


def test_folds_are_compared_where_every_candidate_was_fitted() -> None:
    # the middle fold fitted no mixture: gpd (1*20 + 4*60)/80, mixture (3*20 + 1*60)/80
    got = combined(
        [({"gpd": 1.0, "mixture": 3.0}, 20), ({"gpd": 2.0}, 40), ({"gpd": 4.0, "mixture": 1.0}, 60)]
    )
    assert got == pytest.approx({"gpd": 3.25, "mixture": 1.5})
    # no fold fitted both: the largest run's fold alone
    assert combined([({"mixture": 1.0, "empirical": 2.0}, 20), ({"gpd": 5.0}, 40)]) == {"gpd": 5.0}
    assert ranked({"gpd": 3.25, "mixture": 1.5}) == ("mixture", ())
    assert ranked({"gpd": 2.9, "mixture": 1.5}) == ("mixture", ("gpd",))
