"""CUDA graphs: kernels whose correlation points at one ``cudaGraphLaunch`` are device work,
replayed as one launched unit, each graph node after the node it followed on the device.

The simulator's ``cuda_graph`` modifier gives the truth (its own event schedule, with a device
gap between graph nodes); the shared HTA traces that hold graph launches check real files.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from tracescale.classify.rank import classify_rank
from tracescale.classify.rules import load_rules
from tracescale.ingest import load_trace
from tracescale.ingest.steps import find_steps
from tracescale.pipeline import analyze
from tracescale.replay.engine import schedule as engine
from tracescale.replay.graph import build as graph_mod
from tracescale.replay.graph.build import DEV, Graph, build_graph
from tracescale.simulate import pattern_params, simulate

#: (pattern, seed, parameter overrides): bases under a graph, gaps from 1 to 3 us
CASES = [
    ("ddp,cuda_graph", 0, {"layers": 32}),
    ("fsdp,cuda_graph", 1, {"layers": 8, "graph_gap": 3e-6}),
    ("tp,cuda_graph", 2, {"layers": 8, "graph_gap": 1e-6, "graph_launch": 60e-6}),
]
SIZES = [1, 2, 4]
TARGETS = [8, 16, 32]


def _graph_of(path: Path) -> Graph:
    trace = load_trace(str(path))
    coll = classify_rank(trace, load_rules()).collectives
    return build_graph(trace, find_steps(trace), coll)


def _study(tmp_path: Path, pattern: str, seed: int, sets: dict[str, float | int]) -> dict:  # type: ignore[type-arg]
    return simulate(
        SIZES, tmp_path, pattern=pattern, seed=seed, truth_at=TARGETS,
        params=pattern_params(pattern, sets), compresslevel=1,
    )  # fmt: skip


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """Function: a case's (folder, truth), simulated once for the module (the pinned-projection
    test reads the ddp case's traces, which its own case analyzes too; neither writes there)."""
    done: dict[str, tuple[Path, dict]] = {}  # type: ignore[type-arg]

    def get(pattern: str, seed: int, sets: dict[str, float | int]) -> tuple[Path, dict]:  # type: ignore[type-arg]
        key = repr((pattern, seed, sorted(sets.items())))
        if key not in done:
            where = tmp_path_factory.mktemp("graph")
            done[key] = (where, _study(where, pattern, seed, sets))
        return done[key]

    return get


@pytest.mark.parametrize(("pattern", "seed", "sets"), CASES)
def test_graph_study_attribution_replay_and_projection(
    simulated, pattern: str, seed: int, sets: dict[str, float | int]
) -> None:
    where, truth = simulated(pattern, seed, sets)
    entry = analyze(str(where), jobs=1, no_cache=True, project=TARGETS).studies[0]
    for run in entry["runs"]:
        true = truth["runs"][str(run["world_size"])]
        assert run["replay_error"] <= 0.01, (pattern, run["world_size"])
        for cat, sec in run["breakdown_s"].items():
            assert abs(sec - true["breakdown"][cat]) <= 0.05 * true["step_time"], (cat, run)
    for k, proj in zip((2, 4, 8), entry["scaling"]["projections"], strict=True):
        true = truth["speedup"][str(proj["world_size"])]
        assert abs(proj["speedup"] / true - 1) <= (0.10 if k <= 4 else 0.15), (pattern, k)
        lo, hi = proj["speedup_ci90"]
        assert lo <= true <= hi, (pattern, k, lo, true, hi)


def test_graph_kernels_share_the_launch_and_follow_each_other(simulated) -> None:
    """As Kineto writes a graph replay: every graph kernel carries the cudaGraphLaunch's
    correlation and has no launch of its own; the replay links each one after the graph node
    before it on its stream, with the device gap as its lag, not its offset from the launch."""
    where, _ = simulated("ddp,cuda_graph", 3, {"layers": 8})
    path = next((where / "ws2").glob("*.json.gz"))
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    launches = {e["args"]["correlation"] for e in events if e["name"] == "cudaGraphLaunch"}
    graphed = [e for e in events if e.get("cat") == "kernel"
               and e["args"].get("correlation") in launches]  # fmt: skip
    assert len(launches) == 5 and len(graphed) == 5 * (7 * 8 + 4)  # layers x 7 + 4 buckets
    g = _graph_of(path)
    dev = g.kind >= DEV
    chained = dev & (g.dep >= 0) & dev[np.clip(g.dep, 0, None)]
    # every graph node but the first of each launch (5 steps): the first collective follows
    # the kernel whose gradients it reduces, on the other stream
    assert int(chained.sum()) == len(graphed) - 5
    assert np.all(g.lag[chained] == 2_000)


def test_without_the_graph_chains_the_projection_is_pinned(
    simulated, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The defect this replaces: each graph kernel's offset from the launch kept as its launch
    latency pins the graph to its measured timing, and the projection falls far short."""
    where, truth = simulated("ddp,cuda_graph", 0, {"layers": 32})
    monkeypatch.setattr(
        graph_mod, "chain_graph_nodes", lambda t, d, idx, corr, first: np.zeros(len(idx), bool)
    )
    entry = analyze(str(where), jobs=1, no_cache=True, project=TARGETS).studies[0]
    last = entry["scaling"]["projections"][-1]
    assert last["speedup"] / truth["speedup"]["32"] - 1 < -0.2


@pytest.mark.parametrize(
    "rel",
    ["hta/negative_queue_length_values_check/rank0.json.gz", "hta/trace_diff/test/test.json.gz"],
)
def test_public_graph_traces_replay_and_count_graph_kernels_as_device_work(
    shared_traces: Path, rel: str
) -> None:
    path = shared_traces / rel
    if not path.is_file():
        pytest.skip(f"{rel} not in the shared traces")
    trace = load_trace(str(path))
    ev = trace.events
    names = np.array(trace.strings, dtype=object)
    launch = (~ev.is_device) & (names[ev.name] == "cudaGraphLaunch")
    corr = set(ev.correlation[launch].tolist())
    graphed = ev.is_device & np.isin(ev.correlation, list(corr)) & (ev.stream >= 0)
    assert graphed.sum() > 100
    coll = classify_rank(trace, load_rules()).collectives
    g = build_graph(trace, find_steps(trace), coll)
    measured = engine.measured_step_times(g)
    replayed = engine.replay_steps(g)
    assert np.max(np.abs(replayed / measured - 1)) <= 0.01
    from tracescale.categories import CATEGORIES

    device_cats = {CATEGORIES.index(c) for c in ("compute", "memcpy", "communication")}
    dev = g.kind >= DEV
    chained = dev & (g.dep >= 0) & dev[np.clip(g.dep, 0, None)]  # graph nodes after a node
    assert chained.sum() > 0.5 * graphed.sum()
    assert set(np.unique(g.category[chained]).tolist()) <= device_cats


def test_hip_graph_launches_chain_as_cuda_ones(simulated, tmp_path: Path) -> None:
    """ROCm writes hipGraphLaunch: the same graph, the same chains."""
    where, _ = simulated("ddp,cuda_graph", 3, {"layers": 8})
    path = next((where / "ws2").glob("*.json.gz"))
    doc = json.loads(gzip.decompress(path.read_bytes()))
    for e in doc["traceEvents"]:
        if e.get("name") == "cudaGraphLaunch":
            e["name"] = "hipGraphLaunch"
    hip = tmp_path / "hip.json.gz"
    hip.write_bytes(gzip.compress(json.dumps(doc).encode()))
    a, b = _graph_of(path), _graph_of(hip)
    assert np.array_equal(a.dep, b.dep) and np.array_equal(a.lag, b.lag)
    assert np.array_equal(engine.replay_steps(a), engine.replay_steps(b))
    assert int((b.lag == 2_000).sum()) > 250
