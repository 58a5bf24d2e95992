"""The replay's array building blocks against their one-at-a-time definitions: the greedy
leaf rule, the innermost op, and the compiled replay pass against the plain Python one."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from tracescale import compiled as compiled_loops
from tracescale.classify.rank import classify_rank
from tracescale.classify.rules import load_rules
from tracescale.ingest import load_trace
from tracescale.ingest.steps import find_steps
from tracescale.replay.engine import schedule as engine
from tracescale.replay.graph import host as graph_host
from tracescale.replay.graph.build import build_graph
from tracescale.replay.graph.host import _kept_leaves, innermost, thread_pieces


def _greedy(s: list[int], e: list[int], cursor: int) -> list[bool]:
    out = []
    for a, z in zip(s, e, strict=True):
        out.append(a >= cursor)
        if a >= cursor:
            cursor = z
    return out


@pytest.mark.parametrize("seed", range(30))
def test_kept_leaves_is_the_greedy_rule(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 40))
    s = np.sort(rng.integers(0, 200, n)).astype(np.int64)
    e = s + rng.integers(0, 60 if seed % 2 else 5, n)  # odd seeds: long leaves overlap a lot
    cursor = int(rng.integers(-5, 20))
    assert _kept_leaves(s, e, cursor).tolist() == _greedy(s.tolist(), e.tolist(), cursor)


def test_kept_leaves_when_a_nested_leaf_outlasts_its_parent() -> None:
    # 0-10 kept, 2-30 nested (skipped) though it ends later, 12-14 kept: a running maximum
    # of all ends would wrongly skip it.
    s = np.array([0, 2, 12], dtype=np.int64)
    e = np.array([10, 30, 14], dtype=np.int64)
    assert _kept_leaves(s, e, 0).tolist() == [True, False, True]


@pytest.mark.parametrize("compiled", [True, False])
def test_innermost_is_the_latest_started_open_op(
    compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not compiled:
        monkeypatch.setattr(graph_host, "_compiled_walk", None)
    elif graph_host._compiled_walk is None or not graph_host._compiled_walk.available():
        pytest.skip("numba is not installed: only the Python walk runs here")
    else:
        monkeypatch.setattr(compiled_loops, "MIN_ELEMENTS", 0)  # compile even this tiny walk
    # ops (sorted by start, longer first): A 0-100, B 10-50, C 10-20, D 60-70
    st = np.array([0, 10, 10, 60], dtype=np.int64)
    en = np.array([100, 50, 20, 70], dtype=np.int64)
    q = np.array([-1, 5, 10, 15, 20, 30, 55, 65, 70, 99, 100], dtype=np.int64)
    assert innermost(st, en, q).tolist() == [-1, 0, 2, 2, 1, 1, 0, 3, 0, 0, -1]
    assert innermost(st[:0], en[:0], q).tolist() == [-1] * len(q)


def test_thread_pieces_cut_gaps_at_op_boundaries() -> None:
    # calls 10-12 and 12-20 (an empty gap between them), an op 0-15 and 30-40, thread to 50
    p = thread_pieces(
        np.array([10, 12], np.int64), np.array([12, 20], np.int64), np.array([7, 8], np.int64),
        0, 50, np.array([0, 30], np.int64), np.array([15, 40], np.int64),
        np.array([3, 4], np.int64), np.zeros(0, np.int64),
    )  # fmt: skip
    assert list(zip(p.start.tolist(), p.end.tolist(), strict=True)) == [
        (0, 10), (10, 12), (12, 12), (12, 20), (20, 30), (30, 40), (40, 50),
    ]  # fmt: skip
    assert p.event.tolist() == [-1, 7, -1, 8, -1, -1, -1]
    assert p.op.tolist() == [3, -1, 3, -1, -1, 4, -1]


def test_compiled_replay_equals_the_python_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if engine._compiled is None or not engine._compiled.available():
        pytest.skip("numba is not installed: only the Python pass runs here")
    monkeypatch.setattr(compiled_loops, "MIN_ELEMENTS", 0)  # compile even this small graph
    from tracescale.simulate import make_params, simulate

    simulate([2], tmp_path, steps=3, seed=2, params=make_params({"layers": 6}))
    path = str(next((tmp_path / "ws2").glob("*.json.gz")))
    trace = load_trace(path)
    g = build_graph(trace, find_steps(trace), classify_rank(trace, load_rules()).collectives)
    scaled = g.dur / 1e9 * np.linspace(0.3, 2.0, len(g))
    fast = [engine.replay(g), engine.replay(g, scaled)]
    monkeypatch.setattr(engine, "_compiled", None)
    slow = [engine.replay(g), engine.replay(g, scaled)]
    for a, b in zip(fast, slow, strict=True):
        assert np.array_equal(a.start, b.start) and np.array_equal(a.end, b.end)
        assert np.array_equal(a.step_time, b.step_time)


def test_replay_reads_the_rank_as_vetted_by_the_map_step(tmp_path: Path) -> None:
    """A kernel of two days, which the map step drops, is no node the replayed step waits for:
    replay_error is that of the same trace without it."""
    import gzip
    import json

    from tracescale.pipeline import analyze
    from tracescale.simulate import make_params, simulate

    simulate([1], tmp_path / "s", steps=3, seed=3, params=make_params({"layers": 4}))
    src = next((tmp_path / "s" / "ws1").glob("*.json.gz"))
    doc = json.loads(gzip.decompress(src.read_bytes()))
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    for name, extra in (("plain", []), ("absurd", [{**kernel, "dur": 2 * 86400e6}])):
        d = tmp_path / name
        d.mkdir()
        (d / "rank0.json").write_text(
            json.dumps({**doc, "traceEvents": doc["traceEvents"] + extra})
        )
    errors = [
        analyze(str(tmp_path / name / "rank0.json"), no_cache=True).studies[0]["runs"][0][
            "replay_error"
        ]
        for name in ("plain", "absurd")
    ]
    assert errors[0] == errors[1] and errors[0] <= 0.02


def test_small_graphs_replay_without_compiling(monkeypatch: pytest.MonkeyPatch) -> None:
    """Below MIN_ELEMENTS (summed over calls) the plain loop runs: no numba import."""
    monkeypatch.setattr(compiled_loops, "numba_loaded", lambda: False)
    loop = compiled_loops.Compiled(lambda: None, weight=0.5)
    half = compiled_loops.MIN_ELEMENTS // 2
    assert loop.get(half) is None and loop.get(half) is None and loop.get(half) is None
    assert not loop._done  # numba not even looked for: 1.5 x MIN_ELEMENTS at weight 0.5
    loop.get(half)  # the calls so far add up to MIN_ELEMENTS
    assert loop._done


def test_once_numba_is_loaded_a_loop_compiles_early(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where this process already loaded numba (the scanner, another loop), a loop runs
    compiled from LOADED_MIN_ELEMENTS: one more cached loop costs milliseconds there."""
    monkeypatch.setattr(compiled_loops, "numba_loaded", lambda: True)
    loop = compiled_loops.Compiled(lambda: None)
    assert loop.get(compiled_loops.LOADED_MIN_ELEMENTS - 1) is None and not loop._done
    assert loop.get(1) is not None and loop._done


def test_numba_counts_as_loaded_once_a_loop_was_handed_out_compiled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(compiled_loops, "_HANDED_OUT", [False])
    monkeypatch.setitem(sys.modules, "tracescale.ingest.fast", None)
    assert not compiled_loops.numba_loaded()
    loop = compiled_loops.Compiled(lambda: None)
    loop.get(compiled_loops.MIN_ELEMENTS)
    assert compiled_loops.numba_loaded()
