"""Traces as users have them: an execution trace beside the Kineto file, steps without
ProfilerStep (serving annotations, the optimizer step, a marker the user names)."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from tracescale.cli.main import cli
from tracescale.errors import InvalidTraceError, UsageError
from tracescale.ingest import load_trace
from tracescale.ingest.discover import discover
from tracescale.ingest.sniff import EXECUTION_TRACE, sniff
from tracescale.ingest.steps import find_steps


def X(name, ts, dur, *, cat="user_annotation", pid=1, tid=1, **args):
    ev = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    return {**ev, "args": args} if args else ev


def tiny_et(pid: int, nodes: int = 3) -> dict:
    """An execution trace in the layout torch's ExecutionTraceObserver writes (schema first,
    then the operator nodes with their tensor inputs/outputs and control parents)."""
    io = {"values": [], "shapes": [], "types": [], "strides": []}
    return {
        "schema": "1.1.1-chakra.0.0.4",
        "pid": pid,
        "time": "2026-01-01 00:00:00",
        "start_ts": 100,
        "nodes": [
            {"id": i + 2, "name": f"aten::op{i}", "ctrl_deps": 1, "inputs": io, "outputs": io}
            for i in range(nodes)
        ],
        "finish_ts": 200,
    }


def kineto(pid: int, steps: int = 2) -> list[dict]:
    out = []
    for k in range(steps):
        out.append(X(f"ProfilerStep#{k}", 1000 * k, 900, pid=pid, tid=pid))
        out.append(X("aten::mm", 1000 * k + 10, 500, cat="cpu_op", pid=pid, tid=pid))
    return out


def test_an_execution_trace_is_recognized_and_never_a_rank(write_trace, tmp_path):
    run = tmp_path / "run"
    write_trace(kineto(4242), "rank0.json", folder=run)
    et = run / "rank0_et.json"
    et.write_text(json.dumps(tiny_et(4242)))
    head = sniff(str(et), strict=False)
    assert head.kind == EXECUTION_TRACE and head.pids == (4242,) and head.schema.startswith("1.1")
    (spec,) = discover(str(run))
    assert [f.path for r in spec.runs for g in r.groups for f in g.files] == [
        str(run / "rank0.json")
    ]
    assert spec.runs[0].world_size == 1 and spec.rejected == ()
    (note,) = [w for w in spec.warnings if "execution trace" in w]
    assert "paired with rank 0 (rank0.json, same pid 4242)" in note
    # the tiny ET's nodes carry no record-function ids: nothing to match Kineto's ops with
    assert "rank0_et.json's data dependencies are not used: its nodes carry no rf_id" in note
    with pytest.raises(InvalidTraceError, match="execution trace"):
        discover(str(et))  # named alone: one line, not a traceback


def test_a_large_execution_trace_is_still_not_a_rank(write_trace, tmp_path):
    """Past the 64 KB head no 'traceEvents' proves nothing, but the schema line does."""
    run = tmp_path / "run"
    write_trace(kineto(7), "rank0.json", folder=run)
    (run / "big_et.json").write_text(json.dumps(tiny_et(7, nodes=3000)))
    assert (run / "big_et.json").stat().st_size > 64 * 1024
    (spec,) = discover(str(run))
    assert len(spec.runs[0].groups[0].files) == 1 and spec.runs[0].world_size == 1


def test_an_unpaired_execution_trace_is_one_note(write_trace, tmp_path):
    run = tmp_path / "run"
    for r, pid in ((0, 10), (1, 11)):
        write_trace(kineto(pid), f"rank{r}.json", folder=run)
    (run / "et.json").write_text(json.dumps(tiny_et(99)))
    (spec,) = discover(str(run))
    assert spec.runs[0].world_size == 2
    (note,) = [w for w in spec.warnings if "execution trace" in w]
    assert note.endswith("not analyzed") and "et.json" in note


def test_inspect_lists_the_pair(write_trace, tmp_path):
    run = tmp_path / "run"
    write_trace(kineto(5), "worker0.json", folder=run)
    (run / "worker0_et.json").write_text(json.dumps(tiny_et(5)))
    res = CliRunner().invoke(cli, ["inspect", str(run), "--format", "json", "--strict"])
    assert res.exit_code == 0, res.output
    (study,) = json.loads(res.output)
    assert [r["file"] for r in study["runs"][0]["ranks"]] == [str(run / "worker0.json")]
    (et,) = study["execution_traces"]
    assert "worker0_et.json" in et and "paired with rank 0" in et
    table = CliRunner().invoke(cli, ["inspect", str(run)])
    assert "execution trace: " in table.output and "paired with rank 0" in table.output


def test_a_real_execution_trace_pairs_with_its_kineto_trace(torch_pair):
    (spec,) = discover(str(torch_pair))
    files = [f.path for r in spec.runs for g in r.groups for f in g.files]
    assert files == [os.path.join(torch_pair, "rank0_kineto.json")]
    (note,) = [w for w in spec.warnings if "execution trace" in w]
    assert "paired with rank 0 (rank0_kineto.json, same pid" in note
    # one thread (CPU autograd runs on the caller's): none cross threads
    assert "; 0 data dependencies across threads read from rank0_et.json" in note


def serving_trace() -> list[dict]:
    """vLLM-like: no ProfilerStep; each engine step a `step[...]` range holding execute_model."""
    ev = []
    for k, phase in enumerate(["PREFILL bs=4", "DECODE bs=32", "DECODE bs=32", "DECODE bs=32"]):
        t = 10_000 * k
        ev.append(X(f"step[{phase}]", t, 9_000))
        ev.append(X("execute_model", t + 100, 8_000))
        ev.append(X("aten::mm", t + 200, 5_000, cat="cpu_op"))
    return ev


def test_serving_steps_come_from_their_annotation(write_trace):
    s = find_steps(load_trace(str(write_trace(serving_trace()))))
    assert s.marker == "step" and not s.synthetic and len(s) == 4
    assert s.host_start.tolist() == [0, 10_000_000, 20_000_000, 30_000_000]
    assert s.host_end.tolist() == [9_000_000, 19_000_000, 29_000_000, 39_000_000]
    # execute_model is nested in step[...]: not a top-level candidate
    assert [c[:2] for c in s.candidates] == [("step", 4)]
    assert any("4 'step' annotations" in w for w in s.warnings)


def test_the_optimizer_step_bounds_steps_end_to_end(write_trace):
    ev = []
    for k in range(4):
        t = 10_000 * k
        ev.append(X("aten::mm", t, 7_000, cat="cpu_op"))
        ev.append(X("Optimizer.step#SGD.step", t + 8_000, 1_000))
    s = find_steps(load_trace(str(write_trace(ev))))
    assert s.marker == "Optimizer.step" and len(s) == 3
    assert s.host_start.tolist() == [9_000_000, 19_000_000, 29_000_000]
    assert s.host_end.tolist() == [19_000_000, 29_000_000, 39_000_000]


def test_a_phase_is_not_a_step_and_the_whole_span_warns(write_trace):
    ev = [X("## forward ##", 10_000 * k, 1_000) for k in range(3)]
    ev.append(X("aten::mm", 0, 25_000, cat="cpu_op"))
    s = find_steps(load_trace(str(write_trace(ev))))
    assert s.synthetic and s.marker == "whole span"
    assert "not usable: covers" in s.candidates[0][2]
    assert any("whole traced span" in w for w in s.warnings)


def test_the_named_marker_wins_and_a_bad_one_is_a_usage_error(write_trace):
    ev = [X(f"ProfilerStep#{k}", 10_000 * k, 9_000) for k in range(2)]
    ev += [X("fwd_bwd", 10_000 * k + 100, 4_000) for k in range(2)]
    ev += [X("fwd_bwd", 10_000 * k + 5_000, 4_000) for k in range(2)]
    t = load_trace(str(write_trace(ev)))
    s = find_steps(t, "^fwd_bwd$")
    assert len(s) == 4 and s.marker == "--step-marker '^fwd_bwd$'"
    none = find_steps(t, "^nothing$")
    assert none.marker == "ProfilerStep" and any("matches no" in w for w in none.warnings)
    with pytest.raises(UsageError):
        find_steps(t, "(")


def test_analyze_and_inspect_take_a_step_marker(write_trace, tmp_path):
    path = write_trace(serving_trace(), "serve.json", folder=tmp_path / "in")
    res = CliRunner().invoke(
        cli, ["inspect", str(path), "--format", "json", "--step-marker", "^execute_model$"]
    )
    assert res.exit_code == 0, res.output
    steps = json.loads(res.output)[0]["runs"][0]["ranks"][0]["steps"]
    assert steps["count"] == 4 and steps["marker"] == "--step-marker '^execute_model$'"
    assert steps["mean_s"] == pytest.approx(8e-3, rel=0.01)
    table = CliRunner().invoke(cli, ["inspect", str(path)])
    assert "step marker: 'step' x4: step annotation (chosen)" in table.output
    out = tmp_path / "a.json"
    args = ["analyze", str(path), "--no-cache", "-q", "-o", str(out), "--format", "json"]
    res = CliRunner().invoke(cli, [*args, "--step-marker", "^execute_model$"])
    assert res.exit_code == 0, res.output
    run = json.loads(out.read_text())["studies"][0]["runs"][0]
    assert run["step_time_s"]["mean"] == pytest.approx(8e-3, rel=0.01)
    with pytest.raises(UsageError, match="step-marker"):  # main() makes it exit 2
        CliRunner().invoke(cli, [*args, "--force", "--step-marker", "("], catch_exceptions=False)
