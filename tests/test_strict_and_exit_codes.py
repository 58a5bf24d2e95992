"""Every expected failure is one line naming the path with a documented exit code (README):
--strict fails on any rejected file in analyze, compare and inspect alike; bad option values
are usage errors; unusable or implausible trace content is caught, never a 0 ms report."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pytest

from tracescale.cli.main import main
from tracescale.simulate import simulate

BAD_FILES = {
    "empty": b"",
    "whitespace": b"  \n\t ",
    "gzip_of_garbage": b"\x1f\x8b\x08\x00" + b"\xff" * 100,
    "bad_gzip_header": b"\x1f\x8b\x99\x99garbage",
    "null": b"null",
    "utf16": json.dumps({"traceEvents": []}).encode("utf-16"),
}


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sim")
    simulate([2], out, steps=2)
    return out


@pytest.fixture
def run_dir(sim: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "study" / "ws2"
    shutil.copytree(sim / "ws2", dst)
    return dst


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        main(list(argv))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def _one_line_error(err: str, path: object) -> None:
    assert err.startswith("tracescale: error: ") and err.count("\n") == 1 and str(path) in err


@pytest.mark.parametrize("case", BAD_FILES, ids=list(BAD_FILES))
def test_strict_fails_on_rejected_file_everywhere(run_dir, tmp_path, capsys, case):
    bad = run_dir / "rank9.pt.trace.json"
    bad.write_bytes(BAD_FILES[case])
    cache = ["--cache-dir", str(tmp_path / "cache")]
    for argv in (
        ["analyze", str(run_dir), "--strict", "-j1", *cache],
        ["compare", str(run_dir), str(run_dir), "--strict", "-j1", *cache],
        ["inspect", str(run_dir), "--strict"],
    ):
        code, _, err = _cli(capsys, *argv)
        assert code == 3, (argv[0], err)
        assert str(bad) in err and err.count("\n") == 1


def test_without_strict_a_rejected_file_is_a_warning(run_dir, tmp_path, capsys):
    (run_dir / "rank9.pt.trace.json").write_bytes(b"null")
    code, out, _ = _cli(
        capsys, "analyze", str(run_dir), "-j1", "--no-cache", "--format", "json", "-q"
    )
    assert code == 0
    warnings = json.loads(out)["studies"][0]["warnings"]
    assert any("rank9.pt.trace.json: skipped: " in w for w in warnings)


def test_no_usable_event_is_invalid_even_without_strict(tmp_path, capsys):
    p = tmp_path / "a.json"
    p.write_text('{"traceEvents":[{"ph":"X","name":"k","ts":"1","dur":"2"}]}')
    for argv in (
        ["analyze", str(p), "-j1", "--no-cache"],
        ["analyze", str(p), "-j1", "--no-cache", "--strict"],
        ["inspect", str(p)],
        ["inspect", str(p), "--strict"],
    ):
        code, out, err = _cli(capsys, *argv)
        assert code == 3 and "no usable complete" in err and "non-numeric" in err
        assert "0 ms" not in out and "0.000" not in out
        assert err.count("\n") == 1


def test_six_day_kernel_is_dropped_with_a_warning(run_dir, capsys):
    f = sorted(run_dir.glob("*.json.gz"))[0]
    doc = json.loads(gzip.decompress(f.read_bytes()))
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    kernel["dur"] = 6 * 24 * 3600 * 1e6
    f.write_bytes(gzip.compress(json.dumps(doc).encode()))
    code, out, _ = _cli(
        capsys, "analyze", str(run_dir), "-j1", "--no-cache", "--format", "json", "-q"
    )
    assert code == 0
    study = json.loads(out)["studies"][0]
    assert study["runs"][0]["step_time_s"]["mean"] < 10  # not 64,800 s
    text = " ".join(study["warnings"] + [w for r in study["runs"] for w in r["warnings"]])
    assert "implausible dur" in text


def test_kernel_longer_than_the_recording_window_is_dropped(write_trace):
    from tracescale.ingest.group import load_checked

    events = [
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "ts": 0, "dur": 5e6},
        {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 10, "dur": 100},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 20, "dur": 3600e6},
    ]
    t = load_checked(str(write_trace(events)))
    assert len(t.events) == 2 and t.strings[t.events.name[-1]] == "a"
    assert t.meta.skipped == {
        "events with implausible dur (over a day, or longer than the trace's window)": 1
    }


def test_folder_world_size_disagreeing_with_distributed_info_warns(sim, tmp_path, capsys):
    ws8 = tmp_path / "study" / "ws8"
    shutil.copytree(sim / "ws2", ws8)
    code, out, _ = _cli(capsys, "inspect", str(ws8.parent), "--format", "json")
    assert code == 0
    run = json.loads(out)[0]["runs"][0]
    assert run["world_size"] == 2
    assert any(
        "folder name says world size 8 but distributedInfo says 2" in w for w in run["warnings"]
    )
    argv = ["analyze", str(ws8.parent), "-j1", "--no-cache", "--format", "json", "-q"]
    code, out, _ = _cli(capsys, *argv)
    study = json.loads(out)["studies"][0]
    assert code == 0 and [r["world_size"] for r in study["runs"]] == [2]
    every = study["warnings"] + [w for r in study["runs"] for w in r.get("warnings", [])]
    assert any("folder name says world size 8 but distributedInfo says 2" in w for w in every)


def test_absurd_rank_skips_that_file_only(run_dir, capsys):
    f = sorted(run_dir.glob("*.json.gz"))[0]
    doc = json.loads(gzip.decompress(f.read_bytes()))
    doc["distributedInfo"]["rank"] = 10**6
    odd = run_dir / "odd.pt.trace.json"
    odd.write_text(json.dumps(doc))
    code, out, _ = _cli(
        capsys, "analyze", str(run_dir), "-j1", "--no-cache", "--format", "json", "-q"
    )
    assert code == 0
    warnings = json.loads(out)["studies"][0]["warnings"]
    assert any("odd.pt.trace.json: skipped: rank 1000000 is not below" in w for w in warnings)
    code, _, err = _cli(capsys, "analyze", str(run_dir), "-j1", "--no-cache", "--strict")
    assert code == 3 and "odd.pt.trace.json" in err


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-1", "abc", "1e-12"])
@pytest.mark.parametrize("command", ["analyze", "compare", "inspect"])
def test_bad_memory_budget_is_a_usage_error(run_dir, capsys, command, value):
    paths = [str(run_dir)] * (2 if command == "compare" else 1)
    code, _, err = _cli(capsys, command, *paths, f"--memory-budget={value}")
    assert code == 2 and "--memory-budget" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "argv",
    [
        ["--jobs", "0"],
        ["--what-if", "dataloader=nan"],
        ["--what-if", "dataloader=inf"],
    ],
)
def test_other_bad_values_are_usage_errors(run_dir, capsys, argv):
    code, _, err = _cli(capsys, "analyze", str(run_dir), *argv)
    assert code == 2 and "Traceback" not in err


def test_fail_on_regression_nan_is_usage(run_dir, capsys):
    code, _, _ = _cli(capsys, "compare", str(run_dir), str(run_dir), "--fail-on-regression=nan")
    assert code == 2


def test_memory_budget_is_gb_everywhere() -> None:
    from click.testing import CliRunner

    from tracescale.cli.main import cli

    for command in ("analyze", "compare", "inspect"):
        text = CliRunner().invoke(cli, [command, "--help"]).output
        assert "--memory-budget GB" in text and "[default: 8.0]" in text, command


def test_fifo_as_path(tmp_path, capsys):
    fifo = tmp_path / "rank0.json"
    os.mkfifo(fifo)
    for argv in (["analyze", str(fifo), "--no-cache"], ["inspect", str(fifo)]):
        code, _, err = _cli(capsys, *argv)
        assert code == 3 and "FIFO" in err
        _one_line_error(err, fifo)


def test_json_nested_1000_deep(tmp_path, capsys):
    p = tmp_path / "deep.json"
    p.write_text('{"traceEvents":' + "[" * 1000 + "]" * 1000 + "}")
    for argv in (["analyze", str(p), "-j1", "--no-cache"], ["inspect", str(p)]):
        code, _, err = _cli(capsys, *argv)
        assert code == 3 and "nested too deeply" in err
        _one_line_error(err, p)


def test_non_utf8_study_path_with_output(sim, tmp_path, capsys):
    odd = Path(os.fsdecode(bytes(tmp_path) + b"/st\xffdy"))
    shutil.copytree(sim / "ws2", odd / "ws2")
    out = tmp_path / "out.json"
    code, _, err = _cli(capsys, "analyze", str(odd), "-j1", "--no-cache", "-o", str(out), "-q")
    assert code == 0, err
    doc = json.loads(out.read_bytes().decode("utf-8"))
    assert "st\ufffddy" in doc["studies"][0]["path"]


@pytest.mark.parametrize(
    "damage",
    [
        lambda d: d["studies"][0]["scaling"].__setitem__("points", [{"world_size": [1]}]),
        lambda d: d.__setitem__("studies", 5),
        lambda d: d["studies"].__setitem__(0, "x"),
        lambda d: d["studies"][0]["runs"][0].__setitem__("breakdown_s", None),
    ],
)
def test_damaged_study_json_in_report(run_dir, tmp_path, capsys, damage):
    from tracescale import api

    doc = api.analyze(str(run_dir), jobs=1, no_cache=True).doc
    damage(doc)
    p = tmp_path / "study.json"
    p.write_text(json.dumps(doc))
    code, _, err = _cli(capsys, "report", str(p))
    assert code == 3 and "damaged study document" in err
    _one_line_error(err, p)
    deep = tmp_path / "deep.json"
    deep.write_text('{"schema_version": 1, "studies": ' + "[" * 100_000 + "]" * 100_000 + "}")
    code, _, err = _cli(capsys, "report", str(deep))
    assert code == 3
    _one_line_error(err, deep)


def test_simulate_into_an_unwritable_place_is_exit_5(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    argv = ["simulate", "--world-sizes", "1", "--steps", "1", "--out", str(blocker / "sub"), "-q"]
    code, _, err = _cli(capsys, *argv)
    assert code == 5 and "cannot write" in err
    _one_line_error(err, blocker)


@pytest.mark.parametrize(
    ("toml", "code", "message"),
    [
        (b'[[run]]\nworld_size = 2\npath = "missing"\n', 4, "no such file or folder"),
        (b'[[run]]\nworld_size = 2\npath = "pipe"\n', 3, "cannot list"),
        (b'[[run]]\nworld_size = 0\npath = "x"\n', 2, "world_size must be >= 1"),
        (b"\xff\xfe[[run]]", 2, "cannot read tracescale.toml"),
    ],
)
def test_tracescale_toml_problems(tmp_path, capsys, toml, code, message):
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "tracescale.toml").write_bytes(toml)
    got, _, err = _cli(capsys, "inspect", str(tmp_path))
    assert got == code and message in err and err.count("\n") == 1
