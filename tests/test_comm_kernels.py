"""The communication-kernel families: one list, used by classify and inspect alike.

Tiny hand-written traces with the kernel names each library writes; the exact communication
time per step and the exact inspect counts are known by construction.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.minitrace import MiniTrace
from tracescale.classify.collectives import collective_type
from tracescale.classify.comm_kernels import COMM_FAMILIES, comm_family, is_comm_kernel
from tracescale.classify.rank import classify_rank
from tracescale.classify.rules import load_rules
from tracescale.cli.inspect import inspect_path
from tracescale.cli.main import cli
from tracescale.errors import UsageError
from tracescale.ingest.decode import load_trace

#: (family, kernel name as the library writes it, collective type inspect reports)
FAMILY_KERNELS = [
    ("nccl", "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
     "allreduce"),
    ("nccl", "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "allgather"),
    ("nccl", "ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)", "other"),  # RCCL
    ("nccl", "hcclAllReduce_kernel", "allreduce"),
    ("deepep", "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*)",
     "alltoall"),
    ("deepep", "void deep_ep::internode_ll::combine<false, 7168>(void*, void*)", "alltoall"),
    ("deepep", "void deep_ep::intranode::notify_dispatch<8>(int const*, int*, int)", "alltoall"),
    ("nvshmem", "nvshmemi_alltoall_kernel(int*, int*)", "alltoall"),
    ("vllm", "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*)",
     "allreduce"),
    ("vllm", "void vllm::cross_device_reduce_2stage<float, 4>(vllm::RankData*)", "allreduce"),
    ("symm_mem", "void c10d::symmetric_memory::two_shot_all_reduce_kernel<float, 16, 8>()",
     "allreduce"),
    ("symm_mem", "void c10d::symmetric_memory::multimem_all_reduce_kernel<float, 16>()",
     "allreduce"),
    ("oneccl", "oneccl_allreduce_kernel_float", "allreduce"),
]  # fmt: skip

NOT_COMM = [
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>()",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64",
    "void deep_ep::layout::get_dispatch_layout<256, 32, 8>(long const*, int*)",  # local math
    "Memcpy DtoD (Device -> Device)",
    "triton_poi_fused_add_0",
]


@pytest.mark.parametrize(("family", "name", "ctype"), FAMILY_KERNELS)
def test_family_names_are_communication(family: str, name: str, ctype: str) -> None:
    assert comm_family(name) == family
    assert collective_type(name) == ctype


@pytest.mark.parametrize("name", NOT_COMM)
def test_compute_kernels_are_not_communication(name: str) -> None:
    assert not is_comm_kernel(name)


def test_every_family_is_tested() -> None:
    assert {f for f, _, _ in FAMILY_KERNELS} == set(COMM_FAMILIES)


def _one_step(path: Path, comm_name: str) -> Path:
    """One 1000 µs step: 300 µs compute, then 200 µs of the given kernel, GPU idle otherwise."""
    t = MiniTrace(rank=0, world_size=2).step(1, 0, 1000)
    t.kernel("sgemm_128x128", 100, 300, launch=50)
    t.nccl(500, 200, launch=60, name=comm_name)
    return t.write(path)


@pytest.mark.parametrize(("family", "name", "ctype"), FAMILY_KERNELS)
def test_classify_counts_each_family_as_communication(
    tmp_path: Path, family: str, name: str, ctype: str
) -> None:
    result = classify_rank(load_trace(str(_one_step(tmp_path / "r0.json", name))), load_rules())
    row = result.steps.iloc[0]
    assert row["communication"] == pytest.approx(200e-6, abs=1e-12)
    assert row["compute"] == pytest.approx(300e-6, abs=1e-12)
    assert row["comm_transfer"] == pytest.approx(200e-6, abs=1e-12)


def _with_annotations(path: Path, n: int) -> Path:
    """n NCCL all-reduce kernels, each inside RCCL/NCCL's ``nccl:all_reduce`` GPU range."""
    t = MiniTrace(rank=0, world_size=2).step(1, 0, 100 * n + 100)
    for k in range(n):
        t.nccl(100 * k + 10, 50, launch=100 * k + 5, seq=k)
        t.events.append(
            {"ph": "X", "cat": "gpu_user_annotation", "name": "nccl:all_reduce",
             "pid": 1, "tid": 20, "ts": 100 * k + 8, "dur": 54, "args": {"device": 0}}
        )  # fmt: skip
    return t.write(path)


def test_inspect_counts_kernels_not_their_annotations(tmp_path: Path) -> None:
    path = _with_annotations(tmp_path / "run" / "rank0.json", 6)
    [study] = inspect_path(str(path.parent))
    [row] = study["runs"][0]["ranks"]
    assert row["collectives"]["kernels"] == {"allreduce": 6}


def test_annotations_are_not_communication_time(tmp_path: Path) -> None:
    path = _with_annotations(tmp_path / "rank0.json", 3)
    row = classify_rank(load_trace(str(path)), load_rules()).steps.iloc[0]
    assert row["comm_transfer"] == pytest.approx(3 * 50e-6, abs=1e-12)


def test_inspect_and_classify_share_user_rules(tmp_path: Path) -> None:
    """A kernel no family knows becomes communication in both through one --rules file."""
    _one_step(tmp_path / "run" / "rank0.json", "my_custom_alltoall_kernel")
    rules = tmp_path / "rules.toml"
    rules.write_text('[[device]]\npattern = "^my_custom_"\ntarget = "communication"\n')
    [study] = inspect_path(str(tmp_path / "run"))
    assert study["runs"][0]["ranks"][0]["collectives"]["kernels"] == {}
    [study] = inspect_path(str(tmp_path / "run"), rules=str(rules))
    # Its type comes from the kernel's "Collective name" arg (allreduce in this trace).
    assert study["runs"][0]["ranks"][0]["collectives"]["kernels"] == {"allreduce": 1}
    trace = load_trace(str(tmp_path / "run" / "rank0.json"))
    assert classify_rank(trace, load_rules()).steps.iloc[0]["communication"] == 0.0
    row = classify_rank(trace, load_rules(str(rules))).steps.iloc[0]
    assert row["communication"] == pytest.approx(200e-6, abs=1e-12)
    res = CliRunner().invoke(
        cli, ["inspect", str(tmp_path / "run"), "--rules", str(rules), "--format", "json"]
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)[0]["runs"][0]["ranks"][0]["collectives"]["kernels"] == {
        "allreduce": 1
    }


def test_unknown_builtin_is_a_usage_error(tmp_path: Path) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text('[[device]]\nbuiltin = "nope"\ntarget = "communication"\n')
    with pytest.raises(UsageError, match="unknown builtin"):
        load_rules(str(rules))


def test_pooled_windows_are_listed_with_the_gap(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    for k, base in enumerate((0, 5_000_000)):  # two windows 5 s apart, one process
        t = MiniTrace().step(k + 1, base, 1000)
        t.kernel("sgemm", base + 100, 300, launch=base + 50)
        t.write(folder / f"worker0.{1000 + k}.pt.trace.json")
    [study] = inspect_path(str(folder))
    [row] = study["runs"][0]["ranks"]
    assert [Path(f).name for f in row["files"]] == [
        "worker0.1000.pt.trace.json",
        "worker0.1001.pt.trace.json",
    ]
    note = row["warnings"][0]
    assert "worker0.1000.pt.trace.json, worker0.1001.pt.trace.json" in note
    assert "gap between them 5 s" in note
    from tracescale.pipeline import analyze

    study_doc = analyze(str(folder), jobs=1).doc
    warnings = study_doc["studies"][0]["warnings"]
    assert any("2 successive profiling windows" in w and "worker0.1001" in w for w in warnings)
