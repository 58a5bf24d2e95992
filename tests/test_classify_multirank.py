"""Cross-rank: collective matching, transfer vs wait, and the cause of a wait (exact seconds)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tests.minitrace import MiniTrace
from tests.test_classify_rules import US, assert_sums, expect
from tracescale.classify.result import RunBreakdown
from tracescale.pipeline import analyze


def run_of(folder: Path) -> RunBreakdown:
    study = analyze(str(folder), jobs=1)
    (run,) = study.runs_by_study[0]
    return run


def rank_steps(run: RunBreakdown, rank: int) -> pd.DataFrame:
    return run.steps[run.steps["rank"] == rank].reset_index(drop=True)


def test_straggler_compute_wait_is_attributed_to_compute(tmp_path: Path) -> None:
    """Rank 1 computes 5 ms longer; rank 0 waits 5 ms in the AllReduce -> compute on rank 0."""
    for rank in (0, 1, 2):
        t = MiniTrace(rank=rank, world_size=3)
        for k in range(2):
            base = k * 10_000
            t.step(k, base, 10_000)
            t.kernel("fwd", base, 1000)
            late = rank == 1
            if late:
                t.kernel("extra", base + 1000, 5000)
            # AllReduce: all finish at base+7000; transfer 1 ms (rank 1), rank 2 arrives 1 ms late
            start = {0: 1000, 1: 6000, 2: 2000}[rank]
            t.nccl(base + start, 7000 - start, launch=base + 500, seq=k)
        t.write(tmp_path / f"rank{rank}.json")
    run = run_of(tmp_path)
    assert run.world_size == 3 and run.ranks == (0, 1, 2)
    assert_sums(run.steps)
    for k in range(2):
        # rank 0 waited 5 ms (1000..6000) while rank 1 computed: compute after cause.
        expect(rank_steps(run, 0), k, compute=1000 + 5000, communication=1000, idle=3000)
        expect(rank_steps(run, 1), k, compute=6000, communication=1000, idle=3000)
        # rank 2's 1 ms of idle before its AllReduce is its own; its 4 ms wait -> compute.
        expect(rank_steps(run, 2), k, compute=1000 + 4000, communication=1000, idle=4000)
    wait = run.steps.groupby("rank")["communication_wait"].sum()
    assert wait.to_dict() == pytest.approx({0: 10_000 * US, 1: 0.0, 2: 8000 * US}, abs=1e-12)
    coll = run.collectives
    assert len(coll) == 6
    assert set(coll["collective"]) == {"allreduce"}
    assert coll["transfer"].tolist() == pytest.approx([1000 * US] * 6, abs=1e-12)
    byrank = coll.groupby("rank")["wait"].sum().to_dict()
    assert byrank == pytest.approx({0: 10_000 * US, 1: 0.0, 2: 8000 * US}, abs=1e-12)


def test_rank0_reduction_waited_for_in_barrier(tmp_path: Path) -> None:
    """Rank 0 reduces metrics for 3 ms; the others wait in a barrier -> reduction on them."""
    for rank in (0, 1, 2):
        t = MiniTrace(rank=rank, world_size=3)
        t.step(1, 0, 10_000).kernel("fwd", 0, 1000)
        if rank == 0:
            t.annotation("reduce_metrics", 1000, 3000)
            t.host("aten::add", 1500, 100)
        start = 4000 if rank == 0 else 1000
        t.nccl(start, 4100 - start, launch=start, seq=0)
        t.write(tmp_path / f"rank{rank}.json")
    run = run_of(tmp_path)
    assert_sums(run.steps)
    expect(rank_steps(run, 0), compute=1000, reduction=3000, communication=100, idle=5900)
    for rank in (1, 2):
        expect(rank_steps(run, rank), compute=1000, reduction=3000, communication=100, idle=5900)
        assert rank_steps(run, rank)["communication_wait"].iloc[0] == pytest.approx(3000 * US)
    assert rank_steps(run, 0)["communication_wait"].iloc[0] == 0.0


def test_wait_on_a_late_dataloader(tmp_path: Path) -> None:
    for rank in (0, 1):
        t = MiniTrace(rank=rank, world_size=2)
        t.step(1, 0, 5000)
        if rank == 1:
            t.dataloader(0, 2000)
        t.kernel("fwd", 2000 if rank else 0, 1000)
        start = 3000 if rank else 1000
        t.nccl(start, 4000 - start, launch=start)
        t.write(tmp_path / f"rank{rank}.json")
    run = run_of(tmp_path)
    expect(rank_steps(run, 1), dataloader=2000, compute=1000, communication=1000, idle=1000)
    # rank 0 waited 1000..3000; rank 1 was in the DataLoader until 2000, then computed.
    expect(rank_steps(run, 0), compute=1000 + 1000, dataloader=1000, communication=1000, idle=1000)


def test_concurrent_instances_wait_once(tmp_path: Path) -> None:
    """Two AllReduces in flight at once, both waiting 5 ms for rank 1: 5 ms of wait, not 10."""
    for rank in (0, 1):
        t = MiniTrace(rank=rank, world_size=2).step(1, 0, 10_000)
        t.kernel("fwd", 0, 1000)
        if rank == 1:
            t.kernel("extra", 1000, 5000)
        start = 1000 if rank == 0 else 6000
        t.nccl(start, 7000 - start, seq=0, stream=20)
        t.nccl(start, 7000 - start, seq=1, stream=21)
        t.write(tmp_path / f"rank{rank}.json")
    run = run_of(tmp_path)
    assert run.collectives.groupby("rank")["wait"].sum().to_dict() == pytest.approx(
        {0: 10_000 * US, 1: 0.0}, abs=1e-12
    )
    assert rank_steps(run, 0)["communication_wait"].iloc[0] == pytest.approx(5000 * US)
    expect(rank_steps(run, 0), compute=6000, communication=1000, idle=3000)


SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces" / "ddp_cpu_strong"


@pytest.mark.skipif(not (SAMPLES / "ws2").is_dir(), reason="sample_traces/ddp_cpu_strong absent")
def test_real_cpu_ddp_gloo_run() -> None:
    """Real CPU DDP (gloo) traces: CPU kind, gloo allreduces matched, waits split, sums hold."""
    run = run_of(SAMPLES / "ws2")
    assert run.kind == "cpu" and run.world_size == 2
    assert_sums(run.steps)
    assert (run.steps["compute"] > 0).all()
    assert run.steps["communication"].sum() > 0
    # Concurrent gloo buckets wait over the same interval: counted once, never above the step.
    assert (run.steps["communication_wait"] <= run.steps["duration"]).all()
    assert run.steps["communication_wait"].sum() > 0
    coll = run.collectives
    assert "allreduce" in set(coll["collective"])
    assert (coll["transfer"] <= coll["duration"] + 1e-12).all()
    assert (coll["wait"] >= 0).all()


def test_unnamed_single_rank_work_found_by_comparing_ranks(tmp_path: Path) -> None:
    """No rule names ``log_epoch_stats``; it runs on rank 0 only, so it is a reduction."""
    for rank in (0, 1):
        t = MiniTrace(rank=rank, world_size=2)
        t.step(1, 0, 10_000).kernel("fwd", 0, 1000)
        if rank == 0:
            t.annotation("log_epoch_stats", 1000, 3000)
            t.host("aten::add", 1500, 100)
        start = 4000 if rank == 0 else 1000
        t.nccl(start, 4100 - start, launch=start, seq=0)
        t.write(tmp_path / f"rank{rank}.json")
    run = run_of(tmp_path)
    assert_sums(run.steps)
    for rank in (0, 1):
        expect(rank_steps(run, rank), compute=1000, reduction=3000, communication=100, idle=5900)
    assert any("log_epoch_stats" in w for w in run.warnings)


def test_work_on_every_rank_is_not_single_rank(tmp_path: Path) -> None:
    for rank in (0, 1):
        t = MiniTrace(rank=rank, world_size=2)
        t.step(1, 0, 10_000).kernel("fwd", 0, 1000)
        t.annotation("log_epoch_stats", 1000, 3000 if rank == 0 else 2000)
        t.nccl(4000, 100, launch=4000, seq=0)
        t.write(tmp_path / f"rank{rank}.json")
    run = run_of(tmp_path)
    assert float(run.steps["reduction"].sum()) == 0.0


def test_unannotated_rank0_op_is_single_rank_work(tmp_path: Path) -> None:
    """Rank 0 alone runs a 3 ms host op with the GPU idle (no user range around it)."""
    for rank in (0, 1):
        t = MiniTrace(rank=rank, world_size=2)
        t.step(1, 0, 10_000).kernel("fwd", 0, 1000)
        if rank == 0:
            t.host("aten::mean", 1000, 3000)
        start = 4000 if rank == 0 else 1000
        t.nccl(start, 4100 - start, launch=start, seq=0)
        t.write(tmp_path / f"rank{rank}.json")
    run = run_of(tmp_path)
    assert_sums(run.steps)
    for rank in (0, 1):
        expect(rank_steps(run, rank), compute=1000, reduction=3000, communication=100, idle=5900)


def test_one_off_op_on_one_rank_is_not_a_reduction(tmp_path: Path) -> None:
    """Preemption noise: one rank's op is slow in one step of four; nothing is single-rank."""
    for rank in (0, 1):
        t = MiniTrace(rank=rank, world_size=2)
        for k in range(4):
            base = k * 10_000
            t.step(k, base, 10_000).kernel("fwd", base, 1000)
            if not (rank == 0 and k == 2):  # in step 2 only rank 1 runs it, and slowly
                t.host("aten::mul", base + 1000, 3000 if (rank == 1 and k == 2) else 10)
            t.nccl(base + 4000, 100, launch=base + 4000, seq=k)
        t.write(tmp_path / f"rank{rank}.json")
    run = run_of(tmp_path)
    assert_sums(run.steps)
    assert float(run.steps["reduction"].sum()) == 0.0
