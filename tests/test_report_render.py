"""Renderers of the analyze document: exact text for key numbers, schema, formats, HTML rules."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tracescale.errors import UsageError
from tracescale.report import guess_format, render
from tracescale.report.schemas import validate

FIXTURES = Path(__file__).parent / "fixtures"


def load(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((FIXTURES / f"study_{name}.json").read_text())
    return doc


@pytest.fixture
def strong() -> dict[str, Any]:
    return load("strong")


@pytest.mark.parametrize("name", ["strong", "weak", "single"])
def test_fixtures_and_json_output_validate(name: str) -> None:
    doc = load(name)
    validate(doc)
    out = render(doc, "json")
    validate(json.loads(out))
    assert json.loads(out) == doc


def test_json_output_turns_nan_into_null(strong: dict[str, Any]) -> None:
    strong["studies"][0]["scaling"]["amdahl_limit"] = float("inf")
    out = json.loads(render(strong, "json"))
    assert out["studies"][0]["scaling"]["amdahl_limit"] is None
    validate(out)


def test_markdown_key_lines(strong: dict[str, Any]) -> None:
    md = render(strong, "markdown").splitlines()
    assert md[0] == "# tracescale report"
    assert "## Study: traces/strong" in md
    assert "| Step time (mean) | 354.5 ms | 230.8 ms | 173.4 ms | 141.1 ms |" in md, (
        "breakdown header row"
    )
    assert (
        "| Data loading | 59.7 ms (16.9%) | 59.9 ms (26.0%) | 61.6 ms (35.5%) | 60.9 ms (43.2%) |"
        in md
    )
    assert "| 8 | 141.1 ms | 2.51x | 31.4% | 0.312 |" in md
    assert "| Total | 28.2% (90% CI [26.7%, 29.9%]) | 3.54x |" in md
    assert "| 64 | 117.0 ms | [112.3 ms, 122.8 ms] | 3.03x | 4.7% |" in md
    assert "| dataloader=0 | 64 | 57.0 ms | [54.7 ms, 59.9 ms] | 5.17x | 8.1% |" in md
    assert md.count("### Findings (biggest lever first)") == 1
    assert md[md.index("### Findings (biggest lever first)") + 2].startswith(
        "1. Data loading takes 60.9 ms per step (43%) at 8 GPUs; it does not shrink"
    )


def test_table_key_lines(strong: dict[str, Any]) -> None:
    text = render(strong, "table", width=120)
    lines = [re.sub(r"\s+", " ", x).strip() for x in text.splitlines()]
    assert "Study: traces/strong" in lines
    assert "Step time (mean) 354.5 ms 230.8 ms 173.4 ms 141.1 ms" in lines
    assert "Data loading 59.7 ms (16.9%) 59.9 ms (26.0%) 61.6 ms (35.5%) 60.9 ms (43.2%)" in lines
    assert "8 141.1 ms 2.51x 31.4% 0.312" in lines
    assert "Total 28.2% (90% CI [26.7%, 29.9%]) 3.54x" in lines
    assert "64 117.0 ms [112.3 ms, 122.8 ms] 3.03x 4.7%" in lines
    assert any(
        x.startswith("1. Data loading takes 60.9 ms per step (43%) at 8 GPUs") for x in lines
    )


def test_weak_mode_shows_gustafson_and_single_run_says_assumed() -> None:
    md = render(load("weak"), "markdown")
    assert "| N | Step time | Speedup | Efficiency | Karp–Flatt | Gustafson |" in md
    assert "Weak scaling: speedup is throughput speedup." in md
    single = render(load("single"), "markdown")
    assert "_Assumed: a single run cannot be fitted; default per-category assumptions._" in single
    assert "Baseline: 4 GPUs (single run: projections use default assumptions)" in single


def test_every_study_of_a_document_is_rendered(strong: dict[str, Any]) -> None:
    doc = copy.deepcopy(strong)
    doc["studies"].append(load("weak")["studies"][0])
    for fmt in ("markdown", "table", "html"):
        out = render(doc, fmt)
        assert "Study 1 of 2: traces/strong" in out
        assert "Study 2 of 2: traces/weak" in out
    validate(json.loads(render(doc, "json")))


def test_minimal_study_without_optional_keys_renders() -> None:
    doc = load("single")
    st = doc["studies"][0]
    for k in ("findings", "warnings"):
        st.pop(k, None)
    st["runs"][0].pop("step_times_s")
    st["runs"][0]["per_rank"] = []
    for fmt in ("markdown", "table", "html", "json"):
        assert render(doc, fmt)


def test_added_keys_are_rendered_when_present(strong: dict[str, Any]) -> None:
    md = render(strong, "markdown")
    assert "### Overheads that grow with N (seconds per step each adds)" in md
    assert "| Source | N=64 |\n|:---|---:|\n| AllReduce | 13.0 ms |" in md
    assert "| 8 | 8 | 6 | 1.2% | 3 | 155.4 ms | 155.4 ms |" in md
    sc = strong["studies"][0]["scaling"]
    del sc["step_stats"]
    sc["overheads"] = [{"world_size": 64, "overhead_s": 0.5}]
    strong["studies"][0]["runs"][0]["step_stats"] = {"cv": 0.031}
    sc["what_if"] = [dict(p, label="sync=0.5") for p in sc["projections"]]
    md = render(strong, "markdown")
    assert "| world_size | overhead_s |" in md
    assert "### Step statistics" in md and "0.031" in md
    assert "| sync=0.5 | 64 | 117.0 ms | [112.3 ms, 122.8 ms] | 3.03x | 4.7% |" in md
    validate(strong)


def test_guess_format_and_unknown_format(strong: dict[str, Any]) -> None:
    assert guess_format("out/report.HTML") == "html"
    assert guess_format("study.json") == "json"
    assert guess_format("r.md") == "markdown"
    assert guess_format("r.txt") == "table"
    assert guess_format("r.bin") is None and guess_format(None) is None
    with pytest.raises(UsageError):
        render(strong, "pdf")


def test_html_is_self_contained_and_small(strong: dict[str, Any]) -> None:
    out = render(strong, "html")
    assert len(out.encode()) < 5 * 1024 * 1024
    assert "http://" not in out and "https://" not in out
    assert not re.search(r"<(script|img|link|iframe)[^>]*\b(src|href)=", out)
    assert "@import" not in out and "url(" not in out
    assert out.count('<script type="application/json" id="ts-data">') == 1
    assert '<div class="charts" data-index="0">' in out


def test_html_escapes_text_and_embedded_json(strong: dict[str, Any]) -> None:
    strong["studies"][0]["path"] = "a</script><b>&"
    out = render(strong, "html")
    assert "a</script><b>" not in out
    assert "a&lt;/script&gt;&lt;b&gt;&amp;" in out


def test_html_stays_under_5mb_with_1024_ranks(strong: dict[str, Any]) -> None:
    run = strong["studies"][0]["runs"][-1]
    proto = run["per_rank"][0]
    run["per_rank"] = [dict(proto, rank=i) for i in range(1024)]
    run["paths"] = [
        f"/very/long/path/to/traces/host{i}/rank{i}.pt.trace.json.gz" for i in range(1024)
    ]
    assert len(render(strong, "html").encode()) < 5 * 1024 * 1024


def test_code_spans_in_findings_become_code_in_html(strong: dict[str, Any]) -> None:
    strong["studies"][0]["findings"][0]["text"] = "mostly `aten::mm<float>` (80%)"
    out = render(strong, "html")
    assert "<li>mostly <code>aten::mm&lt;float&gt;</code> (80%)</li>" in out
    assert "mostly `aten::mm<float>` (80%)" in render(strong, "markdown")


def test_fmt_rounds_to_meaningful_digits() -> None:
    from tracescale.report import fmt

    assert [fmt.times(v) for v in (0.966, 3.214, 12.84, 174.3, 2765.2, 116092.4)] == [
        "0.97x",
        "3.21x",
        "12.8x",
        "174x",
        "2,765x",
        "116,092x",
    ]
    assert [fmt.cap(v) for v in (0.169, 0.0057, 8.6e-6, 0.0, None)] == [
        "5.92x",
        "175x",
        "none (>1,000x)",
        "none",
        "–",
    ]
    assert [fmt.secs(v) for v in (0.6000000000000001e-3, 3e-7, 0.0, 123.4)] == [
        "600 µs",
        "<1 µs",
        "0 ms",
        "123 s",
    ]
    assert fmt.params({"alpha_s": 1.6e-4, "bandwidth_bytes_per_s": 3.2e7, "c": 0.0}) == (
        "alpha=160 µs, bandwidth=32 MB/s"
    )
    assert fmt.params({"a": 0.0, "b": 0.0, "bandwidth_bytes_per_s": None}) == "a=0 ms"
    assert fmt.label("sendrecv") == "SendRecv"


def test_documents_from_before_karp_flatt_raw_still_render(strong, tmp_path, capsys) -> None:
    """Older documents hold the formula's value (3.2: slower) in karp_flatt itself: still a
    valid study, and the table says what it means."""
    from tracescale.cli.main import main

    point = strong["studies"][0]["scaling"]["points"][1]
    point["karp_flatt"] = 3.2
    point.pop("karp_flatt_raw", None)
    validate(strong)
    path = tmp_path / "old.json"
    path.write_text(json.dumps(strong))
    main(["report", str(path), "--format", "markdown"])
    out = capsys.readouterr().out
    assert f"| {point['world_size']} |" in out and ">1 (slower)" in out
