"""tracescale simulate: determinism, trace shape, and a truth that matches its own traces."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tracescale.categories import CATEGORIES
from tracescale.cli.simulate import simulate as simulate_cmd
from tracescale.errors import UsageError
from tracescale.simulate import (
    SimParams,
    closed_form,
    make_params,
    parse_sets,
    simulate,
    true_breakdown,
    true_speedup,
    true_step_time,
)

SMALL = {"layers": 3, "zero_grad_kernels": 4}


def _params(**extra: float) -> SimParams:
    return make_params({**SMALL, **extra})


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def _events(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    return doc, [e for e in doc["traceEvents"] if e["ph"] == "X"]


def _ranks(root: Path, n: int) -> dict[int, list[dict[str, Any]]]:
    out = {}
    for path in sorted((root / f"ws{n}").glob("*.pt.trace.json.gz")):
        doc, events = _events(path)
        out[doc["distributedInfo"]["rank"]] = events
    return out


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    root = tmp_path_factory.mktemp("sim")
    truth = simulate([1, 2, 4], root, steps=3, seed=7, params=_params())
    return root, truth


def test_deterministic_bytes_for_a_seed(tmp_path: Path) -> None:
    a = simulate([1, 2], tmp_path / "a", steps=2, seed=3, params=_params())
    b = simulate([1, 2], tmp_path / "b", steps=2, seed=3, params=_params(), jobs=2)
    assert a == b
    files_a, files_b = _files(tmp_path / "a"), _files(tmp_path / "b")
    assert files_a == files_b
    assert "truth.json" in files_a and len(files_a) == 4


def test_different_seeds_differ(tmp_path: Path) -> None:
    simulate([2], tmp_path / "a", steps=2, seed=1, params=_params())
    simulate([2], tmp_path / "b", steps=2, seed=2, params=_params())
    files_a, files_b = _files(tmp_path / "a"), _files(tmp_path / "b")
    assert files_a.keys() == files_b.keys()  # names do not depend on the seed
    assert all(files_a[k] != files_b[k] for k in files_a)


def test_truth_layout_and_sums(study: tuple[Path, dict[str, Any]]) -> None:
    _, truth = study
    assert truth["categories"] == list(CATEGORIES)
    assert truth["world_sizes"] == [1, 2, 4]
    for run in truth["runs"].values():
        assert sum(run["breakdown"].values()) == pytest.approx(run["step_time"], rel=1e-9)
        for rank in run["per_rank"].values():
            for step in rank["steps"]:
                total = sum(step[c] for c in CATEGORIES)
                assert total == pytest.approx(step["duration"], rel=1e-12)
                assert min(step[c] for c in CATEGORIES) >= 0
    assert truth["runs"]["1"]["breakdown"]["communication"] == 0
    assert truth["speedup"]["1"] == 1.0
    assert {"2", "4", "8", "16", "32", "64", "128", "1024"} <= truth["speedup"].keys()
    assert 0 < truth["serial_fraction"] < 1


def test_truth_matches_profiler_steps_in_traces(study: tuple[Path, dict[str, Any]]) -> None:
    root, truth = study
    for n in (1, 2, 4):
        durations = [
            e["dur"] * 1e-6
            for events in _ranks(root, n).values()
            for e in events
            if e["name"].startswith("ProfilerStep#")
        ]
        assert len(durations) == 3 * n
        mean = sum(durations) / len(durations)
        assert mean == pytest.approx(truth["runs"][str(n)]["step_time"], rel=1e-6)  # 1% asked


def test_traces_load_through_ingest(study: tuple[Path, dict[str, Any]]) -> None:
    ingest = pytest.importorskip("tracescale.ingest")
    root, _ = study
    for path in sorted((root / "ws4").glob("*.gz")):
        trace = ingest.load_trace(str(path))
        assert trace.meta.world_size == 4


def test_trace_shape(study: tuple[Path, dict[str, Any]]) -> None:
    root, _ = study
    path = sorted((root / "ws2").glob("*.gz"))[1]
    assert path.name.startswith("simhost_") and path.name.endswith(".pt.trace.json.gz")
    doc, events = _events(path)
    info = doc["distributedInfo"]
    assert (info["rank"], info["world_size"], info["backend"]) == (1, 2, "nccl")
    assert info["pg_config"][0]["ranks"] == [0, 1]
    assert len(doc["deviceProperties"]) == 1 and "baseTimeNanoseconds" in doc
    names = {e["name"] for e in events}
    assert {"ProfilerStep#10", "ProfilerStep#12", "cudaStreamSynchronize", "aten::item"} <= names
    assert "reduce_metrics" not in names  # rank 0 only
    assert any(e["ph"] == "M" and e["name"] == "thread_name" for e in doc["traceEvents"])
    starts = [e["ts"] for e in events]
    assert starts != sorted(starts)  # shuffled like real files
    assert all(len(repr(e["ts"]).split(".")[-1]) <= 3 for e in events)


def test_every_gpu_event_has_its_launch(study: tuple[Path, dict[str, Any]]) -> None:
    root, _ = study
    for events in _ranks(root, 4).values():
        runtime = {
            e["args"]["correlation"]: e["name"] for e in events if e["cat"] == "cuda_runtime"
        }
        kernels = [e for e in events if e["cat"] == "kernel"]
        assert kernels
        for e in kernels:
            assert runtime[e["args"]["correlation"]] == "cudaLaunchKernel"
        for e in events:
            if e["cat"] == "gpu_memcpy":
                assert runtime[e["args"]["correlation"]] == "cudaMemcpyAsync"


def test_nccl_only_above_one_rank(study: tuple[Path, dict[str, Any]]) -> None:
    root, _ = study
    one = _ranks(root, 1)[0]
    assert not any(e["name"].startswith("nccl") for e in one if e["cat"] == "kernel")
    nccl = [e for e in _ranks(root, 2)[1] if e["name"].startswith("ncclDevKernel_AllReduce")]
    assert len(nccl) == 3 * SimParams().buckets
    args = nccl[0]["args"]
    assert args["Collective name"] == "allreduce" and args["Group size"] == 2
    assert args["In msg nelems"] == SimParams().model_bytes // 4 // SimParams().buckets


def _compute_per_step(events: list[dict[str, Any]]) -> float:
    busy = sum(e["dur"] for e in events if e["cat"] == "kernel" and e["args"]["stream"] == 7)
    steps = sum(1 for e in events if e["name"].startswith("ProfilerStep#"))
    return float(busy * 1e-6 / steps)


def test_weak_vs_strong_compute(tmp_path: Path) -> None:
    p = _params(jitter=0.0)
    simulate([1, 4], tmp_path / "strong", steps=2, params=p)
    simulate([1, 4], tmp_path / "weak", steps=2, params=p, mode="weak")
    serial = p.opt_time + p.zero_grad_kernels * p.fill_kernel_time
    parallel = p.fwd_time + p.bwd_time
    strong = [_compute_per_step(_ranks(tmp_path / "strong", n)[0]) for n in (1, 4)]
    weak = [_compute_per_step(_ranks(tmp_path / "weak", n)[0]) for n in (1, 4)]
    assert strong == pytest.approx([serial + parallel, serial + parallel / 4], rel=1e-6)
    assert weak == pytest.approx([serial + parallel] * 2, rel=1e-6)
    assert true_speedup(p, "weak", 4) == pytest.approx(
        4 * true_step_time(p, "weak", 1) / true_step_time(p, "weak", 4)
    )


def _allreduce_time(events: list[dict[str, Any]]) -> float:
    return float(sum(e["dur"] for e in events if e["name"].startswith("ncclDevKernel_AllReduce")))


def test_straggler_makes_others_wait_in_allreduce(tmp_path: Path) -> None:
    base = _params(jitter=0.0)
    slow = _params(jitter=0.0, straggler_rank=3, straggler_factor=1.5)
    t0 = simulate([4], tmp_path / "a", steps=2, params=base)
    t1 = simulate([4], tmp_path / "b", steps=2, params=slow)
    quick, lagged = _ranks(tmp_path / "a", 4), _ranks(tmp_path / "b", 4)
    assert _allreduce_time(lagged[0]) > _allreduce_time(quick[0]) + 1e3  # µs
    assert _allreduce_time(lagged[3]) == pytest.approx(_allreduce_time(quick[3]), rel=0.01)
    run0, run1 = t0["runs"]["4"], t1["runs"]["4"]
    assert run1["communication_wait"] > run0["communication_wait"]
    # the wait counts as compute (cross-rank cause): rank 0's compute grows, comm does not
    r0, r1 = run0["per_rank"]["0"]["breakdown"], run1["per_rank"]["0"]["breakdown"]
    assert r1["compute"] > r0["compute"] + 0.01
    assert r1["communication"] == pytest.approx(r0["communication"], abs=2e-3)


def test_barrier_wait_is_reduction_for_every_rank(study: tuple[Path, dict[str, Any]]) -> None:
    _, truth = study
    for rank in truth["runs"]["4"]["per_rank"].values():
        assert rank["breakdown"]["reduction"] == pytest.approx(SimParams().reduce_time, rel=0.1)


@pytest.mark.parametrize(
    ("mode", "extra"),
    [("strong", {}), ("weak", {}), ("strong", {"straggler_rank": 1, "straggler_factor": 1.3})],
)
def test_closed_form_matches_noise_free_schedule(mode: str, extra: dict[str, Any]) -> None:
    p = make_params(extra)
    for n in (1, 2, 4, 8, 32):
        assert closed_form(p, mode, n)["total"] == pytest.approx(
            true_step_time(p, mode, n), rel=1e-6
        )
    assert sum(true_breakdown(p, mode, 8).values()) == pytest.approx(true_step_time(p, mode, 8))
    assert true_speedup(p, mode, 1) == pytest.approx(1.0)


def test_communication_heavy_study_stops_scaling() -> None:
    p = make_params({"bandwidth": 5e9, "model_bytes": 400_000_000})
    assert true_speedup(p, "strong", 32) < true_speedup(p, "strong", 8)


def test_set_parsing_and_unknown_name() -> None:
    assert parse_sets(["layers=20", "alpha=2e-5"]) == {"layers": 20, "alpha": 2e-5}
    with pytest.raises(UsageError, match=r"unknown simulator parameter 'nope'.*known: dl_serial"):
        parse_sets(["nope=1"])
    with pytest.raises(UsageError, match="NAME=VALUE"):
        parse_sets(["layers"])
    with pytest.raises(UsageError, match="not a number"):
        parse_sets(["layers=2.5"])
    with pytest.raises(UsageError, match="comm_start"):
        make_params({"comm_start": 2.0})


def test_cli(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "study"
    args = ["--world-sizes", "1,2", "--out", str(out), "--steps", "2", "--seed", "5"]
    result = runner.invoke(simulate_cmd, [*args, "--set", "layers=2", "--mode", "weak"])
    assert result.exit_code == 0, result.output
    assert len(list((out / "ws2").glob("*.pt.trace.json.gz"))) == 2
    truth = json.loads((out / "truth.json").read_text())
    assert truth["mode"] == "weak" and truth["params"]["layers"] == 2 and truth["seed"] == 5
    help_text = runner.invoke(simulate_cmd, ["--help"]).output
    assert "straggler_factor" in help_text and "2(N-1)*alpha" in help_text
    bad = runner.invoke(simulate_cmd, [*args, "--set", "nope=1"])
    assert isinstance(bad.exception, UsageError)


def test_default_traces_are_small(tmp_path: Path) -> None:
    simulate([2], tmp_path, steps=5)
    sizes = [p.stat().st_size for p in (tmp_path / "ws2").glob("*.gz")]
    assert max(sizes) < 300_000
