"""Discovery on temporary folder trees: every documented study layout and each error."""

from __future__ import annotations

import os

import pytest

from tracescale.errors import InvalidTraceError, NoTracesError
from tracescale.ingest.discover import discover

EV = [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]


def dist(rank, ws):
    return {"distributedInfo": {"backend": "gloo", "rank": rank, "world_size": ws}}


def run_folder(write_trace, folder, ws, ranks=None, dist_info=True):
    for r in range(ws) if ranks is None else ranks:
        extra = dist(r, ws) if dist_info else {}
        write_trace(EV, f"host_{100 + r}.pt.trace.json", folder=folder, **extra)


def test_single_file(write_trace):
    p = write_trace(EV, "rank-3.json", **dist(3, 4))
    [study] = discover(str(p))
    [run] = study.runs
    assert run.world_size == 4 and [f.rank for f in run.groups[0].files] == [3]
    assert run.groups[0].files[0].rank_from == "distributedInfo"
    assert any("missing ranks 0, 1, 2" in w for w in run.warnings)


def test_run_folder_with_ranks_from_names_and_order(write_trace, tmp_path):
    write_trace(EV, "trace_rank_1.json", folder=tmp_path / "r")
    write_trace(EV, "trace_rank0.json", folder=tmp_path / "r")
    write_trace(EV, "zzz.json", folder=tmp_path / "r")
    [study] = discover(str(tmp_path / "r"))
    files = study.runs[0].groups[0].files
    assert [(f.rank, f.rank_from) for f in files] == [
        (0, "file name"),
        (1, "file name"),
        (2, "order"),
    ]
    assert study.runs[0].world_size == 3
    assert any("taken as rank 2" in w for w in study.runs[0].warnings)


@pytest.mark.parametrize(
    ("name", "ws"),
    [("ws1", 1), ("ws2", 2), ("ws4", 4), ("8gpu", 8), ("gpus8", 8), ("n8", 8), ("world_size=8", 8)],
)
def test_world_size_from_folder_name(write_trace, tmp_path, name, ws):
    run_folder(write_trace, tmp_path / "study" / name, ws, ranks=[0], dist_info=False)
    write_trace(EV, "x.json", folder=tmp_path / "study" / "other_ws1")  # a second run
    [study] = discover(str(tmp_path / "study"))
    assert ws in [r.world_size for r in study.runs]


def test_study_folder_and_parent_of_studies(write_trace, tmp_path):
    for s in ("s1", "s2"):
        for ws in (1, 2, 4):
            run_folder(write_trace, tmp_path / "top" / s / f"ws{ws}", ws)
    studies = discover(str(tmp_path / "top"))
    assert [os.path.basename(s.path) for s in studies] == ["s1", "s2"]
    assert all([r.world_size for r in s.runs] == [1, 2, 4] for s in studies)
    assert all(not r.warnings for s in studies for r in s.runs)


def test_same_world_size_twice_is_pooled(write_trace, tmp_path):
    run_folder(write_trace, tmp_path / "st" / "a", 2)
    run_folder(write_trace, tmp_path / "st" / "b", 2)
    [study] = discover(str(tmp_path / "st"))
    [run] = study.runs
    assert len(run.groups) == 2 and len(run.paths) == 4
    assert any("pooled as repeats" in w for w in run.warnings)


def test_mixed_world_sizes_in_one_folder_is_an_error(write_trace, tmp_path):
    write_trace(EV, "a.json", folder=tmp_path / "m", **dist(0, 2))
    write_trace(EV, "b.json", folder=tmp_path / "m", **dist(0, 4))
    with pytest.raises(InvalidTraceError, match="different world sizes") as info:
        discover(str(tmp_path / "m"))
    assert "a.json" in str(info.value) and "b.json" in str(info.value)
    assert info.value.exit_code == 3


def test_fewer_ranks_warns_naming_missing(write_trace, tmp_path):
    run_folder(write_trace, tmp_path / "f", 4, ranks=[0, 2])
    [study] = discover(str(tmp_path / "f"))
    assert any("missing ranks 1, 3" in w for w in study.runs[0].warnings)


def test_world_size_smaller_than_rank_is_an_error(write_trace, tmp_path):
    write_trace(EV, "a.json", folder=tmp_path / "w", **dist(5, 2))
    with pytest.raises(InvalidTraceError, match="not below the world size 2"):
        discover(str(tmp_path / "w"))


def test_tracescale_toml(write_trace, tmp_path):
    run_folder(write_trace, tmp_path / "s" / "odd_a", 1, dist_info=False)
    run_folder(write_trace, tmp_path / "s" / "odd_b", 2, dist_info=False)
    (tmp_path / "s" / "tracescale.toml").write_text(
        '[[run]]\nworld_size = 1\npath = "odd_a"\nlabel = "one"\n'
        '[[run]]\nworld_size = 2\npath = "odd_b"\n'
    )
    [study] = discover(str(tmp_path / "s"))
    assert [(r.world_size, r.label) for r in study.runs] == [(1, "one"), (2, "odd_b")]


def test_rank_twice_is_kept_for_load_time_check(write_trace, tmp_path):
    write_trace(EV, "worker0.1.pt.trace.json", folder=tmp_path / "tb")
    write_trace(EV, "worker0.2.pt.trace.json", folder=tmp_path / "tb")
    [study] = discover(str(tmp_path / "tb"))
    files = study.runs[0].groups[0].files
    assert [f.rank for f in files] == [0, 0] and study.runs[0].world_size == 1


def test_symlink_loop_and_cycle(write_trace, tmp_path):
    run_folder(write_trace, tmp_path / "s" / "ws1", 1)
    os.symlink(tmp_path / "s", tmp_path / "s" / "ws1" / "up")  # cycle back up
    os.symlink("loop", tmp_path / "s" / "loop")  # ELOOP
    [study] = discover(str(tmp_path / "s"))
    assert [r.world_size for r in study.runs] == [1]


def test_unreadable_file(write_trace, tmp_path, monkeypatch):
    good = write_trace(EV, "rank0.json", folder=tmp_path / "u")
    bad = write_trace(EV, "rank1.json", folder=tmp_path / "u")
    if os.geteuid() == 0:
        # root reads any file whatever its mode: make the open itself refuse, like chmod 0 would.
        real_open = open

        def refusing_open(path, *args, **kwargs):
            if str(path) == str(bad):
                raise PermissionError(13, "Permission denied", str(path))
            return real_open(path, *args, **kwargs)

        monkeypatch.setattr("builtins.open", refusing_open)
    bad.chmod(0)
    try:
        [study] = discover(str(tmp_path / "u"))
        assert any("rank1.json: skipped: permission denied" in w for w in study.warnings)
        assert study.runs[0].paths == (str(good),)
        with pytest.raises(InvalidTraceError, match="permission denied"):
            discover(str(bad))
    finally:
        bad.chmod(0o644)


def test_empty_folder_and_missing_path(tmp_path):
    (tmp_path / "e").mkdir()
    with pytest.raises(NoTracesError) as info:
        discover(str(tmp_path / "e"))
    assert info.value.exit_code == 4
    with pytest.raises(NoTracesError):
        discover(str(tmp_path / "nope"))


def test_shared_traces_discover(shared_traces):
    studies = discover(str(shared_traces / "tb_plugin"))
    [run] = studies[0].runs
    assert run.world_size == 1 and len(run.groups) == 2
    [s] = discover(str(shared_traces / "hta" / "trace_filter"))
    assert s.runs[0].world_size == 128 and [f.rank for f in s.runs[0].groups[0].files] == [0, 1]
