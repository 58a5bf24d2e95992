"""One mini trace per attribution rule (the layers of classify/rank.py), exact seconds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tests.minitrace import MiniTrace
from tracescale.categories import CATEGORIES
from tracescale.classify.rank import RankResult, classify_rank
from tracescale.classify.rules import load_rules
from tracescale.ingest.decode import load_trace

US = 1e-6


def classify(t: MiniTrace, tmp_path: Path, rules: str | None = None) -> RankResult:
    path = t.write(tmp_path / f"mini_{len(list(tmp_path.iterdir()))}.json")
    return classify_rank(load_trace(str(path)), load_rules(rules))


def assert_sums(steps: pd.DataFrame) -> None:
    total = steps[list(CATEGORIES)].sum(axis=1).to_numpy()
    np.testing.assert_allclose(total, steps["duration"].to_numpy(), rtol=0, atol=1e-9)
    assert (steps[list(CATEGORIES)].to_numpy() >= 0).all()


def expect(steps: pd.DataFrame, row: int = 0, **us: float) -> None:
    """Categories named in ``us`` (µs) exactly; every other category zero."""
    assert_sums(steps)
    got = {c: float(steps.iloc[row][c]) for c in CATEGORIES}
    want = {c: us.get(c, 0.0) * US for c in CATEGORIES}
    assert got == pytest.approx(want, abs=1e-12), got


def base(**kw: Any) -> MiniTrace:
    t = MiniTrace(**kw)
    t.step(1, 0, 1000)
    return t


def test_compute_kernel(tmp_path: Path) -> None:
    t = base().host("aten::mm", 0, 100).kernel("sgemm", 100, 500, launch=50)
    r = classify(t, tmp_path)
    assert r.kind == "gpu"
    expect(r.steps, host=100, compute=500, idle=400)


@pytest.mark.parametrize("cat", ["kernel", "cuda_sync"])
def test_gpu_wait_events_are_not_compute(tmp_path: Path, cat: str) -> None:
    # HTA 0.5.0 counts `Stream Wait Event` as compute; here it is the GPU waiting: idle.
    t = base().kernel("sgemm", 0, 100).gpu_wait(100, 400, cat=cat)
    expect(classify(t, tmp_path).steps, compute=100, idle=900)


def test_memcpy(tmp_path: Path) -> None:
    t = base().memcpy(0, 300).kernel("relu", 200, 200)
    expect(classify(t, tmp_path).steps, compute=200, memcpy=200, idle=600)


def test_exposed_vs_overlapped_allreduce(tmp_path: Path) -> None:
    t = base().kernel("sgemm", 100, 300).nccl(300, 300)
    r = classify(t, tmp_path)
    expect(r.steps, compute=300, communication=200, idle=500)
    row = r.steps.iloc[0]
    assert row["overlapped_communication"] == pytest.approx(100 * US, abs=1e-12)
    assert row["comm_transfer"] == pytest.approx(300 * US, abs=1e-12)
    assert r.comm_by_type == pytest.approx({"allreduce": 200 * US}, abs=1e-12)
    coll = r.collectives
    assert coll["collective"].tolist() == ["allreduce"]
    assert coll["bytes"].tolist() == [4096]
    assert coll["exposed"].tolist() == pytest.approx([200 * US], abs=1e-12)


def test_dataloader_while_gpu_idle(tmp_path: Path) -> None:
    t = base().dataloader(0, 300).kernel("sgemm", 250, 250)
    expect(classify(t, tmp_path).steps, dataloader=250, compute=250, idle=500)


@pytest.mark.parametrize(
    "name,cat", [("cudaStreamSynchronize", "cuda_runtime"), ("aten::item", "cpu_op")]
)
def test_blocking_sync_call(tmp_path: Path, name: str, cat: str) -> None:
    # The sync call waits for the kernel (compute), then the GPU idles: the rest of the call
    # and the host time after it until the next kernel starts are sync.
    t = base().kernel("sgemm", 0, 200).host(name, 100, 300, cat=cat)
    t.host("aten::add", 450, 100).kernel("add", 600, 100, launch=500)
    t.host("aten::mul", 750, 50)
    expect(classify(t, tmp_path).steps, compute=300, sync=400, host=50, idle=250)


def test_sync_then_idle_gap(tmp_path: Path) -> None:
    """Host work between a sync's return and the next kernel start is the sync's stall."""
    t = base().kernel("fwd", 0, 300).runtime("cudaStreamSynchronize", 100, 200)
    t.host("optimizer_python", 400, 200)  # host time after the sync, GPU drained
    t.kernel("bwd", 700, 200, launch=650)
    # 300..700: sync (100 of it untraced, still caused by the drained queue); after: idle.
    expect(classify(t, tmp_path).steps, compute=500, sync=400, idle=100)


def test_rank0_reduction(tmp_path: Path) -> None:
    t = base(rank=0, world_size=1).annotation("reduce_metrics", 100, 400).host("aten::add", 150, 50)
    t.kernel("k", 600, 100)
    expect(classify(t, tmp_path).steps, reduction=400, compute=100, idle=500)


@pytest.mark.parametrize("name", ["c10d::barrier", "gloo:all_reduce", "c10d::allreduce_"])
def test_host_collective(tmp_path: Path, name: str) -> None:
    t = base().kernel("k", 0, 100).host(name, 100, 300).host("aten::zeros", 400, 100)
    expect(classify(t, tmp_path).steps, compute=100, communication=300, host=100, idle=500)


@pytest.mark.parametrize("stream_wait", [True, False])
def test_stream_wait_op_is_no_host_collective(tmp_path: Path, stream_wait: bool) -> None:
    """DDP's end-of-backward join makes the compute stream wait for NCCL (cudaStreamWaitEvent)
    and returns at once: it is not a blocking host collective; without the wait it would be."""
    t = base(rank=0, world_size=2).nccl(100, 300, launch=50)
    t.host("torch.distributed.ddp.reducer::finalize_backward", 450, 10)
    if stream_wait:
        t.runtime("cudaEventRecord", 451, 1).runtime("cudaStreamWaitEvent", 453, 1)
    t.kernel("k", 460, 400)
    r = classify(t, tmp_path)
    kinds = r.collectives["collective"].tolist()
    assert kinds == (["allreduce"] if stream_wait else ["allreduce", "other"])


def test_other_host_and_untraced(tmp_path: Path) -> None:
    t = base().host("aten::empty", 0, 250).kernel("k", 300, 100, launch=100)
    t.host("python_glue", 600, 100, cat="python_function")
    expect(classify(t, tmp_path).steps, host=350, compute=100, idle=550)


def test_user_rules_go_first(tmp_path: Path) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text(
        "[[host]]\npattern = '^my_eval$'\ncat = 'user_annotation'\ntarget = 'reduction'\n"
        "[[host]]\npattern = '^enumerate\\(DataLoader\\)'\ntarget = 'reduction'\n"
    )
    t = base().annotation("my_eval", 0, 300).host("aten::add", 50, 50)
    t.dataloader(300, 100).kernel("k", 400, 100)
    expect(classify(t, tmp_path).steps, host=300, dataloader=100, compute=100, idle=500)
    # With the user's rules: my_eval is reduction, and their DataLoader rule beats the default.
    r = classify(t, tmp_path, rules=str(rules))
    expect(r.steps, reduction=400, compute=100, idle=500)


def test_priority_order_on_gpu(tmp_path: Path) -> None:
    """compute > memcpy > communication > dataloader > sync > reduction > host collective."""
    t = base().kernel("k", 0, 100).memcpy(0, 200).nccl(0, 300)
    t.dataloader(0, 400).runtime("cudaDeviceSynchronize", 0, 500)
    t.annotation("reduce_metrics", 0, 600).host("c10d::barrier", 0, 700)
    t.host("aten::add", 0, 800)
    # 700..1000: host op, then untraced, after a sync returned (at 500) with no kernel
    # started since: the drained GPU is the sync's stall, up to the step end.
    expect(
        classify(t, tmp_path).steps,
        compute=100,
        memcpy=100,
        communication=100 + 100,
        dataloader=100,
        sync=100 + 100 + 200,
        reduction=100,
    )


def test_cpu_only_gloo(tmp_path: Path) -> None:
    t = base(rank=0, world_size=2).dataloader(0, 100).host("aten::linear", 100, 300)
    t.host("c10d::allreduce_", 400, 10).gloo("gloo:all_reduce", 405, 185)
    # main thread idle 410..590 waiting for the gloo thread: communication; 590..600 untraced
    t.host("torch.distributed.ddp.reducer::copy_bucket_to_grad", 600, 20, cat="user_annotation")
    t.host("autograd::engine::evaluate_function: AddmmBackward0", 620, 180)
    r = classify(t, tmp_path)
    assert r.kind == "cpu"
    # copy_bucket_to_grad is a host collective name (torch.distributed.*): communication.
    expect(r.steps, dataloader=100, compute=300 + 180, communication=10 + 180 + 20, host=10 + 200)
    assert r.collectives["collective"].tolist() == ["allreduce"]


def test_cpu_only_compute_hides_gloo(tmp_path: Path) -> None:
    t = base().host("aten::linear", 0, 500).gloo("gloo:all_reduce", 100, 600)
    r = classify(t, tmp_path)
    expect(r.steps, compute=500, communication=200, host=300)
    assert r.steps.iloc[0]["overlapped_communication"] == pytest.approx(400 * US, abs=1e-12)


def test_late_gpu_work_stays_in_its_step(tmp_path: Path) -> None:
    t = MiniTrace().step(1, 0, 1000).step(2, 1000, 1000)
    t.host("aten::mm", 800, 100).kernel("late", 1000, 500, launch=850)
    t.kernel("next", 1600, 100, launch=1100)
    r = classify(t, tmp_path)
    steps = r.steps
    assert steps["step"].tolist() == [1, 2]
    assert steps["duration"].tolist() == pytest.approx([1500 * US, 500 * US], abs=1e-12)
    expect(steps, 0, host=100, compute=500, idle=900)
    expect(steps, 1, compute=100, idle=400)
