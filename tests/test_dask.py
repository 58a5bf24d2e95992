"""Dask backend: a LocalCluster gives the same study as --jobs 1; missing dask is a usage error."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import require_module

from tracescale.classify.rank import RankResult
from tracescale.errors import UsageError
from tracescale.parallel import RankTask, TaskError, run_tasks
from tracescale.pipeline import analyze
from tracescale.simulate import simulate


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dask-study")
    simulate([1, 2, 4], out, steps=3)
    return out


def test_local_cluster_matches_jobs_1(study: Path, tmp_path: Path) -> None:
    require_module("distributed", "--scheduler runs on dask.distributed (the dask extra)")
    one = analyze(str(study), jobs=1, no_cache=True).to_json()
    # Through the cache as well: Dask results are written there and read back identically.
    cache = str(tmp_path / "cache")
    dask = analyze(str(study), jobs=2, scheduler="local", cache_dir=cache).to_json()
    assert one == dask
    assert analyze(str(study), jobs=1, cache_dir=cache).to_json() == one


def test_local_cluster_bad_file_is_its_error(study: Path, tmp_path: Path) -> None:
    require_module("distributed", "--scheduler runs on dask.distributed (the dask extra)")
    bad = tmp_path / "rank1.json"
    bad.write_text("[1, 2")
    good = sorted(study.glob("ws1/*.json.gz"))[0]
    tasks = [RankTask(str(good), rank=0), RankTask(str(bad), rank=1)]
    mapped = run_tasks(tasks, jobs=2, scheduler="local", no_cache=True)
    assert isinstance(mapped.results[0], RankResult)
    err = mapped.results[1]
    assert isinstance(err, TaskError) and err.path == str(bad) and err.exit_code == 3


def test_missing_dask_is_a_usage_error(
    study: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    tasks = [RankTask(str(sorted(study.glob("ws1/*.json.gz"))[0]), rank=0)]
    with pytest.raises(UsageError, match=r"needs the dask extra: pip install 'tracescale\[dask\]'"):
        run_tasks(tasks, scheduler="local", no_cache=True)


def test_unreachable_scheduler_is_a_usage_error(
    study: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_module("distributed", "--scheduler runs on dask.distributed (the dask extra)")
    monkeypatch.setattr("tracescale.parallel.dask_run.CONNECT_TIMEOUT", "1s")
    tasks = [RankTask(str(sorted(study.glob("ws1/*.json.gz"))[0]), rank=0)]
    with pytest.raises(UsageError, match="cannot connect to the Dask scheduler"):
        run_tasks(tasks, scheduler="tcp://127.0.0.1:9", no_cache=True)
