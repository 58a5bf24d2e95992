"""What-if scenarios as graph transformations: node categories, the rescaled replay, the
closed form kept where the graph cannot express a factor."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.independent.gen import PATTERNS, build_study, true_step
from tests.minitrace import MiniTrace
from tracescale.api import analyze
from tracescale.categories import CATEGORIES
from tracescale.classify.rank import classify_rank
from tracescale.classify.rules import load_rules
from tracescale.ingest import load_trace
from tracescale.ingest.steps import find_steps
from tracescale.replay.graph.build import KIND_NAMES, build_graph
from tracescale.replay.whatif.scenario import node_categories, unreplayable


def test_each_node_gets_the_category_classify_gives_its_time(tmp_path: Path) -> None:
    t = MiniTrace()
    for k in range(2):
        o = 200 * k
        t.step(k, o, 100).dataloader(o, 30).host("aten::stack", o + 5, 20)
        t.kernel("gemm", o + 32, 38, launch=o + 31)
        t.runtime("cudaStreamSynchronize", o + 35, 35).annotation("reduce_metrics", o + 70, 20)
    trace = load_trace(str(t.write(tmp_path / "t.json")))
    rules = load_rules()
    g = build_graph(trace, find_steps(trace), classify_rank(trace, rules).collectives, rules)
    first = g.start < 200_000  # the first step's nodes (ns)
    cols = (g.kind[first], g.group[first], g.dur[first], g.category[first])
    got = [
        (KIND_NAMES[k], g.groups[gr], int(d) // 1000, CATEGORIES[c])
        for k, gr, d, c in zip(*cols, strict=True)
    ]
    loader = "gap:enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    assert got == [
        ("gap", loader, 5, "dataloader"),
        ("gap", "gap:aten::stack", 20, "dataloader"),  # nested in the loader: its time
        ("gap", loader, 5, "dataloader"),
        ("gap", "gap:ProfilerStep", 1, "idle"),  # nothing traced: idle, as classify has it
        ("call", "call:cudaLaunchKernel", 0, "host"),
        ("gap", "gap:ProfilerStep", 4, "idle"),
        ("sync", "call:cudaStreamSynchronize", 35, "sync"),
        ("gap", "gap:reduce_metrics", 20, "reduction"),
        ("gap", "gap:ProfilerStep", 10, "idle"),
        ("gap", "gap:", 100, "idle"),  # between the steps
        ("device", "kernel:gemm", 38, "compute"),
    ]
    # after the sync returns, until the next launch: sync for the what-ifs, as classify has it
    assert CATEGORIES[int(node_categories(g)[first][8])] == "sync"


def test_factors_the_graph_cannot_express_are_refused() -> None:
    assert unreplayable({"compute": 0.5, "dataloader": 0.0, "host": 2.0}) is None
    assert unreplayable({"sync": 0.0, "communication": 0.0}) is None
    assert unreplayable({"sync": 1.0, "idle": 1.0}) is None
    assert unreplayable({"sync": 0.5}) is None
    assert "no node of its own" in str(unreplayable({"idle": 0.0}))


def _sync_study(root: Path) -> None:
    """Each step: launch a kernel (10 ms at N=1, 5 ms at N=2), wait for it in
    cudaDeviceSynchronize, then 5 ms of host work that needs nothing from the GPU."""
    for n, kernel_us in ((1, 10_000), (2, 5_000)):
        for r in range(n):
            t = MiniTrace(rank=r, world_size=n)
            for s in range(4):
                o = s * 20_000
                t.step(s, o, 6_000 + kernel_us)
                t.kernel("gemm", o + 1_000, kernel_us, launch=o + 1_000)
                t.runtime("cudaDeviceSynchronize", o + 1_000, kernel_us)
                t.host("aten::add", o + 1_000 + kernel_us, 5_000)
            t.write(root / f"{n}gpus" / f"rank{r}.json")


def test_sync_scales_the_host_time_classify_calls_sync(tmp_path: Path) -> None:
    _sync_study(tmp_path)
    what_if = {"sync": 0.0, "compute": 0.5, "idle": 0.0}
    doc = analyze(tmp_path, project=[4], what_if=what_if, jobs=1, no_cache=True).to_dict()
    sc = doc["studies"][0]["scaling"]
    # at N=4 the kernel takes 2.5 ms: 1 ms + 2.5 ms waited for + 5 ms of host work
    assert sc["projections"][0]["step_time_s"] == pytest.approx(8.5e-3, rel=1e-9)
    got = {w["scenario"]: w for w in sc["what_if"]}
    assert got["sync=0"]["projections_source"] == "replay"
    # the wait for the kernel is the kernel's time and stays (1 ms + 2.5 ms); the 5 ms of
    # host work after the sync returns, before the next launch, is sync time and goes
    assert got["sync=0"]["projections"][0]["step_time_s"] == pytest.approx(3.5e-3, rel=1e-9)
    assert got["compute=0.5"]["projections"][0]["step_time_s"] == pytest.approx(7.25e-3, rel=1e-9)
    # idle has no node: the combination with it is refused, and says why
    assert got["sync=0, compute=0.5, idle=0"]["projections_source"] == "refused"
    assert got["idle=0"]["projections"] == [] and got["idle=0"]["serial_fraction"] is None
    assert "idle" in got["idle=0"]["projections_source_reason"]
    assert got["sync=0"]["serial_fraction_source"] == "replay"
    closed = got["sync=0"]["projections"][0]["closed_form_step_time_s"]
    assert closed > 0  # the closed form is kept beside, labelled


def test_a_free_loader_also_removes_the_waits_for_the_slowest_loader(tmp_path: Path) -> None:
    """Heavy-tailed per-rank loading: at N=16..64 most of the step is waiting for the slowest
    rank's loader, time the classify stage calls sync/communication. ``dataloader=0`` through
    the replay removes both, as the same job without a loader shows."""
    p = replace(PATTERNS["heavy_tail"](), layers=4, steps=10, truth_steps=200)
    build_study(p, str(tmp_path), seed=1)
    no_loader = replace(p, load=0.0, tail=0.0)
    doc = analyze(
        tmp_path, project=list(p.targets), what_if={"dataloader": 0.0}, jobs=1, no_cache=True
    ).to_dict()
    (scenario,) = doc["studies"][0]["scaling"]["what_if"]
    assert scenario["projections_source"] == "replay"
    for proj in scenario["projections"]:
        n = int(proj["world_size"])
        truth = true_step(no_loader, n, 1)
        assert proj["step_time_s"] == pytest.approx(truth, rel=0.05), n
        assert proj["ci90"][0] <= truth <= proj["ci90"][1]
