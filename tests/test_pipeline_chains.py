"""A pipeline's chains: which ranks form a replica, how much of each stage's delay its fill
absorbs (the slack, fitted to the arrivals), and how late the slowest of N ranks arrives."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.measured_runs import record_arrival_offsets, write_measured_runs
from tracescale.api import analyze
from tracescale.replay.arrivals.chains import (
    find_chains,
    fit_slack,
    modelled_offsets,
    slack_counts,
)
from tracescale.replay.arrivals.variability import OffsetPool, lateness
from tracescale.replay.uncertainty.delays import DelayModel, expected_max_sum

#: 3 stages x 4 replicas, rank = stage * 4 + replica (the simulator's layout)
PAIRS = [f"pp_{s}_{s + 1}_dp{d}:{s * 4 + d},{(s + 1) * 4 + d}" for s in range(2) for d in range(4)]


def test_chains_are_read_from_the_send_recv_groups() -> None:
    chains = find_chains(range(12), PAIRS)
    assert chains is not None
    assert chains.size == 3
    assert [chains.chain[r] for r in range(12)] == [0, 1, 2, 3] * 3
    assert [chains.position[r] for r in (1, 5, 9)] == [0, 1, 2]


def test_no_chains_without_members_or_with_unequal_lengths() -> None:
    assert find_chains(range(4), ["pp_0_1"]) is None  # a group key naming no members
    assert find_chains(range(5), ["a:0,1", "b:1,2", "c:3,4"]) is None  # 3 and 2 ranks
    assert find_chains(range(4), ["a:0,9"]) is None  # a member no rank of the run


def _study(slack: np.ndarray, steps: int = 40, seed: int = 0) -> tuple[object, ...]:
    """Arrivals at each stage's data-parallel AllReduce made exactly by the chain model."""
    chains = find_chains(range(12), PAIRS)
    assert chains is not None
    rng = np.random.default_rng(seed)
    delay = {(r, s): float(rng.exponential(0.004)) for r in range(12) for s in range(steps)}
    rank, step, inst, late = [], [], [], []
    for s in range(steps):
        for stage in range(3):
            for d in range(4):
                r = stage * 4 + d
                chain_late = max(delay[(stage2 * 4 + d, s)] - slack[stage2] for stage2 in range(3))
                rank.append(r)
                step.append(s)
                inst.append(s * 3 + stage)
                late.append(chain_late)
    rank_a, step_a, inst_a = (np.array(x, dtype=np.int64) for x in (rank, step, inst))
    late_a = np.array(late)
    mean = np.bincount(inst_a, weights=late_a) / np.bincount(inst_a)
    return chains, delay, rank_a, step_a, inst_a, late_a - mean[inst_a]


def test_the_slack_is_fitted_from_the_arrivals() -> None:
    true = np.array([0.0, 0.003, 0.006])
    chains, delay, rank, step, inst, offset = _study(true)
    slack = fit_slack(chains, delay, rank, step, inst, offset)  # type: ignore[arg-type]
    step_width = 1e-3  # the grid: 96 points up to the delays' 99th percentile (~18 ms)
    assert slack[0] == 0.0
    np.testing.assert_allclose(slack, true, atol=step_width / 2)
    modelled = modelled_offsets(chains, slack, delay, rank, step, inst)  # type: ignore[arg-type]
    assert float(np.sqrt(np.mean((modelled - offset) ** 2))) < 2e-4
    # each instance's modelled offsets sum to zero (they are offsets from its mean)
    np.testing.assert_allclose(np.bincount(inst, weights=modelled), 0.0, atol=1e-12)


def test_slack_counts_lay_ranks_out_in_chains() -> None:
    vals, counts = slack_counts(np.array([0.0, 0.002, 0.004]), 12)
    assert vals.tolist() == [0.0, 0.002, 0.004]
    assert counts == [4, 4, 4]
    assert sum(slack_counts(np.zeros(4), 10)[1]) == 10


def test_chain_lateness_is_the_slowest_of_n_past_one_chain() -> None:
    rng = np.random.default_rng(1)
    draws = np.sort(rng.exponential(0.004, 400) - 0.004 * np.log(2))
    model = DelayModel(draws, None)
    rest = np.zeros(8)
    slack = np.array([0.0, 0.002, 0.004])
    pool = OffsetPool(np.arange(12), np.zeros(12), np.zeros(12), rest, 1.0, slack)
    # one chain waits for no one past itself
    assert lateness(pool, model, 3, 1.0, 1.0) == 0.0
    got = [lateness(pool, model, n, 1.0, 1.0) for n in (6, 12, 48)]
    assert got == sorted(got) and got[0] > 0
    expect = expected_max_sum(-slack, [4, 4, 4], model, 1.0, rest, 12) - expected_max_sum(
        -slack, [1, 1, 1], model, 1.0, rest, 3
    )
    assert got[1] == pytest.approx(expect)
    # a slack absorbs: the same ranks without it wait longer for their slowest
    flat = OffsetPool(np.arange(12), np.zeros(12), np.zeros(12), rest, 1.0, np.zeros(3))
    assert lateness(flat, model, 48, 1.0, 1.0) > got[2]


def test_a_pipeline_with_loader_delays_projects_its_own_measured_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """4 stages with lognormal loader delays, measured at 4 and 8 GPUs: projected back to 8,
    the step is its measured one. Each rank's whole delay reaching the step (the slowest of
    8 ranks' delays) and the other stages' delays drawn again as device jitter read it 6-9%
    long (seeds 1, 2); the chains read it within 2%."""
    write_measured_runs(tmp_path, "pp,heavy_tail", (4, 8), 12, 1, {"layers": 2, "microbatches": 16})
    seen = record_arrival_offsets(monkeypatch)
    entry = analyze(tmp_path, jobs=1, no_cache=True, project=[8]).studies[0]
    measured = next(r for r in entry["runs"] if r["world_size"] == 8)["step_time_s"]["mean"]
    projected = entry["scaling"]["projections"][0]["step_time_s"]
    assert projected == pytest.approx(measured, rel=0.04)
    # the data-parallel AllReduce's pool is read by the chains: one slack per stage, the
    # first stage's 0 (its delay reaches whole), a later stage's absorbing some
    chained = [p for _, pools in seen for p in pools.values() if len(p.slack)]
    assert chained and all(len(p.slack) == 4 and p.slack[0] == 0.0 for p in chained)
    assert max(float(p.slack.max()) for p in chained) > 0.0
