"""Tidy frames of every report table, built from the document alone (exact numbers)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import tracescale
from tracescale import frames
from tracescale.comparison import compare_docs
from tracescale.report import fmt
from tracescale.report.sections import study_block
from tracescale.study import Study

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "study_strong.json"


def _doc() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(FIXTURE.read_text())
    return doc


def _section(doc: dict[str, Any], key: str) -> Any:
    block = study_block(doc["studies"][0])
    return next(s for s in block.sections if s.key == key)


def _is_float(df: pd.DataFrame, *cols: str) -> bool:
    return all(df[c].dtype == "float64" for c in cols)


def test_every_frame_has_its_documented_columns() -> None:
    study = Study(doc=_doc())
    for name in (
        "breakdown",
        "points",
        "projections",
        "collectives",
        "top_ops",
        "serial_fraction",
        "models",
        "overheads",
        "ranks",
        "step_stats",
    ):
        assert list(getattr(study, name)().columns) == frames.COLUMNS[name], name
    empty = Study(doc={"schema_version": 1, "studies": []})
    assert empty.points().empty and list(empty.points().columns) == frames.COLUMNS["points"]


def test_points_are_the_measured_scaling_table() -> None:
    doc = _doc()
    df = Study(doc=doc).points()
    assert df["world_size"].tolist() == [1, 2, 4, 8]
    assert _is_float(df, "step_time_s", "speedup", "efficiency", "karp_flatt")
    assert math.isnan(df.loc[0, "karp_flatt"])
    assert df.loc[1, "speedup"] == 1.53609 and df.loc[1, "karp_flatt"] == 0.302007
    assert df["gustafson_speedup"].isna().all(), "strong study: no Gustafson column values"
    # Same numbers as the report's table, formatted the report's way.
    rows = _section(doc, "points").rows
    assert [fmt.times(v) for v in df["speedup"]] == [r[2] for r in rows]
    assert [fmt.secs(v) for v in df["step_time_s"]] == [r[1] for r in rows]


def test_projections_include_what_if_scenarios() -> None:
    doc = _doc()
    df = Study(doc=doc).projections()
    main = df[df["scenario"] == ""]
    assert main["world_size"].tolist() == [16, 32, 64]
    first = main.iloc[0]
    assert (first["step_time_s"], first["ci90_low_s"], first["ci90_high_s"]) == (
        0.125,
        0.12,
        0.13125,
    )
    assert set(df["scenario"]) == {"", "dataloader=0"}
    what_if = df[df["scenario"] == "dataloader=0"]
    assert what_if.iloc[0]["step_time_s"] == 0.065
    assert len(what_if) == len(_section(doc, "what_if").rows)
    assert [fmt.secs(v) for v in main["step_time_s"]] == [
        r[1] for r in _section(doc, "projections").rows
    ]


def test_collectives_serial_models_overheads_ranks_step_stats() -> None:
    doc = _doc()
    st = doc["studies"][0]
    st["runs"][1]["communication_by_collective_s"] = {"allreduce": 0.0125, "barrier": 3e-05}
    study = Study(doc=doc)
    coll = study.collectives()
    assert coll[coll["world_size"] == 2].to_dict("records") == [
        {"study": "traces/strong", "world_size": 2, "collective": "allreduce", "seconds": 0.0125},
        {"study": "traces/strong", "world_size": 2, "collective": "barrier", "seconds": 3e-05},
    ]
    assert len(coll) == sum(len(r["communication_by_collective_s"]) for r in st["runs"])
    sf = study.serial_fraction().set_index("category")
    assert sf.loc["dataloader", "share"] == 0.169258
    assert sf.loc["dataloader", "caps_speedup_at"] == pytest.approx(1 / 0.169258)
    assert math.isnan(sf.loc["memcpy", "caps_speedup_at"])
    assert tuple(sf.loc["total", ["share", "ci90_low", "ci90_high"]]) == (
        0.282097,
        0.267097,
        0.299097,
    )
    assert sf.loc["total", "caps_speedup_at"] == st["scaling"]["amdahl_limit"]
    models = study.models()
    comm = models[models["category"] == "communication"].set_index("parameter")
    assert comm.loc["bandwidth_Bps", "value"] == 95e9 and comm.loc["alpha_s", "rmse_s"] == 0.0004
    over = study.overheads()
    assert over.iloc[0][["world_size", "source", "seconds"]].tolist() == [64, "allreduce", 0.013]
    ranks = study.ranks()
    r0 = ranks[(ranks["world_size"] == 1) & (ranks["rank"] == 0)].set_index("category")
    assert r0.loc["compute", "seconds"] == 0.258895 and r0.loc["compute", "step_time_s"] == 0.354488
    stats = study.step_stats()
    assert stats["slowest_rank"].tolist() == [0, 0, 3, 3]
    assert stats.iloc[3]["slowest_rank_mean_s"] == 0.155388 and stats.iloc[3]["cv"] == 0.012


def _law(form: str, p: float | None, flagged: bool) -> dict[str, Any]:
    return {"form": form, "exponent": p, "flagged": flagged}


def _with_top_ops(doc: dict[str, Any]) -> dict[str, Any]:
    doc["studies"][0]["runs"][0]["top_ops"] = {
        "compute": [
            {
                "name": "aten::mm",
                "seconds": 0.1,
                "share": 0.25,
                "step_sd_s": 0.001,
                "steps": 6,
                "law": _law("shrinks ~1/N", -0.98, False),
            },
            {
                "name": "aten::conv2d",
                "seconds": 0.05,
                "share": 0.125,
                "step_sd_s": 0.0,
                "steps": 6,
                "law": _law("flat", 0.01, True),
            },
        ],
        "dataloader": [
            {
                "name": "DataLoader",
                "seconds": 0.02,
                "share": 0.05,
                "law": _law("one run", None, False),
            }
        ],
    }
    return doc


def test_top_ops_from_the_documented_shape() -> None:
    df = Study(doc=_with_top_ops(_doc())).top_ops()
    assert df.to_dict("records")[1] == {
        "study": "traces/strong",
        "world_size": 1,
        "category": "compute",
        "position": 2,
        "name": "aten::conv2d",
        "seconds": 0.05,
        "share": 0.125,
        "step_sd_s": 0.0,
        "law": "flat",
        "law_exponent": 0.01,
        "flagged": True,
    }
    assert df["category"].tolist() == ["compute", "compute", "dataloader"]
    assert df["position"].tolist() == [1, 2, 1]
    assert math.isnan(df.loc[2, "law_exponent"]) and math.isnan(df.loc[2, "step_sd_s"])


def test_top_ops_of_an_analyzed_study() -> None:
    study = tracescale.analyze(ROOT / "sample_traces" / "sim_gpu_strong", jobs=1, no_cache=True)
    df = study.top_ops()
    assert not df.empty and _is_float(df, "seconds", "share", "step_sd_s", "law_exponent")
    for (n, cat), grp in df.groupby(["world_size", "category"]):
        run = next(r for r in study.runs if r["world_size"] == n)
        ops = run["top_ops"][cat]
        assert grp["name"].tolist() == [op["name"] for op in ops]
        assert grp["seconds"].tolist() == [op["seconds"] for op in ops]
        assert grp["law"].tolist() == [op["law"]["form"] for op in ops]
        assert grp["share"].tolist() == [op["share"] for op in ops]
        assert grp["position"].tolist() == list(range(1, len(ops) + 1))


def test_frames_are_reproducible_from_the_saved_study(tmp_path: Path) -> None:
    study = tracescale.analyze(ROOT / "sample_traces" / "sim_gpu_strong", jobs=1, no_cache=True)
    study.save(tmp_path / "s.json")
    loaded = tracescale.load(tmp_path / "s.json")
    for name in ("breakdown", "points", "projections", "collectives", "ranks", "step_stats"):
        a, b = getattr(study, name)(), getattr(loaded, name)()
        assert not a.empty, name
        pd.testing.assert_frame_equal(a, b)
    # The "In a notebook" table of docs/api.md is this output.
    api_doc = (ROOT / "docs" / "api.md").read_text()
    assert study.points().drop(columns="study").to_string() in api_doc
    coll = study.collectives()
    n8 = coll[coll["world_size"] == 8].set_index("collective")["seconds"]
    run8 = next(r for r in study.runs if r["world_size"] == 8)
    assert n8.to_dict() == run8["communication_by_collective_s"]


def test_comparison_frames() -> None:
    before, after = _doc(), _doc()
    for run in after["studies"][0]["runs"]:
        run["breakdown_s"]["dataloader"] -= 0.04
        run["step_time_s"]["mean"] -= 0.04
    cmp = tracescale.Comparison(doc=compare_docs(before, after))
    df = cmp.frame()
    assert list(df.columns) == frames.COLUMNS["compare"]
    steps = df[df["quantity"] == "step_time"]
    assert steps["world_size"].tolist() == [1, 2, 4, 8]
    row = steps.iloc[0]
    assert row["before_s"] == 0.354488 and row["after_s"] == pytest.approx(0.314488)
    assert row["delta_s"] == pytest.approx(-0.04)
    assert row["change_pct"] == cmp.doc["runs"][0]["step_time_s"]["change_pct"]
    dl = df[(df["quantity"] == "dataloader") & (df["world_size"] == 1)].iloc[0]
    assert dl["delta_s"] == pytest.approx(-0.04) and pd.isna(dl["verdict"])
    assert math.isnan(dl["ci90_low_pct"])
    sc = cmp.scaling_frame()
    assert list(sc.columns) == frames.COLUMNS["compare_scaling"]
    sf = sc[sc["quantity"] == "serial_fraction"].iloc[0]
    assert sf["before"] == sf["after"] == 0.282097
    assert set(sc["quantity"]) == {"serial_fraction", "amdahl_limit", "projected_speedup"}
