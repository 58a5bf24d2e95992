"""`tracescale compare` through the CLI: the TensorBoard plugin's before/after pair and the gate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracescale.cli.main import cli, main


def _compare(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(cli, ["compare", *args, "-j1", "--no-cache", "--format", "json"])
    return res.exit_code, res.output


def test_dataloader_fix_is_named_and_improved(shared_traces: Path) -> None:
    before = shared_traces / "tb_plugin" / "resnet50_num_workers_0"
    after = shared_traces / "tb_plugin" / "resnet50_num_workers_4"
    code, out = _compare(str(before), str(after))
    assert code == 0, out
    doc = json.loads(out)
    assert doc["verdict"] == "improved"
    [run] = doc["runs"]
    assert run["verdict"] == "improved" and run["step_time_s"]["significant"]
    assert run["main_change"]["category"] == "dataloader"
    assert run["breakdown_delta_s"]["dataloader"] < -0.03  # ~47 ms less data loading per step


def test_gate_exit_codes_both_ways(shared_traces: Path, tmp_path: Path, capsys) -> None:
    fast = shared_traces / "tb_plugin" / "resnet50_num_workers_4"
    slow = shared_traces / "tb_plugin" / "resnet50_num_workers_0"
    saved = tmp_path / "fast.json"
    res = CliRunner().invoke(cli, ["analyze", str(fast), "-j1", "--no-cache", "-o", str(saved)])
    assert res.exit_code == 0, res.output
    # Getting slower by more than 5% fails the gate (exit 1) ...
    code, out = _compare(str(saved), str(slow), "--fail-on-regression", "5")
    assert code == 1, out
    assert json.loads(out)["verdict"] == "regressed"
    # ... getting faster passes it, and a generous threshold passes a regression too.
    assert _compare(str(slow), str(saved), "--fail-on-regression", "5")[0] == 0
    assert _compare(str(saved), str(slow), "--fail-on-regression", "50")[0] == 0


def test_bad_path_is_one_line_with_its_exit_code(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["compare", str(tmp_path / "missing"), str(tmp_path / "missing2")])
    assert exc.value.code == 4
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tracescale: error: ")
