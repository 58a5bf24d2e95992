"""Findings: biggest lever first with its gain, stragglers named, honest about slowdowns."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import tracescale
from tracescale.classify.stragglers import find_stragglers
from tracescale.findings import SLOWDOWN, top_findings
from tracescale.findings.common import short_name
from tracescale.simulate import make_params, simulate

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"
SHARED = ROOT.parent / "shared" / "traces"
RESNET = SHARED / "tb_plugin" / "resnet50_num_workers_0"
DATALOADER_OP = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _fixture(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((FIXTURES / f"study_{name}.json").read_text())
    return doc["studies"][0]


def test_levers_are_ranked_by_projected_gain_with_numbers() -> None:
    found = top_findings(_fixture("strong"))
    assert [f["category"] for f in found] == [
        "dataloader",
        "compute",
        "communication",
        "sync",
        "host",
    ]
    assert found[0]["text"] == (
        "Data loading takes 60.9 ms per step (43%) at 8 GPUs; it does not shrink with more "
        "GPUs (59.7 ms at 1 GPU). If it were taken off the critical path (DataLoader workers, "
        "prefetching), steps would be 2.02x faster (119.0 ms → 59.0 ms per step) at 32 GPUs "
        "(projected)."
    )
    assert found[0]["value"] == pytest.approx(119.0 / 59.0, rel=1e-3)
    gains = [f["value"] for f in found]
    assert gains == sorted(gains, reverse=True)


def test_levers_read_at_the_requested_n_or_at_most_4x_measured() -> None:
    study = _fixture("strong")  # measured up to 8; default projections 16, 32, 64
    assert "at 32 GPUs (projected)" in top_findings(study)[0]["text"]
    study["requested_world_sizes"] = [16, 32, 64]
    assert "at 64 GPUs (projected)" in top_findings(study)[0]["text"]


def test_single_run_levers_are_measured_and_projections_labelled() -> None:
    found = top_findings(_fixture("single"))
    assert found[0]["category"] == "dataloader"
    assert "at 4 GPUs (measured)" in found[0]["text"]
    assert all("projected" not in f["text"] for f in found)


def test_short_names_keep_what_identifies_a_kernel() -> None:
    assert short_name(
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel"
        "<at::native::TensorListMetadata<4>, float>(int, float*)"
    ) == ("at::native::(anon)::multi_tensor_apply_kernel<…>")
    assert short_name("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, ncclWork*)") == (
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
    )
    assert short_name("Memcpy HtoD (Pageable -> Device)") == "Memcpy HtoD (Pageable -> Device)"
    assert len(short_name("x" * 200)) == 60


def _rows(own: dict[int, list[float]], wait: dict[int, list[float]]) -> pd.DataFrame:
    """Per rank and step: compute = own time, communication = wait; duration = both."""
    rows = []
    for rank, values in own.items():
        for step, (o, w) in enumerate(zip(values, wait[rank], strict=True)):
            row = {c: 0.0 for c in tracescale.categories.CATEGORIES}
            row.update(compute=o, communication=w, duration=o + w, communication_wait=w)
            row.update(rank=rank, step=step, caused_compute=0.0)
            row.update(caused_memcpy=0.0, caused_dataloader=0.0)
            rows.append(row)
    return pd.DataFrame(rows)


def test_straggler_is_the_rank_whose_own_work_is_late() -> None:
    # Rank 2 computes 14 ms, the others 10 ms and wait 4 ms for it: every step takes 14 ms.
    own = {0: [0.010, 0.0101], 1: [0.0099, 0.010], 2: [0.014, 0.014], 3: [0.010, 0.010]}
    wait = {r: [0.014 - o for o in v] for r, v in own.items()}
    found = find_stragglers(_rows(own, wait))
    assert [(s["rank"], s["category"]) for s in found] == [(2, "compute")]
    assert found[0]["extra_s"] == pytest.approx(0.014 - 0.010025)
    quiet = {r: [0.010, 0.010] for r in range(4)}
    assert find_stragglers(_rows(quiet, {r: [0.0, 0.0] for r in range(4)})) == []


@pytest.fixture(scope="module")
def launch_bound(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Many short kernels, each shorter than its launch: the GPU waits for the host."""
    root = tmp_path_factory.mktemp("launch_bound")
    params = make_params(
        {"fwd_time": 0.004, "bwd_time": 0.008, "layers": 40, "launch_overhead": 1e-4}
    )
    simulate([1, 2, 4], root, steps=2, seed=0, params=params, compresslevel=1)
    return tracescale.analyze(str(root), jobs=1).studies[0]


def test_launch_bound_study_leads_with_host_launch_overhead(launch_bound: dict[str, Any]) -> None:
    first = launch_bound["findings"][0]
    assert first["category"] == "host"
    assert first["text"].startswith("Host launch overhead takes ")
    assert "`cudaLaunchKernel`" in first["text"]
    assert first["value"] > 2.0  # the gain, also in the text
    assert f"steps would be {first['value']:.2f}x faster" in first["text"]
    host_ops = launch_bound["runs"][-1]["top_ops"]["host"]
    assert host_ops[0]["name"] == "cudaLaunchKernel"
    assert host_ops[0]["law"]["flagged"]


def test_straggler_always_has_a_slot() -> None:
    study = _fixture("strong")
    late = {"rank": 5, "extra_s": 0.001, "category": "compute", "own_s": 0.1, "noise_s": 0.0}
    study["runs"][-1]["stragglers"] = [late]
    found = top_findings(study, limit=3)
    assert len(found) == 3 and found[-1]["kind"] == "straggler"
    assert found[-1]["text"].startswith("Rank 5 is a straggler at 8 GPUs")


def test_simulated_straggler_is_named(tmp_path: Path) -> None:
    params = make_params({"layers": 3, "zero_grad_kernels": 4, "straggler_rank": 3})
    simulate([2, 4], tmp_path, steps=3, seed=0, params=params, compresslevel=1)
    study = tracescale.analyze(str(tmp_path), jobs=1).studies[0]
    run4 = study["runs"][-1]
    assert [s["rank"] for s in run4["stragglers"]] == [3]
    assert run4["stragglers"][0]["category"] == "compute"
    assert study["runs"][0]["stragglers"] == []
    texts = [f["text"] for f in study["findings"] if f["kind"] == "straggler"]
    assert texts and texts[0].startswith("Rank 3 is a straggler at 4 GPUs: its own work takes")


def test_cpu_strong_sample_says_it_slows_down() -> None:
    study = tracescale.analyze(str(ROOT / "sample_traces" / "ddp_cpu_strong"), mode="strong")
    study_doc = study.studies[0]
    first = study_doc["findings"][0]
    assert first["kind"] == "slowdown"
    assert first["text"].startswith(SLOWDOWN + " (speedup 0.")
    sf = study_doc["scaling"]["serial_fraction"]
    assert 0.0 <= sf["total"] <= 1.0
    assert all(0.0 <= v <= 1.0 for v in sf["by_category"].values())
    assert all(0.0 <= v <= 1.0 for v in sf["ci90"])


@pytest.mark.skipif(not RESNET.is_dir(), reason=f"real traces not present at {RESNET}")
def test_resnet_without_workers_leads_with_data_loading() -> None:
    study = tracescale.analyze(str(RESNET), jobs=1).studies[0]
    first = study["findings"][0]
    assert first["category"] == "dataloader"
    assert f"`{DATALOADER_OP}` (100%)" in first["text"]
    assert "(measured)" in first["text"]
    assert "If the parallel part scales as 1/N (an assumption" in first["text"]
    ops = study["runs"][0]["top_ops"]["dataloader"]
    assert ops[0]["name"] == DATALOADER_OP


def test_findings_on_empty_study() -> None:
    assert top_findings({}) == []
    assert top_findings({"runs": [{"world_size": 1}]}) == []


def test_model_optimum_beyond_four_times_measured_is_labelled() -> None:
    study = _fixture("strong")
    study["scaling"]["optimal_world_size"] = 48
    texts = [f["text"] for f in top_findings(study, limit=10)]
    assert (
        "The model puts the lowest step time at 48 GPUs, 6x beyond the largest measured N: "
        "an extrapolation, not a measurement."
    ) in texts
    study["scaling"]["optimal_world_size"] = 24
    texts = [f["text"] for f in top_findings(study, limit=10)]
    assert "Step time is lowest at 24 GPUs: beyond it, more GPUs make each step slower." in texts


def test_op_shares_name_their_basis_when_it_is_not_the_category_figure() -> None:
    """Shares of communication on the ranks' own timelines (incl. waits) are not shares of
    the attributed 1.0 ms: the clause says of what they are."""
    from tracescale.findings.common import names_clause

    op = {"name": "record_param_comms", "seconds": 0.0028, "share": 0.75, "category_s": 0.0037}
    run = {"breakdown_s": {"communication": 0.0010}, "top_ops": {"communication": [op]}}
    clause = names_clause(run, "communication")
    assert clause == (
        ", mostly `record_param_comms` (75%) of its 3.7 ms on the ranks' own timelines "
        "(incl. waits)"
    )
    run["breakdown_s"]["communication"] = 0.0036
    assert names_clause(run, "communication") == ", mostly `record_param_comms` (75%)"


def _projected_study(comm: float, compute: float, variability: float) -> dict[str, Any]:
    """Two measured runs and one requested projection at N=64 with the given breakdown."""

    def run(n: int, step: float) -> dict[str, Any]:
        bd = {"compute": step * 0.9, "communication": step * 0.1}
        return {"world_size": n, "step_time_s": {"mean": step}, "breakdown_s": bd}

    step = comm + compute + 0.001
    proj = {
        "world_size": 64,
        "step_time_s": step,
        "breakdown_s": {"communication": comm, "compute": compute, "host": 0.001},
        "rank_to_rank_variability_s": variability,
    }
    return {
        "mode": "strong",
        "runs": [run(1, 0.1), run(8, 0.02)],
        "requested_world_sizes": [64],
        "scaling": {"projections": [proj]},
    }


def test_hiding_communication_is_capped_by_the_compute_to_hide_it_under() -> None:
    """24 ms of communication cannot hide under 2 ms of compute: at most 2 ms is gained."""
    study = _projected_study(comm=0.024, compute=0.002, variability=0.0)
    comm = [f for f in top_findings(study, limit=10) if f["category"] == "communication"]
    assert comm and all(f["value"] == pytest.approx(0.027 / 0.025) for f in comm)
    assert "at most the 2.0 ms of compute there" in comm[0]["text"]


def test_rank_to_rank_variability_is_its_own_lever_not_communication() -> None:
    """Waiting for the slowest rank (20 of 24 ms of communication) is its own finding; the
    communication lever only hides the remaining 4 ms."""
    study = _projected_study(comm=0.024, compute=0.010, variability=0.020)
    found = top_findings(study, limit=10)
    var = [f for f in found if f["text"].startswith("Rank-to-rank variability")]
    assert var and var[0]["value"] == pytest.approx(0.035 / 0.015)
    assert "waits 20.0 ms for the slowest rank" in var[0]["text"]
    comm = [f for f in found if f["kind"] == "lever" and f not in var]
    comm = [f for f in comm if f["category"] == "communication"]
    assert comm and comm[0]["value"] == pytest.approx(0.035 / 0.031)
    assert found[0] is var[0]


def test_optimum_is_the_replayed_projection_not_the_closed_form() -> None:
    """The closed form says 12, the replayed curve the report prints is lowest at 16."""
    study = _fixture("strong")
    study["scaling"]["optimal_world_size"] = 12
    curve = [(8, 0.0255, 0.0255), (16, 0.0173, 0.0227), (32, 0.0197, 0.0367)]
    study["scaling"]["curve"] = [
        {"world_size": n, "step_time_s": t, "closed_form_step_time_s": c} for n, t, c in curve
    ]
    texts = [f["text"] for f in top_findings(study, limit=10)]
    assert "Step time is lowest at 16 GPUs: beyond it, more GPUs make each step slower." in texts
    assert not any("12 GPUs" in t for t in texts)
    # Still falling at the curve's last point: no optimum is claimed.
    study["scaling"]["curve"][-1]["step_time_s"] = 0.015
    texts = [f["text"] for f in top_findings(study, limit=10)]
    assert not any("lowest at" in t for t in texts)


def test_no_straggler_from_a_single_step() -> None:
    """One step per rank: the noise is unknown, so a rank above the median is not named."""
    own = {0: [0.010], 1: [0.0099], 2: [0.014], 3: [0.010]}
    wait = {r: [0.014 - o for o in v] for r, v in own.items()}
    assert find_stragglers(_rows(own, wait)) == []


def test_host_time_no_op_owns_is_said_to_be_untraced() -> None:
    from tracescale.findings.common import names_clause

    run: dict[str, Any] = {"breakdown_s": {"host": 0.047}, "top_ops": {"compute": []}}
    assert names_clause(run, "host") == (
        ", not inside any traced op (untraced Python or CPU work between ops)"
    )


def test_straggler_gain_runs_from_the_step_less_its_extra_to_the_median_rank() -> None:
    """In line, the late rank loses its extra own time and may lose its waits for others'
    work too (they overlap what the others then do): both ends are said, the cautious one
    ranks. Simulated truth for this shape: 69.8 ms with rank 3 at 1.5x, 55.3 ms without."""
    late = {"rank": 3, "extra_s": 0.0106, "category": "compute", "median_own_s": 0.0553}
    run = {
        "world_size": 4,
        "step_time_s": {"mean": 0.0698},
        "breakdown_s": {"compute": 0.0698},
        "stragglers": [late],
    }
    found = [f for f in top_findings({"runs": [run]}, limit=10) if f["kind"] == "straggler"]
    assert found[0]["text"] == (
        "Rank 3 is a straggler at 4 GPUs: its own work takes 10.6 ms more per step than the "
        "median rank's, mostly compute; the other ranks wait for it. In line with the median "
        "rank, steps would be 1.18x to 1.26x faster (69.8 ms → 55.3 ms to 59.2 ms per step: at "
        "least the median rank's own work, at most the step less its extra)."
    )
    assert found[0]["value"] == pytest.approx(0.0698 / 0.0592)
    late["median_own_s"] = 0.0590  # no wider than 1%: one figure
    found = [f for f in top_findings({"runs": [run]}, limit=10) if f["kind"] == "straggler"]
    assert found[0]["text"].endswith("steps would be 1.18x faster (69.8 ms → 59.2 ms per step).")
