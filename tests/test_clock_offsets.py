"""Ranks whose clocks differ (hosts kept only within NTP's milliseconds, or worse) give the same
numbers: each rank's clock is shifted by its own random offset up to +-100 ms, more than a step,
and every category, the serial fraction and every projection stay within 1% of the unshifted
study. The offsets found are in the JSON; aligned ends that still scatter are warned about."""

from __future__ import annotations

import gzip
import json
import random
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tracescale import api
from tracescale.classify.clocks import alignment_scatter
from tracescale.simulate import simulate

MAX_SHIFT_US = 100_000.0


def _shift_ranks(src: Path, dst: Path, seed: int) -> dict[str, float]:
    """Copy a study, adding one random offset (us) to every timestamp of each rank file."""
    shutil.copytree(src, dst)
    rng = random.Random(seed)
    shifts = {}
    for f in sorted(dst.glob("ws*/*.json.gz")):
        off = rng.uniform(-MAX_SHIFT_US, MAX_SHIFT_US)
        doc = json.loads(gzip.decompress(f.read_bytes()))
        for e in doc["traceEvents"]:
            if isinstance(e.get("ts"), (int, float)):
                e["ts"] = round(e["ts"] + off, 3)
        f.write_bytes(gzip.compress(json.dumps(doc).encode(), compresslevel=1))
        shifts[f"{f.parent.name}/{f.name}"] = off
    return shifts


def _study(path: Path) -> dict[str, Any]:
    study: dict[str, Any] = api.analyze(str(path), jobs=1, no_cache=True).doc["studies"][0]
    return study


@pytest.fixture(scope="module", params=["fsdp", "tp", "ddp"])
def pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp(f"clocks-{request.param}")
    simulate([1, 2, 4], root / "base", steps=3, pattern=request.param)
    shifts = _shift_ranks(root / "base", root / "shifted", seed=len(request.param))
    return _study(root / "base"), _study(root / "shifted"), shifts


def test_categories_within_one_percent_of_the_step(pair) -> None:
    base, shifted, _ = pair
    for a, b in zip(base["runs"], shifted["runs"], strict=True):
        step = a["step_time_s"]["mean"]
        assert b["step_time_s"]["mean"] == pytest.approx(step, rel=0.01)
        for cat, v in a["breakdown_s"].items():
            assert abs(b["breakdown_s"][cat] - v) <= 0.01 * step, (a["world_size"], cat)


def test_serial_fraction_and_projections_within_one_percent(pair) -> None:
    base, shifted, _ = pair
    sf_a, sf_b = base["scaling"]["serial_fraction"], shifted["scaling"]["serial_fraction"]
    assert sf_b["total"] == pytest.approx(sf_a["total"], rel=0.01)
    proj_a, proj_b = base["scaling"]["projections"], shifted["scaling"]["projections"]
    assert [p["world_size"] for p in proj_a] == [p["world_size"] for p in proj_b]
    for a, b in zip(proj_a, proj_b, strict=True):
        assert b["speedup"] == pytest.approx(a["speedup"], rel=0.01), a["world_size"]


def test_offsets_found_are_reported(pair) -> None:
    _, shifted, shifts = pair
    run = next(r for r in shifted["runs"] if r["world_size"] == 4)
    found = {e["rank"]: e["offset_s"] for e in run["clock_offsets_s"]}
    assert sorted(found) == [0, 1, 2, 3]
    # Rank files are named by pid in rank order; the offsets are relative to rank 0's clock.
    applied = [v for k, v in sorted(shifts.items()) if k.startswith("ws4/")]
    for rank, off_us in enumerate(applied):
        assert found[rank] == pytest.approx((off_us - applied[0]) / 1e6, abs=50e-6)
    assert all(e["scatter_s"] < 1e-3 for e in run["clock_offsets_s"])
    assert not any("not consistent" in w for w in shifted["warnings"] + run["warnings"])


def test_scatter_of_aligned_ends_reads_a_drifting_clock() -> None:
    # Three instances; rank 1's clock is 5 ms ahead, then 7, then 9: one offset cannot fit.
    key = ["pg", "collective", "seq"]
    rows = []
    for seq, drift in enumerate([5e6, 7e6, 9e6]):
        end = 1_000_000_000 + seq * 10_000_000
        rows += [("0", "allreduce", seq, 0, end), ("0", "allreduce", seq, 1, end + drift)]
    coll = pd.DataFrame(rows, columns=[*key, "rank", "end_ns"])
    scatter = alignment_scatter(coll, key, {0: 0, 1: 7_000_000})
    assert scatter[1] == pytest.approx(1e-3)  # |(-2, 0, +2) ms| / 2 about the pair's median
    steady = coll.copy()
    ahead = steady["rank"] == 1
    steady.loc[ahead, "end_ns"] = steady.loc[~ahead, "end_ns"].to_numpy() + 7_000_000
    assert max(alignment_scatter(steady, key, {0: 0, 1: 7_000_000}).values()) == 0.0


def test_a_drifting_clock_is_warned_about(tmp_path: Path) -> None:
    simulate([2], tmp_path / "s", steps=4, pattern="ddp")
    f = sorted((tmp_path / "s" / "ws2").glob("*.json.gz"))[1]
    doc = json.loads(gzip.decompress(f.read_bytes()))
    stamps = [e["ts"] for e in doc["traceEvents"] if isinstance(e.get("ts"), (int, float))]
    t0, span = min(stamps), max(stamps) - min(stamps)
    for e in doc["traceEvents"]:  # rank 1's clock runs ahead by 0 -> 30 ms over the window
        if isinstance(e.get("ts"), (int, float)):
            e["ts"] = round(e["ts"] + 30_000.0 * (e["ts"] - t0) / span, 3)
    f.write_bytes(gzip.compress(json.dumps(doc).encode(), compresslevel=1))
    run = _study(tmp_path / "s")["runs"][0]
    assert any(w.startswith("rank clocks are not consistent") for w in run["warnings"])
    assert max(e["scatter_s"] for e in run["clock_offsets_s"]) > 1e-3
