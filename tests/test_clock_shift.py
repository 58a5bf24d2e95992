"""Times are relative, any sign: a study whose clocks are all shifted (even below zero) gives
exactly the same document. A -1 "no previous end" sentinel once merged host collectives
after a negative start, moving reduction time into communication."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from tracescale import api
from tracescale.simulate import simulate


def _shifted(src: Path, dst: Path, shift_us: float) -> Path:
    shutil.copytree(src, dst)
    for f in dst.glob("ws*/*.json.gz"):
        doc = json.loads(gzip.decompress(f.read_bytes()))
        for e in doc["traceEvents"]:
            if isinstance(e.get("ts"), (int, float)):
                e["ts"] += shift_us
        if isinstance(doc.get("baseTimeNanoseconds"), int):
            doc["baseTimeNanoseconds"] += int(shift_us * 1000)
        f.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return dst


def _doc(path: Path) -> str:
    study = api.analyze(str(path), jobs=1, no_cache=True).doc["studies"][0]
    return json.dumps(study, sort_keys=True).replace(str(path), "STUDY")


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("clock") / "sim"
    simulate([2], out, steps=3)
    return out, _doc(out)


@pytest.mark.parametrize("shift_s", [-10.0, 10.0])
def test_every_rank_shifted_gives_identical_numbers(base, tmp_path, shift_s):
    src, expected = base
    shifted = _shifted(src, tmp_path / "sim", shift_s * 1e6)
    first = min(
        e["ts"]
        for f in shifted.glob("ws2/*.json.gz")
        for e in json.loads(gzip.decompress(f.read_bytes()))["traceEvents"]
        if isinstance(e.get("ts"), (int, float))
    )
    assert (first < 0) == (shift_s < 0)  # the -10 s case really has negative timestamps
    assert _doc(shifted) == expected


def test_union_of_negative_intervals() -> None:
    import numpy as np

    from tracescale.classify.gpu_metrics import union_ns

    start = np.array([-10, -5, -30], dtype=np.int64)
    end = np.array([-6, -1, -20], dtype=np.int64)
    assert union_ns(start, end) == 4 + 4 + 10
