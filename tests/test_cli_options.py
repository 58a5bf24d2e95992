"""CLI conventions: global options after the subcommand, --steps by step number, -o types."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracescale.cli.main import cli, main
from tracescale.errors import UsageError
from tracescale.pipeline import parse_steps

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "ddp_cpu_strong" / "ws2"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("12:", slice(12, None)),
        ("#12:", slice(12, None)),
        ("#10:#14", slice(10, 14)),
        ("10:14", slice(10, 14)),
        ("#12", slice(12, 13)),
        (":-1", slice(None, -1)),
        ("-2:", slice(-2, None)),
        (" 3: ", slice(3, None)),
        ("", None),
        (None, None),
    ],
)
def test_steps_spellings(spec: str | None, expected: slice | None) -> None:
    assert parse_steps(spec) == expected


@pytest.mark.parametrize("spec", ["2", "12", "x:", "1:2:3", "#", "#-1", "a:b"])
def test_steps_rejects_ambiguous_or_malformed(spec: str) -> None:
    with pytest.raises(UsageError) as exc:
        parse_steps(spec)
    if spec.isdigit():
        assert f"--steps {spec} is ambiguous: write #{spec} for ProfilerStep#{spec} alone" in str(
            exc.value
        )
    else:
        assert "--steps takes ProfilerStep numbers" in str(exc.value)


def _steps_kept(*args: str) -> list[int]:
    res = CliRunner().invoke(cli, ["analyze", str(SAMPLE), "-f", "json", "-q", "-j1", *args])
    assert res.exit_code == 0, (res.output, res.exception)
    doc = json.loads(res.stdout)
    return [r["steps"] for r in doc["studies"][0]["runs"]]


def test_steps_are_profiler_step_numbers_not_positions() -> None:
    """The sample's steps are #2..#6 (as inspect shows): 4: keeps #4..#6, not positions 4.."""
    assert _steps_kept("--no-cache") == [5]
    assert _steps_kept("--no-cache", "--steps", "4:") == [3]
    assert _steps_kept("--no-cache", "--steps", "#4") == [1]
    assert _steps_kept("--no-cache", "--steps", "#3:#5") == [2]
    assert _steps_kept("--no-cache", "--steps", ":-1") == [4]


def test_steps_outside_the_trace_name_the_numbers_it_has(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["analyze", str(SAMPLE), "-q", "-j1", "--no-cache", "--steps", "20:"])
    assert exc.value.code == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.endswith(
        "--steps 20: keeps none of this rank's steps (#2–#6); numbers are ProfilerStep "
        "numbers, as inspect shows them"
    )


def test_bare_step_number_is_a_usage_error(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["analyze", str(SAMPLE), "-q", "--steps", "2"])
    assert exc.value.code == 2
    assert "--steps 2 is ambiguous" in capsys.readouterr().err


def test_debug_after_the_subcommand_shows_the_traceback() -> None:
    """Errors say 'rerun with --debug'; users append it, so it works after the subcommand."""
    with pytest.raises(UsageError):
        main(["analyze", str(SAMPLE), "-q", "--steps", "2", "--debug"])
    with pytest.raises(UsageError):
        main(["--debug", "analyze", str(SAMPLE), "-q", "--steps", "2"])


def test_debug_is_listed_in_every_subcommand_help() -> None:
    for name in ("analyze", "compare", "report", "inspect", "simulate", "sweep"):
        res = CliRunner().invoke(cli, [name, "--help"])
        assert res.exit_code == 0 and "--debug" in res.output, name


def test_debug_after_the_script_separator_belongs_to_the_script() -> None:
    from tracescale.cli.main import _wants_debug

    assert _wants_debug(["sweep", "--debug", "--", "train.py"])
    assert not _wants_debug(["sweep", "--out", "x", "--", "train.py", "--debug"])


@pytest.mark.parametrize("name", ["report.pdf", "report.png", "study.jsn"])
def test_unknown_output_extension_is_a_usage_error(tmp_path: Path, capsys, name: str) -> None:
    out = tmp_path / name
    with pytest.raises(SystemExit) as exc:
        main(["analyze", str(SAMPLE), "-q", "-o", str(out)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"unknown extension '{out.suffix}'" in err and "or give --format" in err
    assert not out.exists()


def test_unknown_extension_with_format_and_no_extension_are_written(tmp_path: Path) -> None:
    fixture = Path(__file__).parent / "fixtures" / "study_strong.json"
    pdf, plain = tmp_path / "report.pdf", tmp_path / "report"
    res = CliRunner().invoke(cli, ["report", str(fixture), "-f", "markdown", "-o", str(pdf)])
    assert res.exit_code == 0, res.output
    assert pdf.read_text().startswith("# tracescale report")
    res = CliRunner().invoke(cli, ["report", str(fixture), "-o", str(plain)])
    assert res.exit_code == 0, res.output
    assert "Study: traces/strong" in plain.read_text()
