"""The README shows real output: its demo block is what `tracescale analyze` prints today."""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from tracescale.cli.main import cli

ROOT = Path(__file__).resolve().parents[1]


def test_readme_demo_output_is_real() -> None:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"## What it prints.*?```\n(.*?)```", text, re.S)
    assert block is not None
    shown = [line for line in block.group(1).splitlines() if line.strip() and line != "..."]
    res = CliRunner().invoke(
        cli,
        ["analyze", str(ROOT / "sample_traces" / "sim_gpu_strong"), "-j1", "--no-cache"],
        env={"COLUMNS": None, "FORCE_COLOR": None},  # what a pipe gets, as pasted
    )
    assert res.exit_code == 0, res.output
    actual = [line.rstrip() for line in res.output.splitlines()]
    for line in shown:
        if line.startswith("Study: "):
            continue  # the path differs by where the repository is
        assert line.rstrip() in actual, f"README line not in today's output: {line!r}"


def test_readme_names_the_two_setup_commands_and_exit_codes() -> None:
    text = (ROOT / "README.md").read_text()
    assert "make demo" in text and "make test" in text
    for code in ("| 0 |", "| 1 |", "| 2 |", "| 3 |", "| 4 |"):
        assert code in text
