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
    ops = {e["args"]["External id"]: e for e in events if e["cat"] == "cpu_op"}
    for call in by_corr.values():  # every record / wait is issued inside the op that needs it
        if call["name"] in ("cudaEventRecord", "cudaStreamWaitEvent"):
            op = ops[call["args"]["External id"]]
            assert op["ts"] <= call["ts"] and call["ts"] + call["dur"] <= op["ts"] + op["dur"]
            assert op["name"] in {
                "record_param_comms",
                "FullyShardedDataParallel._pre_forward",
                "FullyShardedDataParallel._pre_backward_hook",
                "FullyShardedDataParallel._post_backward_final_callback",
            }
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


TINY_BUCKETS = 4


def _kernels(events: Events, prefix: str) -> Events:
    return [e for e in events if e["cat"] == "kernel" and e["name"].startswith(prefix)]


def test_tp_allreduce_of_activations_on_the_critical_path(tmp_path: Path) -> None:
    truth = _study(tmp_path, "tp", [1, 2, 4], act_bytes=4_000_000)
    for n in (2, 4):
        _, _, events = _load(tmp_path, n)[0]
        ars = _kernels(events, "ncclDevKernel_AllReduce_Sum_f32_RING_")
        assert len(ars) == 2 * 2 * TINY["layers"]  # forward and backward of every layer, 2 steps
        assert {(e["args"]["In msg nelems"], e["args"]["Out msg nelems"]) for e in ars} == {
            (1_000_000, 1_000_000)
        }  # activations: constant in N
        compute = sorted((e for e in events if e["cat"] == "kernel" and e["args"]["stream"] == 7),
                         key=lambda e: e["ts"])  # fmt: skip
        for ar in ars:  # the next compute kernel starts after the AllReduce ended
            nxt = [e for e in compute if e["ts"] >= ar["ts"]]
            if nxt:
                assert nxt[0]["ts"] >= ar["ts"] + ar["dur"] - 1e-3
    run1, run4 = truth["runs"]["1"]["breakdown"], truth["runs"]["4"]["breakdown"]
    assert run4["dataloader"] == pytest.approx(run1["dataloader"], rel=0.05)  # replicated batch
    assert run4["communication"] > 0.01 * truth["runs"]["4"]["step_time"]


def test_grad_accum_collectives_only_every_kth_step(tmp_path: Path) -> None:
    truth = _study(tmp_path, "grad_accum", [1, 2], steps=4, accum_steps=2)
    _, _, events = _load(tmp_path, 2)[1]
    steps = {e["name"]: e for e in events if e["name"].startswith("ProfilerStep#")}
    assert sorted(steps) == [f"ProfilerStep#{k}" for k in (10, 11, 12, 13)]
    for name, step in steps.items():
        inside = [
            e for e in _kernels(events, "nccl")
            if step["ts"] <= e["ts"] < step["ts"] + step["dur"]
        ]  # fmt: skip
        opt = [e for e in events if e["name"] == "Optimizer.step#AdamW.step"
               and step["ts"] <= e["ts"] < step["ts"] + step["dur"]]  # fmt: skip
        sync = int(name.split("#")[1]) % 2 == 1
        assert (len(inside) == TINY_BUCKETS, len(opt) == 1) == (sync, sync), name
    assert truth["model"]["cycle_steps"] == 2


def test_multinode_hosts_devices_and_tier(tmp_path: Path) -> None:
    truth = _study(tmp_path, "multinode", [1, 2, 4], gpus_per_node=2)
    files = _load(tmp_path, 4)
    hosts = {r: name.split("_")[0] for r, (name, _, _) in files.items()}
    assert hosts == {0: "simnode0", 1: "simnode0", 2: "simnode1", 3: "simnode1"}
    for r, (_, doc, events) in files.items():
        assert [d["id"] for d in doc["deviceProperties"]] == [0, 1]
        assert {e["pid"] for e in events if e["cat"] == "kernel"} == {r % 2}
        assert doc["distributedInfo"]["pg_config"][0]["ranks"] == [0, 1, 2, 3]
    names = {e["name"] for e in _kernels(files[0][2], "nccl")}
    assert names == {"ncclKernel_AllReduce_RING_LL128_Sum_float(ncclDevComm*, unsigned long, "
                     "ncclWork*)"}  # fmt: skip
    # crossing nodes costs the slow link: N=4 (two nodes) is slower per step than N=2 here
    p = truth["params"]
    assert p["inter_bandwidth"] == pytest.approx(p["bandwidth"] / 6)
    same = {**TINY, "gpus_per_node": 2, "inter_bandwidth": 50e9, "inter_alpha": 10e-6}
    flat = simulate([1, 2, 4], tmp_path / "flat", steps=1, pattern="multinode",
                    params=pattern_params("multinode", same))  # fmt: skip
    tiered, same_link = truth["model"]["step_time"], flat["model"]["step_time"]
    assert tiered["2"] == pytest.approx(same_link["2"], rel=1e-9)  # one node: no difference
    assert tiered["4"] > same_link["4"] + 0.0005


def test_launch_bound_floor_from_the_schedule(tmp_path: Path) -> None:
    kernels = 7 * 40
    sets = {"layers": 40, "model_bytes": 1_000_000, "dl_parallel": 0.0}
    truth = simulate([1, 2], tmp_path, pattern="launch_bound", steps=1, truth_at=[16, 64],
                     params=pattern_params("launch_bound", sets))  # fmt: skip
    floor = kernels * 6e-6
    t = truth["model"]["step_time"]
    assert t["64"] > floor and t["16"] > floor
    # the GPU part keeps shrinking, but the host launch rate does not: T(64) ~ T(16)
    assert t["64"] == pytest.approx(t["16"], rel=0.1)
    assert truth["speedup"]["64"] < 1.15 * truth["speedup"]["16"]
    _, _, events = _load(tmp_path, 2)[0]
    launches = [e for e in events if e["name"] == "cudaLaunchKernel"]
    assert len(launches) >= kernels and all(e["dur"] < 6 for e in launches)


def test_heavy_tail_truth_is_the_expected_slowest_rank(tmp_path: Path) -> None:
    import numpy as np

    sets = {"layers": 2, "tail_median": 0.01, "tail_sigma": 1.0, "jitter": 0.0}
    truth = simulate([1], tmp_path / "a", pattern="heavy_tail", steps=1, truth_at=[4, 32],
                     params=pattern_params("heavy_tail", sets))  # fmt: skip
    base = simulate([1], tmp_path / "b", pattern="heavy_tail", steps=1, truth_at=[4, 32],
                    params=pattern_params("heavy_tail", {**sets, "tail_median": 0.0}))  # fmt: skip
    rng = np.random.default_rng(0)
    for n in (1, 4, 32):
        delay = truth["model"]["step_time"][str(n)] - base["model"]["step_time"][str(n)]
        expected_max = 0.01 * np.exp(rng.standard_normal((20_000, n))).max(axis=1).mean()
        assert delay == pytest.approx(expected_max, rel=0.05), n
    assert truth["model"]["replicas"]["32"] >= 1000


def test_comm_types_kernel_names_and_latency(tmp_path: Path) -> None:
    truth = _study(tmp_path, "comm_types", [1, 2, 4])
    _, _, events = _load(tmp_path, 4)[2]
    names = {e["name"].split("(")[0] for e in _kernels(events, "nccl")}
    assert names == {
        "ncclDevKernel_Broadcast_RING_LL",
        "ncclDevKernel_AllReduce_Sum_f32_TREE_LL",
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL128",  # 6 MB buckets
    }
    bcast = [e for _, _, ev in _load(tmp_path, 4).values() for e in _kernels(ev, "ncclDevKernel_B")]
    assert bcast[0]["args"]["Collective name"] == "broadcast"
    # 3 hops of 300 µs once all ranks arrived: the late rank's kernel is the transfer alone
    assert min(e["dur"] for e in bcast) == pytest.approx(
        3 * 300 + 4096 / 50e9 / 0.5 * 1e6, rel=0.04
    )
    assert truth["runs"]["4"]["breakdown"]["communication"] > 0.0009


@pytest.mark.parametrize(
    "pattern",
    ["fsdp", "ddp,heavy_tail", "tp", "grad_accum", "multinode", "launch_bound", "comm_types",
     "fsdp,multinode,heavy_tail"],
)  # fmt: skip
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


def test_default_study_reports_progress_on_stderr(tmp_path: Path) -> None:
    args = ["--world-sizes", "1,8", "--out", str(tmp_path), "--steps", "1", "--set", "layers=1"]
    result = CliRunner().invoke(simulate_cmd, args)
    assert result.exit_code == 0, result.output
    assert "simulating ddp N=8" in result.stderr and "N=8: wrote 8/8 rank files" in result.stderr
    assert result.stdout.startswith("wrote 9 rank traces for N=1,8 (strong)")


def test_rerun_replaces_the_other_kind_of_rank_files(tmp_path: Path) -> None:
    truth = simulate([2], tmp_path, pattern="fsdp", steps=1, params=pattern_params("fsdp", TINY))
    assert truth["truth_at"] == [4, 8, 16]  # by default 2x, 4x, 8x the largest simulated N
    assert {"1", "2", "4", "8", "16"} == truth["speedup"].keys()
    assert {p.name.split("_")[0] for p in (tmp_path / "ws2").iterdir()} == {"simnode0"}
    simulate([2], tmp_path, steps=1)
    assert {p.name.split("_")[0] for p in (tmp_path / "ws2").iterdir()} == {"simhost"}
    simulate([2], tmp_path, pattern="tp", steps=1, params=pattern_params("tp", TINY))
    assert len(list((tmp_path / "ws2").iterdir())) == 2
