"""The plain replay passes over a graph's program (``schedule._plain_pass`` and
``_anchored_pass``) against the reference pass ``schedule._pass`` (the one numba compiles):
the same start and end of every node, bit for bit, with rescaled durations, waits before
nodes and anchors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tracescale.classify.rank import classify_rank
from tracescale.classify.rules import load_rules
from tracescale.ingest import load_trace
from tracescale.ingest.steps import find_steps
from tracescale.replay.engine import schedule as engine
from tracescale.replay.graph.build import DCOLL, SYNC, Graph, build_graph


def _reference(
    g: Graph, d: np.ndarray, pre: np.ndarray, anchor: np.ndarray, off: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    n = len(g)
    t0 = float(g.start.min())
    order, kind, res, dep, dep2 = (c.tolist() for c in (g.order, g.kind, g.res, g.dep, g.dep2))
    lag, fixed, tail = (c.tolist() for c in (g.lag / 1e9, g.fixed / 1e9, g.tail / 1e9))
    release = ((g.release - t0) / 1e9).tolist()
    start, end = [0.0] * n, [0.0] * n
    n_res = int(g.res.max()) + 1
    engine._pass(
        order, kind, res, dep, dep2, d.tolist(), lag, fixed, tail, release, pre.tolist(),
        anchor.tolist(), off.tolist(), [0.0] * n, start, end, [-1e18] * n_res,
        engine.absorbing(g).tolist(),
    )  # fmt: skip
    return np.array(start), np.array(end)


@pytest.fixture(scope="module")
def graph(tmp_path_factory: pytest.TempPathFactory) -> Graph:
    from tracescale.simulate import make_params, simulate

    out: Path = tmp_path_factory.mktemp("plain_pass")
    simulate([2], out, steps=3, seed=5, params=make_params({"layers": 6}))
    path = str(next((out / "ws2").glob("*.json.gz")))
    trace = load_trace(path)
    return build_graph(trace, find_steps(trace), classify_rank(trace, load_rules()).collectives)


def test_the_graph_has_syncs_and_device_collectives(graph: Graph) -> None:
    assert (graph.kind == SYNC).any() and (graph.kind == DCOLL).any()
    assert (graph.dep2[graph.kind == SYNC] >= 0).any()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_plain_passes_equal_the_reference_pass(
    graph: Graph, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine, "_compiled", None)
    rng = np.random.default_rng(seed)
    n = len(graph)
    d = graph.dur / 1e9 * rng.uniform(0.2, 3.0, n)
    pre = np.where(rng.random(n) < 0.1, rng.uniform(0.0, 1e-3, n), 0.0)
    none, zeros = np.full(n, -1, np.int64), np.zeros(n)
    got = engine.replay(graph, d, pre)
    want = _reference(graph, d, pre, none, zeros)
    assert np.array_equal(got.start, want[0]) and np.array_equal(got.end, want[1])
    anchor = none.copy()
    at = rng.choice(n, size=max(n // 10, 1), replace=False)
    anchor[at] = rng.integers(0, n, len(at))
    off = rng.uniform(0.0, 2e-3, n)
    got = engine.replay(graph, d, pre, anchor, off)
    want = _reference(graph, d, pre, anchor, off)
    assert np.array_equal(got.start, want[0]) and np.array_equal(got.end, want[1])
    # measured durations, no waits: the graph's own replay
    got = engine.replay(graph)
    want = _reference(graph, graph.dur / 1e9, zeros, none, zeros)
    assert np.array_equal(got.start, want[0]) and np.array_equal(got.end, want[1])


def test_replaying_again_reads_the_same_program(graph: Graph) -> None:
    first = engine.replay(graph)
    again = engine.replay(graph)
    assert np.array_equal(first.end, again.end)
    assert engine._STATIC[id(graph)][0]() is graph


def test_the_view_pass_of_large_graphs_gives_the_same_numbers(
    graph: Graph, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine, "_compiled", None)
    rng = np.random.default_rng(7)
    d = graph.dur / 1e9 * rng.uniform(0.5, 2.0, len(graph))
    lists = engine.replay(graph, d)
    monkeypatch.setattr(engine, "LIST_NODES", 0)  # this graph replayed as a large one is
    views = engine.replay(graph, d)
    assert np.array_equal(lists.start, views.start) and np.array_equal(lists.end, views.end)
