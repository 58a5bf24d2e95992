"""The autograd engine's backward thread in the replay: handed over by the main thread and
waited for by it (exact, on a tiny hand-written trace)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.minitrace import MiniTrace
from tracescale.categories import CATEGORIES
from tracescale.classify.rank import classify_rank
from tracescale.classify.rules import load_rules
from tracescale.ingest import load_trace
from tracescale.ingest.steps import find_steps
from tracescale.replay.engine.schedule import measured_step_times, replay
from tracescale.replay.graph.build import Graph, build_graph
from tracescale.replay.waits.backward_thread import backward_thread_edges

BWD_TID = 2
STEP_US = 8600.0


def _trace(path: Path) -> Path:
    """Per step: 1 ms loader, 3 ms forward, 4 ms backward on the autograd thread while the
    main thread waits (nothing recorded), 0.5 ms optimizer."""
    t = MiniTrace()
    for s in range(3):
        o = s * STEP_US
        t.step(s, o, STEP_US).dataloader(o, 1000)
        t.host("aten::mm", o + 1000, 3000).runtime("cudaLaunchKernel", o + 1100, 10)
        t.host("autograd::engine::evaluate_function: MmBackward0", o + 4010, 4000, tid=BWD_TID)
        t.host("cudaLaunchKernel", o + 4100, 10, cat="cuda_runtime", tid=BWD_TID)
        t.host("aten::mm", o + 4200, 100, tid=BWD_TID)  # a pause between two functions
        t.host("torch::autograd::AccumulateGrad", o + 4400, 3610, tid=BWD_TID)
        t.host("cudaLaunchKernel", o + 8000, 10, cat="cuda_runtime", tid=BWD_TID)
        t.annotation("Optimizer.step#SGD.step", o + 8020, 500)
        t.runtime("cudaLaunchKernel", o + 8100, 10)
    return t.write(path / "rank0.json")


def _graph(path: Path) -> Graph:
    trace = load_trace(str(_trace(path)))
    rules = load_rules()
    coll = classify_rank(trace, rules).collectives
    return build_graph(trace, find_steps(trace), coll, rules)


def test_measured_timeline_replays_exactly_with_the_edges(tmp_path: Path) -> None:
    raw = _graph(tmp_path)
    g, waits = backward_thread_edges(raw)
    assert waits == 3  # one main-thread wait in backward() per step
    assert np.allclose(replay(g).step_time, measured_step_times(raw), rtol=1e-12)
    assert replay(g).step_time == pytest.approx([STEP_US / 1e6] * 3)


def test_data_loading_removed_shortens_every_step_by_its_time(tmp_path: Path) -> None:
    raw = _graph(tmp_path)
    g, _ = backward_thread_edges(raw)
    loader = g.category == CATEGORIES.index("dataloader")
    dur = np.where(loader, 0, g.dur) / 1e9
    assert replay(g, dur).step_time == pytest.approx([(STEP_US - 1000) / 1e6] * 3, abs=1e-9)


def test_a_faster_backward_ends_the_main_threads_wait_sooner(tmp_path: Path) -> None:
    raw = _graph(tmp_path)
    g, _ = backward_thread_edges(raw)
    bwd = (g.kind == 0) & np.array([n == "gap:torch::autograd::AccumulateGrad" for n in g.groups])[
        g.group
    ]
    assert g.dur[bwd].tolist() == [3_600_000] * 3
    dur = np.where(bwd, g.dur // 2, g.dur) / 1e9
    assert STEP_US / 1e6 - replay(g, dur).step_time == pytest.approx([1.8e-3] * 3, abs=1e-9)
    # as measured, the main thread's wait keeps its length: a faster backward saved nothing
    dur = np.where(bwd, raw.dur // 2, raw.dur) / 1e9
    assert replay(raw, dur).step_time == pytest.approx([STEP_US / 1e6] * 3, abs=1e-9)
