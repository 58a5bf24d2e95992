"""`report` on a saved compare document: re-rendered in every format, checked against its schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.test_compare import load, shifted
from tracescale.cli.main import cli, main
from tracescale.comparison import compare_docs
from tracescale.errors import EXIT_INVALID_TRACE
from tracescale.report import render_compare


def _saved_comparison(tmp_path: Path) -> tuple[Path, dict]:
    before = load()
    doc = compare_docs(before, shifted(before, "dataloader", -0.040))
    path = tmp_path / "cmp.json"
    path.write_text(json.dumps(doc))
    return path, doc


def test_report_re_renders_a_saved_comparison_in_every_format(tmp_path: Path) -> None:
    path, doc = _saved_comparison(tmp_path)
    for fmt in ("table", "markdown", "json", "html"):
        res = CliRunner().invoke(cli, ["report", str(path), "--format", fmt])
        assert res.exit_code == 0, res.output
        assert res.output.rstrip("\n") == render_compare(doc, fmt, width=120).rstrip("\n")
    res = CliRunner().invoke(cli, ["report", str(path), "--format", "json"])
    assert json.loads(res.output) == doc


def test_damaged_comparison_is_named_as_a_compare_document(tmp_path: Path, capsys) -> None:
    path, doc = _saved_comparison(tmp_path)
    doc["runs"] = "not a list"
    path.write_text(json.dumps(doc))
    with pytest.raises(SystemExit) as exc:
        main(["report", str(path)])
    assert exc.value.code == EXIT_INVALID_TRACE
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"tracescale: error: {path}: damaged compare document at runs: "
        "'not a list' is not of type 'array'"
    ]


def test_a_compare_document_given_as_a_study_says_what_it_is(tmp_path: Path, capsys) -> None:
    path, _ = _saved_comparison(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(["compare", str(path), str(path)])
    assert exc.value.code == EXIT_INVALID_TRACE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a compare document, not a study" in err
    assert "tracescale report" in err
