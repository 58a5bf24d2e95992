"""Rank clocks up to +-100 ms apart on the newer patterns: a pipeline (stages joined by
send/recv, DP all-reduces across replicas) and mixture-of-experts all-to-all without the
stream-wait records. Every category stays within 1% of the step and every projection within 1%
of the same study with aligned clocks; the alignment is said in one warning."""

from __future__ import annotations

import gzip
import json
import random
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.independent import pipeline
from tests.independent.gen import build_study
from tests.independent.variants import VARIANTS
from tracescale import api

MAX_SHIFT_US = 100_000.0

STUDIES: dict[str, Callable[[str], object]] = {
    "pp": lambda where: pipeline.build_study(
        replace(
            pipeline.PipePattern(), microbatches=16, dp_sizes=(1, 2), dp_targets=(4, 8), steps=3
        ),
        where,
    ),
    "moe": lambda where: build_study(replace(VARIANTS["moe/no-waits"](), layers=2, steps=3), where),
}


def _shift_ranks(src: Path, dst: Path, seed: int) -> None:
    """Copy a study, adding one random offset (us) to every timestamp of each rank file."""
    shutil.copytree(src, dst)
    rng = random.Random(seed)
    files = sorted(f for f in dst.rglob("*") if f.name.endswith((".json", ".json.gz")))
    assert files
    for f in files:
        packed = f.name.endswith(".gz")
        doc = json.loads(gzip.decompress(f.read_bytes()) if packed else f.read_bytes())
        if not isinstance(doc, dict) or "traceEvents" not in doc:
            continue  # the generator's truth, beside the traces
        offset = rng.uniform(-MAX_SHIFT_US, MAX_SHIFT_US)
        for e in doc["traceEvents"]:
            if isinstance(e.get("ts"), (int, float)):
                e["ts"] += offset
        text = json.dumps(doc).encode()
        f.write_bytes(gzip.compress(text) if packed else text)


@pytest.fixture(scope="module", params=sorted(STUDIES))
def pair(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict[str, Any], dict[str, Any]]:
    root = tmp_path_factory.mktemp(f"clocks-{request.param}")
    STUDIES[request.param](str(root / "base"))
    _shift_ranks(root / "base", root / "shifted", seed=3)
    got = [
        api.analyze(str(root / k), jobs=1, no_cache=True).studies[0] for k in ("base", "shifted")
    ]
    return got[0], got[1]


def test_categories_and_projections_stay_within_one_percent(
    pair: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    base, shifted = pair
    for a, b in zip(base["runs"], shifted["runs"], strict=True):
        step = a["step_time_s"]["mean"]
        for cat, seconds in a["breakdown_s"].items():
            assert abs(seconds - b["breakdown_s"][cat]) <= 0.01 * step, (a["world_size"], cat)
    projections = (base["scaling"]["projections"], shifted["scaling"]["projections"])
    for pa, pb in zip(*projections, strict=True):
        assert pb["speedup"] == pytest.approx(pa["speedup"], rel=0.01), pa["world_size"]
    assert shifted["scaling"]["serial_fraction"]["total"] == pytest.approx(
        base["scaling"]["serial_fraction"]["total"], abs=0.01
    )
    said = [w for w in shifted["warnings"] if w.startswith("rank clocks differ")]
    assert said == ["rank clocks differ; aligned on collective ends (they finish together)"]
