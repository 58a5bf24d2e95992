"""Levers through the replay checked against the simulator run with that change made: the data
loader, the post-sync host stall, rank 0's metric reduction removed, compute's replicated part
(the optimizer, the gradient zeroing) divided over the ranks and a straggler brought to the
median rank's speed, at measured and projected world sizes; the first findings quote the
replayed gains."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tracescale.api import analyze
from tracescale.simulate import SimParams, simulate, true_step_time

SIZES = [1, 2, 4]
TARGETS = [1, 2, 4, 8, 16]


def _levers(doc: dict[str, Any]) -> dict[int, dict[str, Any]]:
    points = doc["studies"][0]["scaling"]["replay"]["levers"]["points"]
    return {int(p["world_size"]): p for p in points}


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> tuple[SimParams, dict[str, Any]]:
    p = replace(SimParams(), layers=4, jitter=0.0)
    out = tmp_path_factory.mktemp("levers")
    simulate(SIZES, out, steps=5, params=p, compresslevel=1)
    return p, analyze(out, project=TARGETS, jobs=1, no_cache=True).to_dict()


def test_removing_a_category_matches_the_simulator_without_it(
    plain: tuple[SimParams, dict[str, Any]],
) -> None:
    p, doc = plain
    truth = {
        "dataloader": replace(p, dl_serial=0.0, dl_parallel=0.0),
        "sync": replace(p, sync_stall=0.0),
        "reduction": replace(p, reduce_time=0.0),
    }
    levers = _levers(doc)
    assert set(levers) == set(TARGETS)
    for n, point in levers.items():
        assert point["step_time_s"] == pytest.approx(true_step_time(p, "strong", n), rel=0.05)
        for cat, free in truth.items():
            got = point["levers"][cat]
            want = true_step_time(free, "strong", n)
            assert got["step_time_s"] == pytest.approx(want, rel=0.05), (cat, n)
            gain = true_step_time(p, "strong", n) / want
            assert got["speedup"] == pytest.approx(gain, rel=0.03), (cat, n)


def test_findings_quote_the_replayed_gain(plain: tuple[SimParams, dict[str, Any]]) -> None:
    _, doc = plain
    study = doc["studies"][0]
    target = max(TARGETS)
    gains = _levers(doc)[target]["levers"]
    found = {f["category"]: f for f in study["findings"] if f["kind"] == "lever"}
    for cat in ("dataloader", "reduction"):
        assert found[cat]["value"] == pytest.approx(gains[cat]["speedup"], rel=1e-9)
        assert "(replayed)" in found[cat]["text"]
    values = [f["value"] for f in study["findings"] if f["kind"] in ("lever", "op")]
    assert values == sorted(values, reverse=True)  # biggest replayed gain first


def test_a_straggler_at_the_median_speed_matches_the_simulator_without_it(
    tmp_path: Path,
) -> None:
    p = replace(SimParams(), layers=4, jitter=0.0, straggler_rank=1, straggler_factor=1.4)
    simulate([2, 4], tmp_path, steps=5, params=p, compresslevel=1)
    doc = analyze(tmp_path, project=[4, 8], jobs=1, no_cache=True).to_dict()
    even = replace(p, straggler_rank=-1)
    levers = _levers(doc)
    for n in (4, 8):
        got = levers[n]["levers"]["straggler"]
        assert got["step_time_s"] == pytest.approx(true_step_time(even, "strong", n), rel=0.05)
    study = doc["studies"][0]
    straggler = [f for f in study["findings"] if f["kind"] == "straggler"]
    assert (
        straggler
        and "replayed with its kernels at the median rank's speed" in (straggler[0]["text"])
    )
    assert straggler[0]["value"] == pytest.approx(levers[4]["levers"]["straggler"]["speedup"])


@pytest.mark.parametrize("opt_time", [0.006, 0.02])
def test_compute_made_parallel_matches_the_simulator_with_a_sharded_optimizer(
    tmp_path: Path, opt_time: float
) -> None:
    """DDP replicates the optimizer and the gradients' zeroing on every rank: compute's part that
    does not shrink. The lever replays it as ``(a + b)/N``; the truth is the simulator with those
    kernels' time divided by N (as a sharded optimizer would make it)."""
    p = replace(SimParams(), layers=4, jitter=0.0, opt_time=opt_time)
    simulate(SIZES, tmp_path, steps=5, params=p, compresslevel=1)
    doc = analyze(tmp_path, project=TARGETS, jobs=1, no_cache=True).to_dict()
    levers = _levers(doc)
    for n in TARGETS[1:]:
        free = replace(p, opt_time=p.opt_time / n, fill_kernel_time=p.fill_kernel_time / n)
        gain = true_step_time(p, "strong", n) / true_step_time(free, "strong", n)
        got = levers[n]["levers"]["compute"]
        assert got["speedup"] == pytest.approx(gain, rel=0.01), n
    study = doc["studies"][0]
    found = [f for f in study["findings"] if f["category"] == "compute"]
    assert len(found) == 1 and "replayed" in found[0]["text"]
    if found[0]["kind"] == "lever":
        assert found[0]["value"] == pytest.approx(levers[16]["levers"]["compute"]["speedup"])
    else:  # the optimizer's own finding explains compute's lever, which is then not restated
        assert found[0]["kind"] == "op" and "multi_tensor_apply_kernel" in found[0]["text"]


def test_an_op_that_does_not_shrink_is_replayed_without_it(tmp_path: Path) -> None:
    """The optimizer's kernels (replicated under DDP) are the flagged top op: its finding's gain
    is the replay without those kernels, which the simulator without an optimizer confirms."""
    p = replace(SimParams(), layers=4, jitter=0.0, opt_time=0.02)
    simulate(SIZES, tmp_path, steps=5, params=p, compresslevel=1)
    doc = analyze(tmp_path, project=TARGETS, jobs=1, no_cache=True).to_dict()
    study = doc["studies"][0]
    (op,) = [f for f in study["findings"] if f["kind"] == "op"]
    assert "multi_tensor_apply_kernel" in op["text"] and "(projected; replayed)" in op["text"]
    ops = _levers(doc)[16]["ops"]
    (group,) = [k for k in ops if "multi_tensor_apply_kernel" in k]
    assert op["value"] == pytest.approx(ops[group]["speedup"], rel=1e-12)
    free = replace(p, opt_time=0.0)
    gain = true_step_time(p, "strong", 16) / true_step_time(free, "strong", 16)
    assert op["value"] == pytest.approx(gain, rel=0.02)
