"""A study folder behind a URL (fsspec's in-memory filesystem stands in for s3:// here)."""

from __future__ import annotations

from pathlib import Path

from conftest import require_module

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "sample_traces" / "sim_gpu_strong"


def test_url_study_gives_the_same_numbers_as_local() -> None:
    fsspec = require_module("fsspec", "the dask extra (pip install 'tracescale[dask]')")
    import tracescale

    fs = fsspec.filesystem("memory")
    for path in sorted(STUDY.rglob("*.gz")):
        rel = path.relative_to(STUDY).as_posix()
        fs.pipe(f"/study/{rel}", path.read_bytes())
    remote = tracescale.analyze("memory://study", jobs=1, no_cache=True)
    local = tracescale.analyze(str(STUDY), jobs=1, no_cache=True)
    assert [r["world_size"] for r in remote.runs] == [1, 2, 4, 8]
    for a, b in zip(remote.runs, local.runs, strict=True):
        assert a["breakdown_s"] == b["breakdown_s"]
        assert a["paths"][0].startswith("memory://")
    rs = remote.studies[0]["scaling"]["serial_fraction"]["total"]
    assert rs == local.studies[0]["scaling"]["serial_fraction"]["total"]
