"""Hostile input at the output side, each case reproduced and pinned.

Names from traces (kernels, ops, file names) holding escape sequences, line breaks or
right-to-left overrides reach the terminal table, Markdown, warnings, errors and ``inspect`` as
inert text; a compare gate never passes on NaN or missing step times; option values outside
their documented range are one-line usage errors; every error is one line.
"""

from __future__ import annotations

import copy
import gzip
import json
import os
import warnings
from pathlib import Path
from typing import Any

import pytest
from rich.cells import cell_len

from tracescale import api
from tracescale.cli.main import main
from tracescale.comparison.core import compare_docs
from tracescale.study import Study
from tracescale.text import BIDI, clean

RUN = Path(__file__).resolve().parents[1] / "sample_traces" / "sim_gpu_strong" / "ws1"
#: Retitle the terminal, a hidden hyperlink, a right-to-left override, rich markup, a C1 CSI.
HOSTILE = (
    "\x1b]0;pwned\x07k\x1b]8;;javascript:alert(1)\x1b\\x\u202egnp.exe [bold red]X[/] \x9b31m\n2"
)
#: What :func:`clean` makes of it: the escapes' remains are inert text, the override visible.
HOSTILE_CLEAN = "]0;pwnedk]8;;javascript:alert(1)\\x\\u202egnp.exe [bold red]X[/] 31m 2"
#: Characters no text output may hold raw (the terminal acts on them).
FORBIDDEN = {chr(c) for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)]} | set(BIDI)


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return api.analyze(str(RUN), jobs=1, no_cache=True).doc


def _poison(value: Any) -> Any:
    """Every string that names something gets the payload (enum-like values stay valid)."""
    if isinstance(value, dict):
        return {k: v if k == "schema_version" else _poison(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_poison(v) for v in value]
    if isinstance(value, str) and value not in ("strong", "weak", "gpu", "cpu", "auto"):
        return value + HOSTILE
    return value


def _raw_controls(text: str, *, lines: bool) -> set[str]:
    return {c for c in text if c in FORBIDDEN and not (lines and c == "\n")}


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        (HOSTILE, HOSTILE_CLEAN),
        ("a\nb\r\nc\td", "a b  c d"),
        ("\u2066x\u2069 \u200f", "\\u2066x\\u2069 \\u200f"),
        ("r\udcff.json", "r\ufffd.json"),
        ("bell\x07 nul\x00 del\x7f nel\x85end", "bell nul del nel end"),
        ("plain ✓ 中文 `code` <b>", "plain ✓ 中文 `code` <b>"),
        (42, "42"),
    ],
)
def test_clean_exact(raw: Any, shown: str) -> None:
    assert clean(raw) == shown
    assert clean(clean(raw)) == shown  # idempotent: a renderer may clean twice


def test_terminal_table_shows_names_inert_and_keeps_its_width(doc: dict[str, Any]) -> None:
    text = Study(doc=_poison(copy.deepcopy(doc))).render("table", width=100)
    assert _raw_controls(text, lines=True) == set()
    assert all(cell_len(line) <= 100 for line in text.splitlines())
    assert "\\u202egnp.exe" in text and "[bold red]X[/]" in text  # rich markup stays text


def test_terminal_table_in_colour_prints_only_rich_escapes(doc: dict[str, Any]) -> None:
    text = Study(doc=_poison(copy.deepcopy(doc))).render("table", width=100, color=True)
    assert "\x1b]" not in text and "\x07" not in text and "\x9b" not in text
    assert set(BIDI) & set(text) == set()


def test_markdown_shows_names_inert(doc: dict[str, Any]) -> None:
    text = Study(doc=_poison(copy.deepcopy(doc))).render("markdown")
    assert _raw_controls(text, lines=True) == set()
    assert "\\u202egnp.exe" in text


def test_json_keeps_names_exact_with_controls_escaped(doc: dict[str, Any]) -> None:
    poisoned = _poison(copy.deepcopy(doc))
    text = Study(doc=poisoned).render("json")
    assert _raw_controls(text, lines=True) == set()
    assert "\\u001b]0;pwned\\u0007" in text and "\\u202egnp.exe" in text and "\\u009b31m" in text
    assert json.loads(text)["studies"][0]["path"] == poisoned["studies"][0]["path"]


def test_a_kernel_name_in_the_table_row_exactly(doc: dict[str, Any]) -> None:
    d = copy.deepcopy(doc)
    d["studies"][0]["runs"][0]["top_ops"]["compute"][0]["name"] = "kern\x1b]0;t\x07\u202eX"
    md = Study(doc=d).render("markdown")
    assert "| kern]0;t\\u202eX |" in md
    table = Study(doc=d).render("table", width=120)
    assert any(line.strip().startswith("kern]0;t\\u202eX  ") for line in table.splitlines())


def test_compare_table_and_markdown_inert(doc: dict[str, Any]) -> None:
    bad = _poison(copy.deepcopy(doc))
    comparison = api.Comparison(doc=compare_docs(doc, bad))
    for fmt in ("table", "markdown"):
        assert _raw_controls(comparison.render(fmt, width=90), lines=True) == set(), fmt


def test_error_line_with_newline_and_escape_in_the_file_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = tmp_path / "a\nb\x1b]0;t\x07.json"
    with pytest.raises(SystemExit) as exc:
        main(["report", str(name)])
    assert exc.value.code == 4
    assert capsys.readouterr().err == f"tracescale: error: {tmp_path}/a b]0;t.json: no such file\n"


def test_inspect_of_a_rank_file_with_a_hostile_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = next(RUN.glob("*.json.gz"))
    doc = json.loads(gzip.decompress(src.read_bytes()))
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel":
            e["name"] = "k" + HOSTILE
    run = tmp_path / "ws1"
    run.mkdir()
    (run / ("r\x1b]0;t\x07\u202e.pt.trace.json.gz")).write_bytes(
        gzip.compress(json.dumps(doc).encode())
    )
    assert main(["inspect", str(run)]) in (None, 0)
    out = capsys.readouterr().out
    assert _raw_controls(out, lines=True) == set() and "r]0;t\\u202e.pt.trace.json.gz" in out


# --- a gate never passes on no data ---------------------------------------------------------


def _runs(d: dict[str, Any]) -> list[dict[str, Any]]:
    return d["studies"][0]["runs"]


def _nan_steps(doc: dict[str, Any]) -> dict[str, Any]:
    d = copy.deepcopy(doc)
    for r in _runs(d):
        r["step_times_s"] = [float("nan")] * len(r["step_times_s"])
        r["step_time_s"] = {k: float("nan") for k in r["step_time_s"]}
    return d


def test_all_nan_step_times_are_not_comparable_and_fail_the_gate(doc: dict[str, Any]) -> None:
    c = compare_docs(doc, _nan_steps(doc), fail_on_regression_pct=5)
    run = c["runs"][0]
    assert run["verdict"] == c["verdict"] == "not comparable"
    assert run["not_comparable"] == "after: step time nan"
    assert c["summary"] == ["N=1: not comparable (after: step time nan)"]
    assert c["gate"]["failed"] and c["gate"]["exit_code"] == 3
    assert c["gate"]["reasons"] == [
        "N=1: not comparable (after: step time nan); a gate never passes on no data"
    ]
    assert compare_docs(doc, _nan_steps(doc))["gate"]["exit_code"] == 0  # no gate, no failure


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        (lambda r: r["step_time_s"].pop("mean"), "no step time"),
        (lambda r: r.pop("step_time_s"), "no step time"),
        (lambda r: r["step_time_s"].update(mean=None), "step time None"),
        (lambda r: r["step_time_s"].update(mean=0.0), "step time 0.0"),
        (lambda r: r["step_time_s"].update(mean=float("inf")), "step time inf"),
        (
            lambda r: r.update(step_times_s=[0.1, float("nan"), None]),
            "2 of 3 step times NaN, infinite or outside 1 ns to 1,000,000 s",
        ),
    ],
)
def test_missing_or_broken_step_times_fail_the_gate(doc: dict[str, Any], edit: Any, why: str):
    bad = copy.deepcopy(doc)
    edit(_runs(bad)[0])
    for before, after, side in ((doc, bad, "after"), (bad, doc, "before")):
        c = compare_docs(before, after, fail_on_regression_pct=0)
        assert c["runs"][0]["not_comparable"] == f"{side}: {why}"
        assert c["gate"]["exit_code"] == 3


@pytest.mark.parametrize("mean", [1e308, 5e-324, -0.1])
def test_absurd_step_times_are_not_comparable_without_numpy_warnings(
    doc: dict[str, Any], mean: float
) -> None:
    bad = copy.deepcopy(doc)
    run = _runs(bad)[0]
    run["step_time_s"]["mean"] = mean
    run["step_times_s"] = [mean] * len(run["step_times_s"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c = compare_docs(doc, bad, fail_on_regression_pct=5)
    assert c["runs"][0]["not_comparable"] == f"after: step time {mean!r}"
    assert c["runs"][0]["step_time_s"]["change_pct"] is None and c["gate"]["exit_code"] == 3


def test_compare_cli_exits_3_on_nan_with_a_gate_and_0_without(
    doc: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good, nan = tmp_path / "good.json", tmp_path / "nan.json"
    good.write_text(json.dumps(doc))
    nan.write_text(json.dumps(_nan_steps(doc)))  # NaN literals, as a careless writer leaves them
    with pytest.raises(SystemExit) as exc:
        main(["compare", str(good), str(nan), "--fail-on-regression", "5"])
    assert exc.value.code == 3
    out = capsys.readouterr().out
    assert "Overall: not comparable" in out and "FAILED, exit code 3" in out
    assert main(["compare", str(good), str(nan)]) in (None, 0)
    assert "unchanged" not in capsys.readouterr().out


def test_a_side_without_gpu_events_is_said(doc: dict[str, Any]) -> None:
    cpu = copy.deepcopy(doc)
    _runs(cpu)[0]["kind"] = "cpu"
    assert compare_docs(doc, cpu)["warnings"] == [
        "N=1: the after side has no GPU events (gpu run before, cpu run after): step times "
        "compare, GPU categories do not"
    ]
    assert "the before side has no GPU events" in compare_docs(cpu, doc)["warnings"][0]
    assert compare_docs(doc, doc)["warnings"] == []


def test_compare_with_the_gpu_events_stripped_says_so(doc: dict[str, Any], tmp_path: Path) -> None:
    src = next(RUN.glob("*.json.gz"))
    trace = json.loads(gzip.decompress(src.read_bytes()))
    gpu = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"}
    trace["traceEvents"] = [e for e in trace["traceEvents"] if e.get("cat") not in gpu]
    run = tmp_path / "ws1"
    run.mkdir()
    (run / src.name).write_bytes(gzip.compress(json.dumps(trace).encode()))
    c = api.compare(Study(doc=doc), str(run), jobs=1, no_cache=True)
    assert (
        "N=1: the after side has no GPU events (gpu run before, cpu run after): step times "
        "compare, GPU categories do not"
    ) in c.doc["warnings"]


# --- options validated at the edge, every error one line ------------------------------------


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--what-if", "dataloader=1e13"],
            "tracescale: error: --what-if factor must be a number from 0 to 1000, got '1e13'",
        ),
        (
            ["--what-if", "dataloader=1e308"],
            "tracescale: error: --what-if factor must be a number from 0 to 1000, got '1e308'",
        ),
        (
            ["--project", "1" + "0" * 24],
            "tracescale: error: --project takes world sizes from 1 to 1048576, not "
            "'1000000000000000000000000'",
        ),
        (
            ["--steps", "99999999999999999999:"],
            "tracescale: error: --steps bounds are ProfilerStep numbers from -2147483647 to "
            "2147483647, not '99999999999999999999:'",
        ),
        (
            ["--memory-budget", "1e300"],
            "tracescale: error: Invalid value for '--memory-budget': '1e300' is out of range: "
            "above 0 to 1,000,000 GB (see 'tracescale analyze --help')",
        ),
        (
            ["--inter-node-bandwidth", "nan"],
            "tracescale: error: Invalid value for '--inter-node-bandwidth': 'nan' must be a "
            "positive, finite number of GB/s (see 'tracescale analyze --help')",
        ),
        (
            ["--inter-node-latency", "1e308"],
            "tracescale: error: Invalid value for '--inter-node-latency': '1e308' is out of "
            "range: from 0 to 1,000,000 us (see 'tracescale analyze --help')",
        ),
        (
            ["--jobs", "100000000000"],
            "tracescale: error: Invalid value for '--jobs' / '-j': 100000000000 is not in the "
            "range 1<=x<=1024. (see 'tracescale analyze --help')",
        ),
    ],
)
def test_absurd_option_values_are_one_line_usage_errors(
    args: list[str], line: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["analyze", str(tmp_path / "none"), *args])
    assert exc.value.code == 2
    assert capsys.readouterr().err == line + "\n"


def test_the_largest_what_if_factor_still_works() -> None:
    from tracescale.cli.options import WHAT_IF_MAX, parse_project, parse_what_if

    assert parse_what_if((f"dataloader={WHAT_IF_MAX:g}",)) == {"dataloader": WHAT_IF_MAX}
    assert parse_project("1,1048576") == [1, 1048576]


def test_click_usage_errors_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["analyze", "--no-such-option"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("tracescale: error: No such option '--no-such-option'")
    assert err.endswith("(see 'tracescale analyze --help')\n") and err.count("\n") == 1


def test_report_of_a_folder_is_exit_3_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["report", str(tmp_path)])
    assert exc.value.code == 3
    assert capsys.readouterr().err == (
        f"tracescale: error: {tmp_path}: is a folder, not a saved study or compare JSON "
        "(`analyze` reads trace folders)\n"
    )


def test_unreadable_study_json_is_exit_3_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = tmp_path / "study.json"
    doc.write_text("{}")
    doc.chmod(0)
    if os.geteuid() == 0:  # root reads whatever the mode (CI runs as root): the OS's refusal
        import builtins

        import tracescale.study

        def refuse(file: object, *args: object, **kwargs: object) -> object:
            if str(file) == str(doc):
                raise PermissionError(13, "Permission denied", str(file))
            return builtins.open(file, *args, **kwargs)  # type: ignore[call-overload]

        monkeypatch.setattr(tracescale.study, "open", refuse, raising=False)
    with pytest.raises(SystemExit) as exc:
        main(["report", str(doc)])
    assert exc.value.code == 3
    assert capsys.readouterr().err.count("\n") == 1
