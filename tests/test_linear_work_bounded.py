"""Per-step and per-stream work that stays linear: bootstraps draw over a bounded number of
blocks of steps (memory bounded however many steps a trace holds), and the vectorized searches
that replaced per-step and per-stream loops give what the loops gave."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np

from tests.linear_work_traces import write_study
from tracescale.api import analyze
from tracescale.classify.gpu_metrics import grouped_union_ns, union_ns
from tracescale.comparison.core import bootstrap_change_pct, compare_runs
from tracescale.replay.engine.cycles import bootstrap_mean, cycle_period
from tracescale.replay.graph.device import _latest_launched, _other_stream_end
from tracescale.scaling.blocks import MAX_RESAMPLED, blocks_note, step_blocks
from tracescale.scaling.stats import VALUE_COLS, RunData, aggregate_many, blocked


def test_a_million_steps_bootstrap_in_bounded_memory() -> None:
    rng = np.random.default_rng(3)
    steps = 1e-9 + rng.exponential(1e-9, 1_000_000)
    tracemalloc.start()
    lo, hi = bootstrap_mean(steps, 0)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    # 200 replicates over every step held 1.6 GB of indices; the steps themselves are 8 MB
    assert peak < 80e6, f"peak {peak / 1e6:.0f} MB"
    mean, sem = float(steps.mean()), float(steps.std() / np.sqrt(len(steps)))
    assert lo < mean < hi
    # the block bootstrap's 90% interval is the mean's: +-1.645 standard errors, within noise
    assert 2.6 * sem < hi - lo < 4.0 * sem


def test_compare_bootstraps_a_million_steps_in_bounded_memory() -> None:
    """compare's 2,000 replicates over every step of two million-step runs asked for 16 GB
    (exit 70 under the 3 GB cap); over blocks they stay small, and the change is still read."""
    rng = np.random.default_rng(5)
    before = 1e-3 + rng.exponential(1e-4, 1_000_000)
    after = 1.02 * before[rng.permutation(before.size)]
    tracemalloc.start()
    ci = bootstrap_change_pct(list(before), list(after))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert ci is not None and ci[0] < 2.0 < ci[1] and ci[1] - ci[0] < 0.2
    assert peak < 300e6, f"peak {peak / 1e6:.0f} MB"
    doc = {"world_size": 1, "step_time_s": {"mean": float(before.mean())}}
    run_b = {**doc, "step_times_s": list(before)}
    run_a = {**doc, "step_time_s": {"mean": float(after.mean())}, "step_times_s": list(after)}
    row = compare_runs(run_b, run_a)
    assert row["verdict"] == "regressed"
    assert row["step_time_s"]["method"] == f"bootstrap over {MAX_RESAMPLED:,} blocks of steps"
    small = compare_runs(
        {**run_b, "step_times_s": [1e-3, 1.1e-3]}, run_b | {"step_times_s": [1e-3, 1e-3]}
    )
    assert small["step_time_s"]["method"] == "bootstrap over steps"


def test_blocks_keep_the_run_means() -> None:
    rng = np.random.default_rng(0)
    r, s, g = 3, 10_007, 2
    mask = (rng.random((r, s)) < 0.9).astype(np.float64)
    vals = rng.random((r, s, len(VALUE_COLS))) * mask[:, :, None]
    csum = rng.random((r, s, g)) * mask[:, :, None]
    ccnt = rng.integers(0, 3, (r, s, g)).astype(np.float64) * mask[:, :, None]
    keys = (("allreduce", 1, 4), ("allgather", 2, 4))
    d = RunData(4, (0, 1, 2), vals, mask, keys, csum, ccnt)
    b = blocked(d)
    assert b.mask.shape == (r, MAX_RESAMPLED)
    assert float(b.mask.sum()) == float(mask.sum())
    full = aggregate_many(d, np.ones((1, r)), np.ones((1, s)))[0]
    part = aggregate_many(b, np.ones((1, r)), np.ones((1, MAX_RESAMPLED)))[0]
    for c in full.cats:
        assert np.isclose(full.cats[c], part.cats[c], rtol=1e-12), c
    assert np.allclose(full.coll_transfer, part.coll_transfer, rtol=1e-12)
    assert np.allclose(full.coll_per_step, part.coll_per_step, rtol=1e-12)
    assert blocked(RunData(4, (0,), vals[:1, :100], mask[:1, :100], keys, csum[:1, :100],
                           ccnt[:1, :100])).mask.shape == (1, 100)  # fmt: skip


def test_step_blocks_and_their_note() -> None:
    assert np.array_equal(step_blocks(5), np.arange(5))
    sizes = np.bincount(step_blocks(10_001))
    assert len(sizes) == MAX_RESAMPLED and sizes.max() - sizes.min() <= 1
    assert blocks_note(MAX_RESAMPLED) is None
    note = blocks_note(1_000_000)
    assert note is not None and "1,000,000 steps" in note and f"{MAX_RESAMPLED:,} blocks" in note


def _period_by_trial(signature: np.ndarray) -> int:
    n = len(signature)
    if n < 2 or bool(np.all(signature == signature[0])):
        return 1
    for p in range(2, n // 2 + 1):
        if bool(np.all(signature[p:] == signature[:-p])):
            return p
    return 1


def test_cycle_period_matches_trying_every_period() -> None:
    rng = np.random.default_rng(1)
    for _ in range(2000):
        n = int(rng.integers(0, 30))
        if n > 2 and rng.random() < 0.6:
            sig = np.resize(rng.integers(0, 3, int(rng.integers(1, n))), n)
            if rng.random() < 0.3:
                sig[rng.integers(0, n)] = 9
        else:
            sig = rng.integers(0, 3, n)
        sig = sig.astype(np.int64)
        assert cycle_period(sig) == _period_by_trial(sig), sig.tolist()
    noisy = (np.random.default_rng(2).random(300_000) * 4).astype(np.int64)
    assert cycle_period(noisy) == 1  # no cycle: one pass, not 150,000 trials


def test_latest_launched_matches_a_scan() -> None:
    rng = np.random.default_rng(4)
    for _ in range(300):
        n, q = int(rng.integers(1, 60)), int(rng.integers(1, 30))
        launch, end = rng.integers(0, 50, n), rng.integers(0, 50, n)
        at, by = rng.integers(-5, 55, q), rng.integers(-5, 55, q)
        got = _latest_launched(launch, end, at, by)
        for i in range(q):
            cand = np.flatnonzero((launch <= at[i]) & (end <= by[i]))
            want = -1 if cand.size == 0 else int(cand[np.argmax(end[cand])])
            assert got[i] == want


def test_other_stream_end_matches_a_search_per_stream() -> None:
    rng = np.random.default_rng(5)
    for _ in range(300):
        n = int(rng.integers(1, 60))
        start, dur, res = rng.integers(0, 40, n), rng.integers(0, 10, n), rng.integers(0, 4, n)
        dev = rng.random(n) < 0.8
        got_end, got = _other_stream_end({"start": start, "dur": dur, "res": res}, dev)
        ends = start + dur
        for i in np.flatnonzero(dev):
            other = np.flatnonzero(dev & (res != res[i]) & (ends <= start[i]))
            if other.size == 0:
                assert got[i] == -1
                continue
            best = ends[other].max()
            tied = other[ends[other] == best]
            lowest = tied[res[tied] == res[tied].min()]
            assert got_end[i] == best and got[i] == lowest.max()
        assert (got[~dev] == -1).all()


def test_grouped_union_is_the_union_per_group() -> None:
    rng = np.random.default_rng(6)
    for _ in range(300):
        m, n = int(rng.integers(0, 40)), int(rng.integers(1, 6))
        start = rng.integers(-20, 60, m).astype(np.int64)
        end = start + rng.integers(-2, 15, m)
        group = rng.integers(0, n, m).astype(np.int64)
        got = grouped_union_ns(start, end, group, n)
        want = [union_ns(start[group == k], end[group == k]) for k in range(n)]
        assert got.tolist() == want


def test_many_steps_intervals_say_they_resampled_blocks(tmp_path: Path) -> None:
    """A trace of more ProfilerSteps than the bootstrap draws over: both intervals (the closed
    form's and the replay's) say they resampled blocks of steps."""
    steps = MAX_RESAMPLED + 4
    write_study(tmp_path, steps, steps=steps)  # ws1
    write_study(tmp_path, steps, steps=steps, ranks=2)  # ws2: the replay needs two runs
    doc = analyze(tmp_path, jobs=1, no_cache=True, progress=False).doc
    (study,) = doc["studies"]
    boot = study["scaling"]["bootstrap"]
    assert boot["step_blocks"] == MAX_RESAMPLED
    assert f"{steps:,} steps" in boot["note"]
    notes = [a for a in study["scaling"]["replay"]["assumptions"] if "blocks" in a]
    assert len(notes) == 1 and f"{steps:,} steps" in notes[0]
