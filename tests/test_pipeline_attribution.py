"""Attribution at the measured N of a pipeline-parallel job: point-to-point send/recv are no
collective instance, so their waits stay communication (``classify.run.exposed_waits``).

Why: paired by their group's sequence number, as collectives are, a stage's k-th send/recv met
its neighbour's k-th, which in 1F1B is mostly another transfer (stage s sends forward k while
stage s + 1 sends backward j), and the recv's wait for the neighbour went to the neighbour's
compute: against the rules' cut of tests/independent/pipeline.py's own events
(tests/independent/attribution_truth.py) communication was 2.7/4.1/7.1% of the step low at
N = 4/8/16 (plain 1F1B, M = 32) and 3.1/5.6/9.5% (two virtual chunks); now 0.00% at every N.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.independent.attribution_truth import breakdown
from tests.independent.pipeline import SENDRECV
from tests.minitrace import MiniTrace
from tests.test_classify_multirank import rank_steps, run_of
from tests.test_classify_rules import US, expect
from tracescale.categories import CATEGORIES


def _p2p(kind: str) -> dict[str, Any]:
    return {"Collective name": kind, "Group size": 2, "Process Group Name": "pp_0_1",
            "Process Group Ranks": "[0, 1]"}  # fmt: skip


def _two_stages(folder: Path) -> None:
    """Stage 0 computes 3 ms and sends (0.1 ms); stage 1's recv, launched at 0, waits for it.
    Then stage 0 computes 3 ms more and both meet in an AllReduce (transfer 0.5 ms)."""
    t = MiniTrace(rank=0, world_size=2)
    t.step(1, 0, 10_000).kernel("fwd", 0, 3000).kernel("more", 5000, 3000)
    t.nccl(3000, 100, name=SENDRECV, stream=21, extra=_p2p("send"))
    t.nccl(8000, 500, seq=0).write(folder / "rank0.json")
    t = MiniTrace(rank=1, world_size=2)
    t.step(1, 0, 10_000).kernel("fwd", 3100, 2900)
    t.nccl(0, 3100, name=SENDRECV, stream=22, extra=_p2p("recv"))
    t.nccl(6000, 2500, seq=0).write(folder / "rank1.json")


def test_recv_wait_stays_communication_allreduce_wait_gets_its_cause(tmp_path: Path) -> None:
    """Stage 1's 3 ms in the recv are communication (they were compute, the sender's, when the
    pair was read as a collective's instance); its 2 ms AllReduce wait is still stage 0's
    compute, and only that is ``communication_wait``."""
    _two_stages(tmp_path)
    run = run_of(tmp_path)
    expect(rank_steps(run, 0), compute=6000, communication=600, idle=3400)
    expect(rank_steps(run, 1), compute=2900 + 2000, communication=3100 + 500, idle=1500)
    assert rank_steps(run, 1)["caused_compute"].iloc[0] == pytest.approx(2000 * US, abs=1e-12)
    wait = run.steps.groupby("rank")["communication_wait"].sum().to_dict()
    assert wait == pytest.approx({0: 0.0, 1: 2000 * US}, abs=1e-12)
    # the collectives table still splits the pair (the replay reads it): unchanged
    p2p = run.collectives[run.collectives["collective"] == "sendrecv"]
    assert sorted(p2p["wait"].tolist()) == pytest.approx([0.0, 3000 * US], abs=1e-12)


def test_two_sends_paired_by_sequence_give_nothing_to_compute(tmp_path: Path) -> None:
    """1F1B's pair: stage 0 sends forward 1 while stage 1 sends backward 0, both the pair's
    second p2p. Read as one instance, stage 0's 1.5 ms send "waited" 1 ms for stage 1 (whose
    send started later and took 0.5 ms) and that went to stage 1's compute; and stage 1's
    recv of forward 0 gave its 1 ms wait to stage 0's compute. All of it is communication."""
    t = MiniTrace(rank=0, world_size=2)
    t.step(1, 0, 5000).kernel("fwd", 0, 1000)
    t.nccl(1000, 100, name=SENDRECV, stream=21, extra=_p2p("send"))
    t.nccl(1100, 1500, name=SENDRECV, stream=21, extra=_p2p("send"))
    t.write(tmp_path / "rank0.json")
    t = MiniTrace(rank=1, world_size=2)
    t.step(1, 0, 5000).kernel("bwd", 1200, 2000)
    t.nccl(0, 1100, name=SENDRECV, stream=22, extra=_p2p("recv"))
    t.nccl(1200, 500, name=SENDRECV, stream=21, extra=_p2p("send"))
    t.write(tmp_path / "rank1.json")
    run = run_of(tmp_path)
    expect(rank_steps(run, 0), compute=1000, communication=1600, idle=2400)
    expect(rank_steps(run, 1), compute=2000, communication=1100, idle=1900)
    assert run.steps["communication_wait"].sum() == 0.0


@pytest.mark.parametrize("virtual", [1, 2])
def test_breakdown_matches_the_rules_cut(pipeline_study: Any, virtual: int) -> None:
    """Every category of ``breakdown_s`` within 5% of the step of the truth at every measured N
    (the acceptance; measured: 0.00%, so 0.5% guards the rule), each rank's step to 1 ns.

    The study (virtual chunks 1: plain 1F1B, 2: interleaved; 4 stages, DP = 1, 2, 4: N = 4, 8,
    16; 32 microbatches per step, M / DP per replica; seed 1) is built and analyzed once per
    session (tests/pipeline_studies.py)."""
    pat, study, _, _ = pipeline_study(virtual)
    assert [r["world_size"] for r in study["runs"]] == list(pat.sizes)
    for run in study["runs"]:
        truth = breakdown(pat, run["world_size"] // pat.stages, seed=1)
        step = run["step_time_s"]["mean"]
        assert step == pytest.approx(truth["step_s"], abs=1e-9)
        off = {c: (run["breakdown_s"][c] - truth["breakdown_s"][c]) / step for c in CATEGORIES}
        assert max(map(abs, off.values())) <= 0.005, (run["world_size"], off)
        for r in run["per_rank"]:
            assert r["step_time_s"] == pytest.approx(truth["rank_step_s"][r["rank"]], abs=1e-9)
