"""docs/cli.md is the click help of every command, regenerated (not hand-edited)."""

from __future__ import annotations

from pathlib import Path

from tracescale.cli.reference import cli_reference

DOC = Path(__file__).resolve().parents[1] / "docs" / "cli.md"


def test_cli_reference_is_current() -> None:
    assert DOC.read_text() == cli_reference(), (
        "docs/cli.md is stale: run `python -m tracescale.cli.reference > docs/cli.md`"
    )


def test_every_command_is_documented() -> None:
    text = DOC.read_text()
    for name in ("analyze", "annotate", "compare", "inspect", "report", "simulate", "sweep"):
        assert f"## tracescale {name}" in text
