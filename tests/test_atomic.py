"""Atomic writes leave no partial file; -o never clobbers traces or writes into input folders."""

from __future__ import annotations

import os

import pytest

from tracescale.atomic import atomic_write_bytes, atomic_write_text, check_output_path
from tracescale.errors import OutputError, UsageError


def test_writes_and_replaces(tmp_path):
    p = tmp_path / "out.txt"
    atomic_write_text(p, "one")
    atomic_write_bytes(str(p), b"two")
    assert p.read_bytes() == b"two" and os.listdir(tmp_path) == ["out.txt"]


@pytest.mark.parametrize(
    ("exc", "raised"), [(KeyboardInterrupt, KeyboardInterrupt), (OSError, OutputError)]
)
def test_interrupted_write_leaves_old_file_and_no_temp(tmp_path, monkeypatch, exc, raised):
    p = tmp_path / "out.txt"
    p.write_text("old")

    def boom(*a, **k):
        raise exc("interrupted")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(raised):
        atomic_write_text(p, "new")
    assert p.read_text() == "old" and os.listdir(tmp_path) == ["out.txt"]


def test_check_output_path(tmp_path):
    traces = tmp_path / "study" / "ws1"
    traces.mkdir(parents=True)
    (traces / "rank0.pt.trace.json").write_text('{"traceEvents": []}')
    other = tmp_path / "reports"
    other.mkdir()
    (other / "old.json").write_text('{"traceEvents": [1]}')
    inputs = [str(tmp_path / "study")]
    check_output_path(other / "report.md", inputs, force=False)  # fine
    with pytest.raises(UsageError, match="existing trace file"):
        check_output_path(other / "old.json", inputs, force=False)
    with pytest.raises(UsageError, match="folder of input traces"):
        check_output_path(traces / "report.md", inputs, force=False)
    with pytest.raises(UsageError, match="input file"):
        check_output_path(
            traces / "rank0.pt.trace.json", [str(traces / "rank0.pt.trace.json")], False
        )
    check_output_path(traces / "report.md", inputs, force=True)
    check_output_path(other / "old.json", inputs, force=True)
