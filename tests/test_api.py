"""A notebook session against the public API only, checked number for number against the CLI.

Everything here goes through ``import tracescale`` (analyze, Study, load, compare); the CLI
runs through click's CliRunner with ``--format json -j1 --no-cache`` and its JSON must equal
``tracescale.analyze(path, jobs=1, no_cache=True).to_json()`` exactly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import tracescale

CATEGORIES = (
    "compute",
    "memcpy",
    "communication",
    "dataloader",
    "sync",
    "reduction",
    "host",
    "idle",
)
FORMATS = ("table", "json", "markdown", "html")


def _cli(*args: str) -> Any:
    from tracescale.cli.main import cli

    res = CliRunner().invoke(cli, list(args))
    assert res.exit_code == 0, (res.output, res.exception)
    return res


def _cli_json(*args: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(_cli(*args).stdout)
    return doc


@pytest.fixture(scope="module")
def sim_study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A simulated strong study at N=1,2,4 (``tracescale simulate``)."""
    out = tmp_path_factory.mktemp("api") / "sim"
    _cli("simulate", "--out", str(out), "--world-sizes", "1,2,4", "--steps", "4")
    return out


@pytest.fixture(scope="module")
def sim_faster(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same study with a 4x faster data loader (the 'after' of a fix)."""
    out = tmp_path_factory.mktemp("api") / "sim_fast"
    _cli(
        "simulate",
        "--out",
        str(out),
        "--world-sizes",
        "1,2,4",
        "--steps",
        "4",
        "--set",
        "dl_parallel=0.0075",
    )
    return out


@pytest.fixture(scope="module")
def sim_analyzed(sim_study: Path) -> tracescale.Study:
    """``tracescale.analyze(sim_study, jobs=1, no_cache=True)``, once for the module: the
    tests below read it (render, save, compare) and never edit it."""
    return tracescale.analyze(sim_study, jobs=1, no_cache=True)


def _real(shared: Path, rel: str) -> Path:
    path = shared / rel
    if not path.exists():
        pytest.skip(f"{path} not present")
    return path


# -- the CLI's JSON, reproduced exactly --------------------------------------------------------


def _check_cli_equals_api(path: Path, study: tracescale.Study | None = None) -> tracescale.Study:
    cli_doc = _cli_json("analyze", str(path), "--format", "json", "-j1", "--no-cache", "-q")
    if study is None:
        study = tracescale.analyze(path, jobs=1, no_cache=True)
    assert json.loads(study.to_json()) == cli_doc
    return study


def test_cli_json_equals_api_tb_plugin(shared_traces: Path) -> None:
    study = _check_cli_equals_api(_real(shared_traces, "tb_plugin/resnet50_num_workers_0"))
    assert study.runs and study.runs[0]["steps"] > 0


def test_cli_json_equals_api_hta_trace_filter(shared_traces: Path) -> None:
    study = _check_cli_equals_api(_real(shared_traces, "hta/trace_filter"))
    assert study.runs[0]["world_size"] == 128


def test_cli_json_equals_api_simulated(sim_study: Path, sim_analyzed: tracescale.Study) -> None:
    study = _check_cli_equals_api(sim_study, sim_analyzed)
    assert [r["world_size"] for r in study.runs] == [1, 2, 4]


def test_cli_options_reach_the_api(sim_study: Path) -> None:
    """--mode, --project, --what-if and --steps are the keyword arguments of analyze."""
    cli_doc = _cli_json(
        "analyze",
        str(sim_study),
        "--format",
        "json",
        "-j1",
        "--no-cache",
        "-q",
        "--mode",
        "strong",
        "--project",
        "8,16",
        "--what-if",
        "dataloader=0",
        "--steps",
        "11:",
    )
    study = tracescale.analyze(
        sim_study,
        mode="strong",
        project=[8, 16],
        what_if={"dataloader": 0.0},
        steps="#11:",
        jobs=1,
        no_cache=True,
    )
    assert json.loads(study.to_json()) == cli_doc
    scaling = study.studies[0]["scaling"]
    assert [p["world_size"] for p in scaling["projections"]] == [8, 16]
    assert scaling["what_if"], "the what-if scenario is in the document"
    assert all(r["steps"] == 3 for r in study.runs)  # #10..#13, #10 dropped


# -- a notebook session ------------------------------------------------------------------------


def test_notebook_session(sim_analyzed: tracescale.Study, tmp_path: Path) -> None:
    study = sim_analyzed
    assert isinstance(study, tracescale.Study)

    # Tidy breakdown: one row per world size, rank, step and category, in seconds.
    df = study.breakdown()
    assert list(df.columns) == ["study", "world_size", "rank", "step", "category", "seconds"]
    assert set(df["category"]) == set(CATEGORIES)
    df = df.astype({"world_size": "int64", "rank": "int64", "seconds": "float64"})
    for run in study.runs:
        sub = df[df["world_size"] == run["world_size"]]
        assert sorted(set(sub["rank"])) == run["ranks"]
        # Mean per rank of the per-step seconds, averaged over ranks = the run's breakdown.
        per_rank = sub.groupby(["rank", "category"])["seconds"].sum() / run["steps"]
        mean = per_rank.groupby("category").mean()
        for c in CATEGORIES:
            assert mean[c] == pytest.approx(run["breakdown_s"][c], rel=1e-9, abs=1e-12)
        # Categories tile the step: their sum per rank is the step time.
        step = sub.groupby("rank")["seconds"].sum().mean() / run["steps"]
        assert step == pytest.approx(run["step_time_s"]["mean"], rel=1e-9)

    # Scaling: typed when just computed, the same numbers as the document.
    doc_scaling = study.studies[0]["scaling"]
    sf = study.scaling.serial_fraction
    assert sf.total == pytest.approx(doc_scaling["serial_fraction"]["total"])
    assert 0 < sf.total < 1
    assert study.scaling.mode == "strong"
    assert [p.world_size for p in study.scaling.points] == [1, 2, 4]

    # Save / load round trip: the same document, the same renders, the same breakdown.
    path = tmp_path / "study.json"
    study.save(path)
    again = tracescale.load(path)
    assert again.doc == json.loads(study.to_json())
    assert again == tracescale.Study(doc=again.doc)
    for fmt in FORMATS:
        assert again.render(fmt) == study.render(fmt)
    assert again.breakdown().equals(study.breakdown())
    # A loaded study has no typed scaling; its dict says the same.
    assert again.scaling["serial_fraction"]["total"] == doc_scaling["serial_fraction"]["total"]

    # Renders in the four formats.
    out = {fmt: study.render(fmt) for fmt in FORMATS}
    assert json.loads(out["json"]) == study.doc
    assert "|" in out["markdown"] and "compute" in out["markdown"]
    assert out["html"].lstrip().lower().startswith("<!doctype html")
    assert "compute" in out["table"]

    # The saved file re-renders through the CLI like the API does.
    assert _cli("report", str(path), "--format", "markdown").stdout.rstrip() == (
        out["markdown"].rstrip()
    )


def test_public_compare_stays_the_function() -> None:
    """The comparison code lives in ``tracescale.comparison`` so it never shadows the API."""
    import tracescale.comparison.core

    assert callable(tracescale.compare)


def _compare(before: Any, after: Any, **kwargs: Any) -> tracescale.Comparison:
    return tracescale.compare(before, after, **kwargs)


def test_compare_before_after(
    sim_analyzed: tracescale.Study, sim_faster: Path, tmp_path: Path
) -> None:
    before = sim_analyzed
    after = tracescale.analyze(sim_faster, jobs=1, no_cache=True)
    cmp = _compare(before, after)
    assert isinstance(cmp, tracescale.Comparison)
    assert cmp.verdict == "improved"
    runs = cmp.doc["runs"]
    assert [r["world_size"] for r in runs] == [1, 2, 4]
    assert all(r["verdict"] == "improved" for r in runs)
    for fmt in FORMATS:
        assert cmp.render(fmt)
    assert cmp.exit_code(None) == 0

    # Saved studies and trace folders compare the same, and the CLI agrees.
    before.save(tmp_path / "before.json")
    from_files = _compare(tmp_path / "before.json", sim_faster, jobs=1, no_cache=True)
    assert from_files.doc == cmp.doc
    cli_doc = _cli_json(
        "compare", str(tmp_path / "before.json"), str(sim_faster), "-f", "json", "-j1", "--no-cache"
    )
    assert cli_doc == json.loads(cmp.to_json())
    # A study against itself is unchanged.
    assert _compare(before, before).verdict == "unchanged"
