"""`tracescale analyze` options that reach the workers: the memory budget."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracescale.cli.main import main

RUN = Path(__file__).resolve().parents[1] / "sample_traces" / "sim_gpu_strong" / "ws1"


def test_memory_budget_fails_early_with_one_line(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["analyze", str(RUN), "--memory-budget", "0.0001", "-j1", "--no-cache", "--strict"])
    assert exc.value.code == 3
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("tracescale: error: ") and ".pt.trace.json.gz: " in line
    assert "over the memory budget of 0.1 MB (raise it with --memory-budget)" in line


def test_every_file_over_budget_says_why(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["analyze", str(RUN), "--memory-budget", "0.0001", "-j1", "--no-cache"])
    assert exc.value.code == 3
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "no analyzable trace files (1 skipped; first: " in line and "memory budget" in line
