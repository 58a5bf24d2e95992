"""simulate's pp, moe, zero2, hsdp patterns and the act_ckpt modifier: trace shapes, truth
self-consistency, refusals, determinism, and the analyzer measured against their truth."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from tracescale.categories import CATEGORIES
from tracescale.errors import UsageError
from tracescale.simulate import parse_pattern, pattern_params, simulate

Study = tuple[Path, dict[str, Any]]
#: pattern -> (world sizes, --set overrides, truth_at)
STUDIES: dict[str, tuple[list[int], dict[str, float], list[int]]] = {
    "pp": ([4, 8, 16], {"layers": 2, "microbatches": 16}, [32, 64]),
    "moe": ([1, 2, 4], {"layers": 2}, [8, 16]),
    "zero2": ([1, 2, 4], {"layers": 2}, [8, 16]),
    "hsdp": ([2, 4, 8], {"layers": 2, "gpus_per_node": 4}, [16, 32]),
    "ddp,act_ckpt": ([1, 2, 4], {"layers": 2}, [8, 16]),
}


def _make(root: Path, pattern: str, seed: int = 3, steps: int = 3) -> dict[str, Any]:
    sizes, sets, at = STUDIES[pattern]
    params = pattern_params(pattern, sets)
    return simulate(sizes, root, pattern=pattern, steps=steps, seed=seed, params=params,
                    truth_at=at)  # fmt: skip


@pytest.fixture(scope="module")
def studies(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Study]:
    out = {}
    for pattern in STUDIES:
        root = tmp_path_factory.mktemp(pattern.replace(",", "+"))
        out[pattern] = (root, _make(root, pattern))
    return out


def _events(root: Path, n: int, rank: int) -> list[dict[str, Any]]:
    for path in (root / f"ws{n}").glob("*.pt.trace.json.gz"):
        doc = json.loads(gzip.decompress(path.read_bytes()))
        if doc["distributedInfo"]["rank"] == rank:
            return [e for e in doc["traceEvents"] if e["ph"] == "X"]
    raise AssertionError(f"no rank {rank} at N={n}")


@pytest.mark.parametrize("pattern", list(STUDIES))
def test_truth_categories_sum_to_the_step(studies: dict[str, Study], pattern: str) -> None:
    _, truth = studies[pattern]
    for run in truth["runs"].values():
        assert sum(run["breakdown"].values()) == pytest.approx(run["step_time"], rel=1e-9)
        for rank in run["per_rank"].values():
            for step in rank["steps"]:
                assert sum(step[c] for c in CATEGORIES) == pytest.approx(step["duration"])
    base = str(truth["speedup_baseline"])
    assert truth["speedup"][base] == 1.0
    assert set(truth["speedup"]) >= {str(n) for n in truth["world_sizes"] + truth["truth_at"]}


def test_pp_bubble_from_the_schedule(studies: dict[str, Study]) -> None:
    """At N = stages each stage idles about (p - 1) microbatch passes of m + p - 1; in strong
    mode m = M / DP shrinks with N, so the bubble's share of the pipeline's time grows."""
    _, truth = studies["pp"]
    shares = []
    for n in ("4", "8", "16"):
        bd = truth["runs"][n]["breakdown"]
        shares.append(bd["communication"] / (bd["communication"] + bd["compute"]))
    ideal = truth["model"]["pipeline"]["bubble_share_1f1b"]["4"]  # 3 / 19
    assert ideal == pytest.approx(3 / 19)
    assert 0.8 * ideal < shares[0] < 1.6 * ideal  # plus each microbatch's transfers
    assert shares[0] < shares[1] < shares[2]
    assert truth["model"]["pipeline"]["microbatches_per_replica"] == {
        "4": 16, "8": 8, "16": 4, "32": 2, "64": 1
    }  # fmt: skip


def test_pp_trace_shapes(studies: dict[str, Study]) -> None:
    root, _ = studies["pp"]
    events = _events(root, 8, 2)  # stage 1 of 4, replica 0 (DP = 2)
    p2p = [e for e in events if e["name"] == "record_param_comms"
           and e["args"]["Collective name"] in ("send", "recv")]  # fmt: skip
    kernels = [e for e in events if e["name"].startswith("ncclDevKernel_SendRecv")]
    m, steps = 8, 3  # microbatches per replica at DP = 2
    # a middle stage receives and sends each microbatch's activation and gradient
    assert len(p2p) == len(kernels) == 4 * m * steps
    peers = {e["args"]["Process Group Ranks"] for e in p2p}
    assert peers == {"[0, 2]", "[2, 4]"}
    assert all(e["args"]["Group size"] == 2 for e in p2p)
    assert {e["name"] for e in events} >= {"nccl:send", "nccl:recv"}
    dp = [e for e in events if e["name"] == "record_param_comms"
          and e["args"]["Collective name"] == "allreduce"]  # fmt: skip
    assert len(dp) == steps and dp[0]["args"]["Process Group Ranks"] == "[2, 3]"


def test_moe_all_to_all_and_imbalance(studies: dict[str, Study]) -> None:
    root, truth = studies["moe"]
    events = _events(root, 4, 1)
    a2a = [e for e in events if e["cat"] == "kernel" and e["args"].get("Collective name")
           == "all_to_all"]  # fmt: skip
    assert a2a and all(e["name"].startswith("ncclDevKernel_SendRecv") for e in a2a)
    assert len(a2a) == 4 * 2 * 3  # 2 per layer forward, 2 backward; 2 layers, 3 steps
    imb = truth["model"]["expert_imbalance"]
    assert imb["1"] == 0.0 and imb["4"] > 0
    assert truth["runs"]["4"]["expert_imbalance"] > 0


def test_zero2_reduce_scatter_and_all_gather(studies: dict[str, Study]) -> None:
    root, _ = studies["zero2"]
    names = [e["args"]["Collective name"] for e in _events(root, 4, 0)
             if e["name"] == "record_param_comms"]  # fmt: skip
    assert names.count("_reduce_scatter_base") == names.count("_allgather_base") == 4 * 3
    assert "allreduce" not in names


def test_hsdp_groups_stay_inside_and_across_nodes(studies: dict[str, Study]) -> None:
    root, _ = studies["hsdp"]
    events = _events(root, 8, 5)
    ops = [e["args"] for e in events if e["name"] == "record_param_comms"]
    shard = {a["Process Group Ranks"] for a in ops if a["Collective name"] != "allreduce"}
    repl = {a["Process Group Ranks"] for a in ops if a["Collective name"] == "allreduce"}
    assert shard == {"[4, 5, 6, 7]"} and repl == {"[1, 5]"}
    doc_pgs = json.loads(gzip.decompress(next((root / "ws8").glob("*41085*")).read_bytes()))
    descs = {pg["pg_desc"] for pg in doc_pgs["distributedInfo"]["pg_config"]}
    assert descs == {"default_pg", "mesh_dp_shard", "mesh_dp_replicate"}


def test_act_ckpt_recompute_regions(studies: dict[str, Study]) -> None:
    root, truth = studies["ddp,act_ckpt"]
    events = _events(root, 2, 0)
    regions = [e for e in events if e["name"] == "CheckpointFunctionBackward"]
    assert len(regions) == 2 * 3
    inside = [e for e in events if e["name"] == "aten::linear"
              and any(r["ts"] <= e["ts"] <= r["ts"] + r["dur"] for r in regions)]  # fmt: skip
    assert len(inside) == len(regions)
    fwd = truth["params"]["fwd_time"]
    assert truth["runs"]["2"]["recompute"] == pytest.approx(fwd / 2, rel=0.05)
    assert truth["model"]["recompute_time"]["4"] == pytest.approx(fwd / 4, rel=1e-3)


def test_same_seed_same_bytes(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for root in (a, b):
        simulate([4, 8], root, pattern="pp", steps=1, seed=5,
                 params=pattern_params("pp", {"layers": 1, "microbatches": 8}),
                 truth_at=[16])  # fmt: skip
    for path in sorted(a.rglob("*.*")):
        assert path.read_bytes() == (b / path.relative_to(a)).read_bytes(), path.name


@pytest.mark.parametrize(
    ("pattern", "sizes", "sets"),
    [("pp", [6], {}), ("hsdp", [12], {}), ("pp", [8], {"microbatches": 3}),
     ("pp", [4, 8], {"virtual_stages": 2, "microbatches": 12})],
)  # fmt: skip
def test_refused_world_sizes(
    tmp_path: Path, pattern: str, sizes: list[int], sets: dict[str, float]
) -> None:
    with pytest.raises(UsageError) as err:
        simulate(sizes, tmp_path, pattern=pattern, params=pattern_params(pattern, sets),
                 truth_at=[])  # fmt: skip
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("text", ["pp,cuda_graph", "pp,comm_types", "moe,cuda_graph",
                                  "act_ckpt,cuda_graph", "pp,moe"])  # fmt: skip
def test_refused_combinations(text: str) -> None:
    with pytest.raises(ValueError):
        parse_pattern(text)


def test_combinations_parse() -> None:
    for text in ("pp,heavy_tail,multinode,grad_accum,act_ckpt", "zero2,grad_accum",
                 "hsdp,multinode,heavy_tail", "moe,act_ckpt,heavy_tail"):  # fmt: skip
        assert parse_pattern(text).name.startswith(text.split(",")[0])
