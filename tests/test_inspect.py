"""``tracescale inspect`` through click's runner: table, JSON, bad rank files, --strict."""

from __future__ import annotations

import json

from click.testing import CliRunner

from tracescale.cli.main import cli


def X(name, ts, dur, *, cat="user_annotation", pid=1, tid=1, **args):
    ev = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    return {**ev, "args": args} if args else ev


def rank_events(r):
    return [
        X("ProfilerStep#3", 0, 100),
        X("cudaLaunchKernel", 5, 1, cat="cuda_runtime", correlation=1),
        X("ProfilerStep#4", 100, 100),
        X("ncclDevKernel_AllReduce_Sum_f32", 10, 50, cat="kernel", pid=0, tid=7, correlation=1,
          device=0, stream=7),
        X("gloo:all_reduce", 120, 3),
        {"ph": "X", "name": "nodur", "pid": 1, "tid": 1, "ts": 3},
    ]  # fmt: skip


def make_run(write_trace, folder, bad=False):
    for r in range(2):
        write_trace(rank_events(r), f"rank{r}.json", folder=folder,
                    distributedInfo={"backend": "nccl", "rank": r, "world_size": 4})  # fmt: skip
    if bad:
        (folder / "rank3.json").write_text('{"traceEvents": [')


def test_json_output(write_trace, tmp_path):
    make_run(write_trace, tmp_path / "run")
    res = CliRunner().invoke(cli, ["inspect", str(tmp_path / "run"), "--format", "json"])
    assert res.exit_code == 0, res.output
    [study] = json.loads(res.output)
    [run] = study["runs"]
    assert run["world_size"] == 4 and any("missing ranks 2, 3" in w for w in run["warnings"])
    r0 = run["ranks"][0]
    assert r0["rank"] == 0 and r0["events"] == 5 and r0["gpus"] == [0] and r0["streams"] == 1
    assert r0["steps"]["numbers"] == [3, 4] and abs(r0["steps"]["mean_s"] - 100e-6) < 1e-12
    assert r0["collectives"]["kernels"] == {"allreduce": 1}
    assert r0["collectives"]["host"] == {"allreduce": 1}
    assert "1 events without dur skipped" in r0["warnings"]
    assert r0["span_s"] == 200e-6


def test_bad_rank_file_is_a_warning_row_unless_strict(write_trace, tmp_path):
    make_run(write_trace, tmp_path / "run", bad=True)
    res = CliRunner().invoke(cli, ["inspect", str(tmp_path / "run")])
    assert res.exit_code == 0, res.output
    assert "rank3.json" in res.output and "not valid JSON" in res.output
    res = CliRunner().invoke(
        cli, ["inspect", str(tmp_path / "run"), "--strict"], standalone_mode=False
    )
    assert res.exception is not None and res.exception.exit_code == 3  # main() exits with it


def test_empty_folder_exits_4(tmp_path):
    from tracescale.cli.main import main

    (tmp_path / "e").mkdir()
    try:
        main(["inspect", str(tmp_path / "e")])
    except SystemExit as exc:
        assert exc.code == 4


def test_trace_filter_done_when(shared_traces):
    res = CliRunner().invoke(
        cli, ["inspect", str(shared_traces / "hta" / "trace_filter"), "--format", "json"]
    )
    assert res.exit_code == 0, res.output
    [study] = json.loads(res.output)
    [run] = study["runs"]
    assert run["world_size"] == 128 and [r["rank"] for r in run["ranks"]] == [0, 1]
    for r in run["ranks"]:
        assert r["steps"]["numbers"] == [551, 552]
        assert r["collectives"]["host"]["allreduce"] == 4  # nccl:all_reduce
        assert r["collectives"]["kernels"] == {"sendrecv": 10}
    table = CliRunner().invoke(cli, ["inspect", str(shared_traces / "hta" / "trace_filter")])
    assert "allreduce 4" in table.output and "0/128" in table.output
