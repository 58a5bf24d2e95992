"""Startup stays light: `--help` imports no subcommand, `report` neither pandas nor scipy,
small studies no numba (each checked in a fresh interpreter, by the modules it ends up holding)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest

from tracescale.cli.main import _SUBCOMMANDS, SUMMARIES

ROOT = Path(__file__).parents[1]
HEAVY = ("pandas", "scipy", "numba")


def _modules_after(args: list[str]) -> set[str]:
    code = (
        "import sys, json\n"
        "from tracescale.cli.main import main\n"
        "try:\n"
        f"    main({args!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_help_imports_no_subcommand_and_nothing_heavy() -> None:
    assert not _modules_after(["--help"]) & set(HEAVY)


@pytest.mark.parametrize("name", sorted(_SUBCOMMANDS))
@pytest.mark.parametrize("limit", [45, 70])
def test_summaries_are_the_commands_own(name: str, limit: int) -> None:
    import importlib

    command = getattr(importlib.import_module(_SUBCOMMANDS[name]), name)
    want = command.get_short_help_str(limit)
    assert click.Command(None, help=SUMMARIES[name]).get_short_help_str(limit) == want


def test_report_and_small_analyze_skip_scipy_and_numba(tmp_path: Path) -> None:
    study = tmp_path / "study.json"
    analyzed = _modules_after(
        [
            "analyze",
            str(ROOT / "sample_traces" / "sim_gpu_strong"),
            "--no-cache",
            "-q",
            "--format",
            "json",
            "-o",
            str(study),
        ]
    )
    assert study.exists() and "numba" not in analyzed  # a small study keeps the typed path
    assert "scipy" not in analyzed  # the fits use scaling.nnls
    assert "rich" not in analyzed  # only the terminal table loads it, not a JSON file's layout
    assert not _modules_after(["report", str(study)]) & set(HEAVY)
