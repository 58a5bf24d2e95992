"""A PyTorch execution trace's data dependencies in the replay graph: an op waits for the op on
another thread that wrote the tensor it reads (exact, on tiny hand-written Kineto + ET pairs),
and an ET that cannot be used is one line."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tracescale.classify.rank import classify_rank
from tracescale.classify.rules import load_rules
from tracescale.ingest import load_trace
from tracescale.ingest.discover import discover
from tracescale.ingest.execution_trace import read_dependencies
from tracescale.ingest.steps import find_steps
from tracescale.replay.engine.schedule import measured_step_times, replay
from tracescale.replay.graph.build import Graph, build_graph
from tracescale.replay.waits.et_edges import et_edges

PID, MAIN, SIDE = 100, 1, 2
STEP_US = 1000.0
STEPS = 3


def _x(name: str, ts: float, dur: float, cat: str, tid: int, rf: int = -1) -> dict[str, Any]:
    ev = {"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": tid, "ts": ts, "dur": dur}
    if rf >= 0:
        ev["args"] = {"Record function id": rf, "External id": rf}
    return ev


def kineto() -> dict[str, Any]:
    """Per step: the main thread launches, waits (nothing recorded) and then runs
    ``aten::add`` [600, 900] us, which reads what ``aten::mul`` wrote on a side thread [50, 580]."""
    ev = []
    for s in range(STEPS):
        o = s * STEP_US
        ev.append(_x(f"ProfilerStep#{s}", o, STEP_US, "user_annotation", MAIN, 1 + 10 * s))
        ev.append(_x("cudaLaunchKernel", o + 10, 10, "cuda_runtime", MAIN))
        ev.append(_x("aten::add", o + 600, 300, "cpu_op", MAIN, 3 + 10 * s))
        ev.append(_x("cudaLaunchKernel", o + 650, 10, "cuda_runtime", MAIN))
        ev.append(_x("aten::mul", o + 50, 530, "cpu_op", SIDE, 2 + 10 * s))
        ev.append(_x("cudaLaunchKernel", o + 100, 10, "cuda_runtime", SIDE))
        ev.append(_x("cudaEventRecord", o + 590, 5, "cuda_runtime", SIDE))
    return {"traceEvents": ev}


def _tensor(storage: int) -> list[Any]:
    return [storage + 1, storage, 0, 32, 4, "cuda:0"]


def _node(i: int, name: str, rf: int, tid: int, reads=(), writes=(), parent: int = 1):
    def io(storages):
        return {
            "values": [_tensor(s) for s in storages] + [1.0],
            "shapes": [[4, 8]] * len(storages) + [[]],
            "types": ["Tensor(float)"] * len(storages) + ["Double"],
            "strides": [[8, 1]] * len(storages) + [[]],
        }

    attrs = [
        {"name": "rf_id", "type": "uint64", "value": rf},
        {"name": "tid", "type": "uint64", "value": tid},
    ]
    return {
        "id": i,
        "name": name,
        "ctrl_deps": parent,
        "inputs": io(reads),
        "outputs": io(writes),
        "attrs": attrs,
    }


def execution_trace(pid: int = PID) -> dict[str, Any]:
    """Per step: mul (side thread) writes storage 1000+s, add (main) reads it: one dependency.
    Not one: add's child reading it too (its parent already waits), add reading what fill_
    wrote on its own thread, and a write nobody reads."""
    nodes = [
        {"id": 1, "name": "[pytorch|profiler|execution_trace|thread]", "ctrl_deps": 0,
         "attrs": [{"name": "rf_id", "type": "uint64", "value": 0}]},
    ]  # fmt: skip
    i = 2
    for s in range(STEPS):
        mul, fill, add, child = i, i + 1, i + 2, i + 3
        nodes += [
            _node(mul, "aten::mul", 2 + 10 * s, 2, writes=[1000 + s, 5000 + s]),
            _node(fill, "aten::fill_", 900 + s, 1, writes=[2000 + s]),
            _node(add, "aten::add", 3 + 10 * s, 1, reads=[1000 + s, 2000 + s], writes=[3000]),
            _node(child, "aten::copy_", 950 + s, 1, reads=[1000 + s], parent=add),
        ]
        i += 4
    return {"schema": "1.1.1-chakra.0.0.4", "pid": pid, "time": "", "nodes": nodes}


def _pair(folder: Path, et: dict[str, Any] | str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "rank0.json").write_text(json.dumps(kineto()))
    if et is not None:
        text = et if isinstance(et, str) else json.dumps(et)
        (folder / "rank0_et.json").write_text(text)
    return folder


def _graph(folder: Path, with_et: bool = True) -> Graph:
    trace = load_trace(str(folder / "rank0.json"))
    rules = load_rules()
    coll = classify_rank(trace, rules).collectives
    deps = read_dependencies(str(folder / "rank0_et.json")) if with_et else None
    return build_graph(trace, find_steps(trace), coll, rules, deps)


def test_the_et_gives_one_cross_thread_dependency_per_step(tmp_path: Path) -> None:
    folder = _pair(tmp_path / "run", execution_trace())
    deps = read_dependencies(str(folder / "rank0_et.json"))
    assert len(deps) == STEPS and deps.threads == 2
    assert deps.producer.tolist() == [2, 12, 22] and deps.consumer.tolist() == [3, 13, 23]
    (spec,) = discover(str(folder))
    (note,) = [w for w in spec.warnings if "execution trace" in w]
    assert "paired with rank 0 (rank0.json, same pid 100)" in note
    assert f"; {STEPS} data dependencies across threads read from rank0_et.json" in note
    (f,) = spec.runs[0].groups[0].files
    assert f.execution_trace == str(folder / "rank0_et.json") and f.et_dependencies == STEPS


def test_the_consumer_waits_for_its_producer_on_the_other_thread(tmp_path: Path) -> None:
    folder = _pair(tmp_path / "run", execution_trace())
    raw = _graph(folder)
    assert len(raw.et_pairs) == STEPS
    g, placed = et_edges(raw)
    assert placed == STEPS and g.et_waits == STEPS
    # as measured, the replay gives back every step exactly
    assert np.allclose(replay(g).step_time, measured_step_times(raw), rtol=1e-12)
    assert replay(g).step_time == pytest.approx([STEP_US / 1e6] * STEPS)
    # each main-thread wait keeps only its time after the producer's end: 600 - 580 us
    waiting = np.flatnonzero(g.dep2[: len(raw)] >= 0)
    assert (g.dur[waiting] == 20_000).all() and len(waiting) == STEPS
    # the side thread's first producer 200 us slower: without the edge aten::add starts
    # before its input exists and the step keeps its time; with it the step is 200 us longer
    producer = int(g.dep2[waiting[0]])
    slow = g.dur / 1e9
    slow[producer] += 200e-6
    plain = replay(raw, dur=raw.dur / 1e9 + (np.arange(len(raw)) == producer) * 200e-6)
    consumer = int(waiting[0]) + 1
    assert plain.start[consumer] < plain.end[producer]  # too early
    assert plain.step_time[0] == pytest.approx(STEP_US / 1e6)
    tied = replay(g, dur=slow)
    assert tied.start[consumer] == pytest.approx(tied.end[producer] + 20e-6)
    assert tied.step_time[0] == pytest.approx((STEP_US + 200) / 1e6)
    # 100 us faster: the wait shrinks with it
    fast = g.dur / 1e9
    fast[producer] -= 100e-6
    assert replay(g, dur=fast).step_time[0] == pytest.approx((STEP_US - 100) / 1e6)


def test_without_an_et_nothing_changes(tmp_path: Path) -> None:
    folder = _pair(tmp_path / "run")
    g, placed = et_edges(_graph(folder, with_et=False))
    assert placed == 0 and len(g.et_pairs) == 0


def test_an_edge_the_measured_times_contradict_is_not_placed(tmp_path: Path) -> None:
    """The ET says mul (side thread, starts at 50 us) reads what add (main, ends at 900 us)
    wrote: read by the ET, but the measured times cannot hold it, so no edge."""
    et = execution_trace()
    mul, _, add, child = et["nodes"][1:5]
    first, later = mul["id"], add["id"]
    mul.update(_node(later, "aten::mul", 2, 2, reads=[7000]))  # add first in the ET's order
    add.update(_node(first, "aten::add", 3, 1, reads=[2000], writes=[7000]))
    child.update(_node(child["id"], "aten::copy_", 950, 1, parent=add["id"]))
    folder = _pair(tmp_path / "run", et)
    assert len(read_dependencies(str(folder / "rank0_et.json"))) == STEPS
    raw = _graph(folder)
    assert len(raw.et_pairs) == STEPS
    g, placed = et_edges(raw)
    assert placed == STEPS - 1 and g.et_waits == STEPS - 1


def test_analyze_names_the_edges_in_its_assumptions(tmp_path: Path) -> None:
    from tracescale import analyze

    folder = _pair(tmp_path / "run", execution_trace())
    doc = analyze(str(folder), use_study_cache=False).to_dict()
    (study,) = doc["studies"]
    notes = study["scaling"]["replay"]["assumptions"]
    assert any(f"({STEPS} dependencies placed as edges)" in a for a in notes), notes
    assert study["runs"][0]["replay_error"] == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize(
    ("et", "reason"),
    [
        ('{"schema": "1.1.1-chakra.0.0.4", "pid": 100, "nodes": [{"id": 2, "na', "does not parse"),
        (
            {"schema": "1.1.1", "pid": 100, "nodes": [{"id": 2, "name": "aten::mm"}]},
            "no rf_id (record function id)",
        ),
        (execution_trace(pid=4242), "its pid 4242 is not the rank file's (100)"),
        ('{"schema": "1.1.1", "pid": 100, "nodes": 7}', "does not parse"),
    ],
)
def test_an_et_that_cannot_be_used_is_one_line(tmp_path: Path, et: Any, reason: str) -> None:
    folder = _pair(tmp_path / "run", et)
    (spec,) = discover(str(folder))
    (note,) = [w for w in spec.warnings if "execution trace" in w]
    assert "\n" not in note and "paired with rank 0" in note
    assert "data dependencies are not used: " in note and reason in note, note
    (f,) = spec.runs[0].groups[0].files
    assert f.execution_trace == "" and f.et_dependencies == 0


def test_the_real_torch_pair_reads_its_dependencies(torch_pair: Path) -> None:
    """torch's CPU autograd runs the backward on the thread that calls it, and the optimizer
    too: the real CPU training loop has every op on one thread (the ET's ``tid`` 1), so it
    reads 180 ops and exactly 0 cross-thread dependencies (measured with torch 2.13)."""
    et = os.path.join(torch_pair, "rank0_et.json")
    deps = read_dependencies(et)
    assert deps.ops > 100 and deps.threads == 1 and len(deps) == 0
    (spec,) = discover(str(torch_pair))
    (note,) = [w for w in spec.warnings if "execution trace" in w]
    assert "0 data dependencies across threads read from rank0_et.json" in note
    (f,) = spec.runs[0].groups[0].files
    assert f.execution_trace == et
    # every Kineto cpu_op finds its ET node by record-function id
    trace = load_trace(f.path)
    ops = trace.events.rf_id[trace.events.cat == trace.string_id("cpu_op")]
    assert len(ops) and (ops > 0).all()


def test_the_graph_cache_key_holds_the_et(tmp_path: Path) -> None:
    from tracescale.replay.engine.graph_cache import graph_key

    folder = _pair(tmp_path / "run", execution_trace())
    path, et = str(folder / "rank0.json"), str(folder / "rank0_et.json")
    plain = graph_key(path, 0, "rules", 1 << 30)
    with_et = graph_key(path, 0, "rules", 1 << 30, et)
    assert plain is not None and with_et is not None and plain != with_et
    os.utime(et, ns=(1, 1))  # a rewritten ET is another graph
    assert graph_key(path, 0, "rules", 1 << 30, et) != with_et
