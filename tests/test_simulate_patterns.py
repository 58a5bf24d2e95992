"""simulate --pattern: the trace shapes real PyTorch 2.x traces have, truth from the schedule."""

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
from tracescale.simulate import parse_pattern, pattern_params, simulate

TINY = {"layers": 3, "model_bytes": 24_000_000}

Events = list[dict[str, Any]]


def _study(root: Path, pattern: str, sizes: list[int], steps: int = 2, **sets: float) -> Any:
    params = pattern_params(pattern, {**TINY, **sets})
    return simulate(sizes, root, pattern=pattern, steps=steps, seed=3, params=params,
                    truth_at=[16])  # fmt: skip


def _load(root: Path, n: int) -> dict[int, tuple[str, dict[str, Any], Events]]:
    """rank -> (file name, document, complete events)."""
    out = {}
    for path in sorted((root / f"ws{n}").glob("*.pt.trace.json.gz")):
        doc = json.loads(gzip.decompress(path.read_bytes()))
        events = [e for e in doc["traceEvents"] if e["ph"] == "X"]
        out[doc["distributedInfo"]["rank"]] = (path.name, doc, events)
    return out


@pytest.fixture(scope="module")
def fsdp(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    root = tmp_path_factory.mktemp("fsdp")
    return root, _study(root, "fsdp", [1, 2, 4])


def test_fsdp_collective_sizes_and_args(fsdp: tuple[Path, dict[str, Any]]) -> None:
    root, _ = fsdp
    full = TINY["model_bytes"] // 4 // TINY["layers"]
    _, _, events = _load(root, 4)[1]
    gathers = [e for e in events if e["name"].startswith("ncclDevKernel_AllGather_")]
    scatters = [e for e in events if e["name"].startswith("ncclDevKernel_ReduceScatter_")]
    # per step: one AllGather per layer before forward and again before backward
    assert len(gathers) == 2 * 2 * TINY["layers"] and len(scatters) == 2 * TINY["layers"]
    for e in gathers:
        args = e["args"]
        assert (args["In msg nelems"], args["Out msg nelems"]) == (full // 4, full)
        assert args["Group size"] == 4 and args["Process Group Ranks"] == "[0, 1, 2, 3]"
        assert args["Collective name"] == "_allgather_base" and args["dtype"] == "Float"
    for e in scatters:
        assert (e["args"]["In msg nelems"], e["args"]["Out msg nelems"]) == (full, full // 4)
    ops = [e for e in events if e["name"] == "record_param_comms"]
    assert len(ops) == len(gathers) + len(scatters)
    assert {"Collective name", "In msg nelems", "Out msg nelems", "Process Group Name"} <= set(
        ops[0]["args"]
    )
    assert not any(e["name"].startswith("nccl") for e in _load(root, 1)[0][2])


def test_fsdp_compute_waits_for_its_all_gather(fsdp: tuple[Path, dict[str, Any]]) -> None:
    root, _ = fsdp
    _, _, events = _load(root, 2)[0]
    by_corr = {e["args"]["correlation"]: e for e in events if e["cat"] == "cuda_runtime"}
    waits = [e for e in events if e["cat"] == "cuda_sync"]
    assert waits
    compute_waits = 0
    for w in waits:
        args = w["args"]
        assert args["cuda_sync_kind"] == "Stream Wait Event"
        record = by_corr[args["wait_on_cuda_event_record_corr_id"]]
        assert record["name"] == "cudaEventRecord"
        assert by_corr[args["correlation"]]["name"] == "cudaStreamWaitEvent"
        assert record["ts"] < by_corr[args["correlation"]]["ts"]
        if args["stream"] == 7 and args["wait_on_stream"] == 13:
            compute_waits += 1
            # the awaited work: the last NCCL kernel launched before the record call
            producer = max(
                (e for e in events if e["cat"] == "kernel" and e["args"]["stream"] == 13
                 and by_corr[e["args"]["correlation"]]["ts"] < record["ts"]),
                key=lambda e: e["ts"],
            )  # fmt: skip
            after = min(
                (e for e in events if e["cat"] == "kernel" and e["args"]["stream"] == 7
                 and e["ts"] >= w["ts"]),
                key=lambda e: e["ts"],
            )  # fmt: skip
            assert after["ts"] >= producer["ts"] + producer["dur"] - 1e-3
    assert compute_waits == 2 * 2 * TINY["layers"] + 2  # per AllGather, plus the step's last join


def test_every_gpu_event_has_its_launch(fsdp: tuple[Path, dict[str, Any]]) -> None:
    root, _ = fsdp
    for _, _, events in _load(root, 4).values():
        runtime = {e["args"]["correlation"]: e for e in events if e["cat"] == "cuda_runtime"}
        ext = {e["args"]["External id"]: e for e in events if e["cat"] == "cpu_op"}
        for e in events:
            if e["cat"] in ("kernel", "gpu_memcpy"):
                launch = runtime[e["args"]["correlation"]]
                assert launch["name"] in ("cudaLaunchKernel", "cudaMemcpyAsync")
                assert launch["ts"] + launch["dur"] <= e["ts"] + 1e-3
                assert launch["args"]["External id"] in ext  # launched inside a cpu_op


def test_truth_from_the_schedule(fsdp: tuple[Path, dict[str, Any]]) -> None:
    root, truth = fsdp
    assert truth["pattern"] == "fsdp" and truth["truth_at"] == [16]
    assert set(truth["speedup"]) == {"1", "2", "4", "16"}
    assert truth["speedup"]["1"] == 1.0
    for n in ("2", "4"):  # measured runs: the noise-free schedule is within the jitter
        run = truth["runs"][n]
        assert run["step_time"] == pytest.approx(truth["model"]["step_time"][n], rel=0.03)
        assert sum(run["breakdown"].values()) == pytest.approx(run["step_time"], rel=1e-9)
        assert run["breakdown"]["communication"] > 0
    steps = [
        e["dur"] * 1e-6
        for _, _, events in _load(root, 4).values()
        for e in events
        if e["name"].startswith("ProfilerStep#")
    ]
    assert sum(steps) / len(steps) == pytest.approx(truth["runs"]["4"]["step_time"], rel=1e-6)
    assert 0 < truth["serial_fraction"] < 0.2


def test_fsdp_collectives_grow_with_n_in_truth(tmp_path: Path) -> None:
    """Per-layer latency terms (N-1)*alpha dominate at large N: the speedup peaks and falls."""
    truth = simulate([1, 2], tmp_path, pattern="fsdp", steps=1, truth_at=[8, 64, 256],
                     params=pattern_params("fsdp", {"alpha": 2e-5}))  # fmt: skip
    s = truth["speedup"]
    assert s["8"] > s["2"] and s["256"] < s["64"]


def test_deterministic_and_seeded(tmp_path: Path) -> None:
    a = _study(tmp_path / "a", "fsdp", [2], steps=1)
    b = _study(tmp_path / "b", "fsdp", [2], steps=1)
    assert a == b
    files = sorted((tmp_path / "a" / "ws2").iterdir())
    assert [f.read_bytes() for f in files] == [
        (tmp_path / "b" / "ws2" / f.name).read_bytes() for f in files
    ]


def test_pattern_parsing() -> None:
    assert parse_pattern("fsdp").name == "fsdp"
    assert parse_pattern("heavy_tail").name == "ddp+heavy_tail"
    assert parse_pattern("multinode,fsdp").name == "fsdp+multinode"
    for bad in ("ddp,fsdp", "nope", ""):
        with pytest.raises(ValueError, match="--pattern"):
            parse_pattern(bad)
    with pytest.raises(UsageError, match="--pattern"):
        simulate([1], "/nonexistent-never-written", pattern="zero")


def test_cli_pattern_progress_and_truth_at(tmp_path: Path) -> None:
    out = tmp_path / "s"
    args = ["--world-sizes", "1,2", "--out", str(out), "--steps", "1", "--pattern", "fsdp",
            "--truth-at", "4,8", "--set", "layers=2"]  # fmt: skip
    result = CliRunner().invoke(simulate_cmd, args)
    assert result.exit_code == 0, result.output
    assert "tracescale simulate: truth of fsdp at N=8" in result.stderr
    assert "rank traces of fsdp" in result.stdout and "truth of" not in result.stdout
    truth = json.loads((out / "truth.json").read_text())
    assert {"4", "8"} <= truth["speedup"].keys() and truth["params"]["layers"] == 2
    quiet = CliRunner().invoke(simulate_cmd, [*args, "--quiet"])
    assert quiet.exit_code == 0 and quiet.stderr == ""
    bad = CliRunner().invoke(simulate_cmd, [*args[:-4], "--truth-at", "x"])
    assert isinstance(bad.exception, UsageError)


@pytest.mark.parametrize("pattern", ["fsdp"])
def test_pattern_loads_through_analyze(tmp_path: Path, pattern: str) -> None:
    pipeline = pytest.importorskip("tracescale.pipeline")
    truth = _study(tmp_path, pattern, [1, 2, 4])
    entry = pipeline.analyze(str(tmp_path), jobs=1, project=[16]).studies[0]
    assert not [w for w in entry["warnings"] if "error" in str(w).lower()]
    for run in entry["runs"]:
        t = truth["runs"][str(run["world_size"])]
        assert run["step_time_s"]["mean"] == pytest.approx(t["step_time"], rel=1e-6)
        assert sum(run["breakdown_s"].values()) == pytest.approx(
            run["step_time_s"]["mean"], rel=1e-6
        )
        for c in CATEGORIES:
            assert run["breakdown_s"][c] == pytest.approx(
                t["breakdown"][c], abs=0.02 * t["step_time"]
            )
