"""`-o` never destroys anything: traces, symlinks, FIFOs and devices are refused without
--force; `-o -` is stdout; modes follow the umask (new) or are kept (replaced); OS failures
are one line naming the path with exit 5."""

from __future__ import annotations

import errno
import gzip
import json
import os
import stat
from pathlib import Path

import pytest

from tracescale.atomic import check_output_path
from tracescale.cli.main import main
from tracescale.errors import UsageError

RUN = Path(__file__).resolve().parents[1] / "sample_traces" / "sim_gpu_strong" / "ws1"


@pytest.fixture(scope="module")
def study_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tracescale import api

    out = tmp_path_factory.mktemp("study") / "study.json"
    api.analyze(str(RUN), jobs=1, no_cache=True).save(str(out))
    return out


def _code_and_err(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str]:
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, capsys.readouterr().err


def _late_key_trace() -> bytes:
    """A trace whose 'traceEvents' key sits after 20 KB of other top-level keys."""
    doc = {
        "schemaVersion": 1,
        "deviceProperties": [{"name": "x" * 100, "id": i} for i in range(200)],
        "traceEvents": [{"ph": "X", "name": "k", "ts": 1, "dur": 2, "pid": 1, "tid": 1}],
    }
    data = json.dumps(doc).encode()
    assert data.index(b'"traceEvents"') > 16_000
    return data


@pytest.mark.parametrize("gz", [False, True])
def test_refuses_a_trace_whose_key_comes_late(tmp_path, capsys, study_json, gz):
    data = _late_key_trace()
    blob = gzip.compress(data, mtime=0) if gz else data
    target = tmp_path / ("rank-34.json.gz" if gz else "rank-34.json")
    target.write_bytes(blob)
    argv = ["report", str(study_json), "-o", str(target), "--format", "json"]
    code, err = _code_and_err(capsys, argv)
    assert code == 2 and "existing trace file" in err and str(target) in err
    assert target.read_bytes() == blob
    code, _ = _code_and_err(capsys, [*argv, "--force"])
    assert code == 0 and b"traceEvents" not in target.read_bytes()


def test_refuses_the_real_hta_trace_unzipped(tmp_path, capsys, study_json, shared_traces):
    src = next((shared_traces / "hta" / "cpu_only").glob("rank-34.*.json.gz"))
    target = tmp_path / "rank-34.json"
    target.write_bytes(gzip.decompress(src.read_bytes()))
    before = target.read_bytes()
    code, err = _code_and_err(capsys, ["report", str(study_json), "-o", str(target)])
    assert code == 2 and target.read_bytes() == before and "existing trace" in err


def test_analyze_output_never_replaces_a_trace(tmp_path, capsys):
    """The reproduction as reported: `analyze STUDY -o d/rank-34.json` over a real trace."""
    target = tmp_path / "rank-34.json"
    target.write_bytes(_late_key_trace())
    before = target.read_bytes()
    argv = ["analyze", str(RUN), "-j1", "--no-cache", "-q", "-o", str(target)]
    code, err = _code_and_err(capsys, argv)
    assert code == 2 and target.read_bytes() == before
    expected = "refusing to write over an existing trace file (use --force to overwrite)"
    assert err == f"tracescale: error: {target}: {expected}\n"


def test_array_form_trace_and_plain_json_report(tmp_path):
    arr = tmp_path / "events.json"
    arr.write_text(json.dumps([{"ph": "X", "name": "a", "ts": 1, "dur": 1}]))
    with pytest.raises(UsageError, match="existing trace"):
        check_output_path(arr, [], force=False)
    plain = tmp_path / "old-report.json"
    plain.write_text(json.dumps({"studies": [], "note": "traceEvents in a value is fine"}))
    check_output_path(plain, [], force=False)  # a previous report may be replaced
    garbage_gz = tmp_path / "x.gz"
    garbage_gz.write_bytes(b"\x1f\x8b\x08\x00" + b"\xff" * 50)
    with pytest.raises(UsageError, match="existing trace"):  # cannot prove it is not one
        check_output_path(garbage_gz, [], force=False)


def test_symlink_fifo_and_device_are_refused(tmp_path, capsys, study_json):
    real = tmp_path / "real.md"
    real.write_text("keep me")
    link = tmp_path / "link.md"
    link.symlink_to(real)
    fifo = tmp_path / "pipe.md"
    os.mkfifo(fifo)
    for target, what in ((link, "symlink"), (fifo, "not a regular file"), ("/dev/null", "not")):
        code, err = _code_and_err(capsys, ["report", str(study_json), "-o", str(target)])
        assert code == 2 and what in err and str(target) in err
    assert link.is_symlink() and real.read_text() == "keep me"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    # --force follows the link (the link stays) and writes through a device
    code, _ = _code_and_err(capsys, ["report", str(study_json), "-o", str(link), "--force"])
    assert code == 0 and link.is_symlink() and "keep me" not in real.read_text()
    code, _ = _code_and_err(capsys, ["report", str(study_json), "-o", "/dev/null", "--force"])
    assert code == 0 and stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_dash_prints_the_report(tmp_path, capfd, study_json, monkeypatch):
    monkeypatch.chdir(tmp_path)
    main(["report", str(study_json), "-o", "-", "--format", "json"])
    assert json.loads(capfd.readouterr().out)["studies"]
    assert os.listdir(tmp_path) == []


def test_modes_follow_umask_and_are_kept(tmp_path, capsys, study_json):
    old = os.umask(0o022)
    try:
        new = tmp_path / "new.md"
        _code_and_err(capsys, ["report", str(study_json), "-o", str(new)])
        assert stat.S_IMODE(new.stat().st_mode) == 0o644
        os.umask(0o027)
        newer = tmp_path / "newer.md"
        _code_and_err(capsys, ["report", str(study_json), "-o", str(newer)])
        assert stat.S_IMODE(newer.stat().st_mode) == 0o640
        new.chmod(0o664)
        _code_and_err(capsys, ["report", str(study_json), "-o", str(new)])
        assert stat.S_IMODE(new.stat().st_mode) == 0o664
    finally:
        os.umask(old)


@pytest.mark.parametrize(
    ("err", "message"),
    [
        (errno.ENOSPC, "no space left on device"),
        (errno.EROFS, "read-only file system"),
        (errno.EACCES, "permission denied"),
    ],
)
def test_os_failures_are_exit_5_naming_the_path(
    tmp_path, capsys, study_json, monkeypatch, err, message
):
    def fail(*args, **kwargs):
        raise OSError(err, os.strerror(err))

    target = tmp_path / "out.md"
    monkeypatch.setattr("tracescale.atomic.tempfile.mkstemp", fail)
    code, text = _code_and_err(capsys, ["report", str(study_json), "-o", str(target)])
    assert code == 5 and text == f"tracescale: error: {target}: cannot write: {message}\n"


def test_full_disk_while_writing_leaves_nothing(tmp_path, capsys, study_json, monkeypatch):
    real_fdopen = os.fdopen

    class Full:
        def __init__(self, fh):  # type: ignore[no-untyped-def]
            self.fh = fh

        def __enter__(self):  # type: ignore[no-untyped-def]
            return self

        def __exit__(self, *a):  # type: ignore[no-untyped-def]
            self.fh.close()

        def write(self, data):  # type: ignore[no-untyped-def]
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("tracescale.atomic.os.fdopen", lambda fd, mode: Full(real_fdopen(fd, mode)))
    target = tmp_path / "out.md"
    code, text = _code_and_err(capsys, ["report", str(study_json), "-o", str(target)])
    assert code == 5 and "no space left" in text and os.listdir(tmp_path) == []


def test_missing_folder(tmp_path, capsys, study_json):
    target = tmp_path / "nope" / "out.md"
    code, text = _code_and_err(capsys, ["report", str(study_json), "-o", str(target)])
    assert code == 5 and text.strip() == (
        f"tracescale: error: {target}: cannot write: the folder does not exist"
    )


def test_directory_is_a_usage_error(tmp_path, capsys, study_json):
    code, text = _code_and_err(capsys, ["report", str(study_json), "-o", str(tmp_path)])
    assert code == 2 and "is a directory" in text


def test_long_top_level_falls_back_to_a_byte_search(tmp_path, monkeypatch):
    monkeypatch.setattr("tracescale.atomic._PARSE_EVENTS", 50)
    late = tmp_path / "late.json"
    late.write_text(json.dumps({"meta": list(range(500)), "traceEvents": []}))
    with pytest.raises(UsageError, match="existing trace"):
        check_output_path(late, [], force=False)
    study = tmp_path / "study.json"
    study.write_text(json.dumps({"schema_version": 1, "studies": [list(range(500))]}))
    check_output_path(study, [], force=False)
