"""The per-rank result cache: hits, misses on any change, corrupt entries, unwritable dirs."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import tracescale
from tracescale.classify.rank import RankResult
from tracescale.parallel import RankTask, TaskError, run_task, run_tasks
from tracescale.pipeline import analyze
from tracescale.simulate import simulate


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("src")
    simulate([2], out, steps=3)
    simulate([2], out / "seed1", steps=3, seed=1)
    return out


@pytest.fixture
def run_dir(source: Path, tmp_path: Path) -> Path:
    """A private, writable copy of a 2-rank run (tests touch and rewrite its files)."""
    dst = tmp_path / "ws2"
    shutil.copytree(source / "ws2", dst)
    return dst


class Counting:
    """In-process worker that counts calls: a cache hit must not call it."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    def __call__(self, task: RankTask) -> RankResult | TaskError:
        self.paths.append(task.path)
        return run_task(task)


def _tasks(folder: Path, rules: str | None = None) -> list[RankTask]:
    files = sorted(folder.glob("*.json.gz"))
    return [RankTask(str(p), rank=i, rules_file=rules) for i, p in enumerate(files)]


def _run(folder: Path, cache: Path, rules: str | None = None):  # type: ignore[no-untyped-def]
    worker = Counting()
    mapped = run_tasks(_tasks(folder, rules), jobs=1, cache_dir=str(cache), _worker=worker)
    return mapped, worker.paths


def test_second_run_is_served_from_cache(run_dir: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first, called = _run(run_dir, cache)
    assert len(called) == 2 and first.computed == 2 and first.cached == 0
    second, called = _run(run_dir, cache)
    assert called == [] and second.cached == 2 and second.computed == 0
    for a, b in zip(first.results, second.results, strict=True):
        assert isinstance(a, RankResult) and isinstance(b, RankResult)
        assert a.steps.equals(b.steps) and a.collectives.equals(b.collectives)
        assert (a.segments.start == b.segments.start).all()
    assert len(list(cache.iterdir())) == 2


def test_jobs_2_writes_what_jobs_1_reads(run_dir: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    run_tasks(_tasks(run_dir), jobs=2, cache_dir=str(cache))
    _, called = _run(run_dir, cache)
    assert called == []


def test_touch_and_modify_are_misses(run_dir: Path, source: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _run(run_dir, cache)
    files = sorted(run_dir.glob("*.json.gz"))
    st = files[0].stat()
    os.utime(files[0], ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    _, called = _run(run_dir, cache)
    assert called == [str(files[0])]
    # Same name, other content (another seed), mtime forced back: the size still differs.
    other = sorted((source / "seed1" / "ws2").glob("*.json.gz"))[1]
    st = files[1].stat()
    shutil.copyfile(other, files[1])
    os.utime(files[1], ns=(st.st_atime_ns, st.st_mtime_ns))
    _, called = _run(run_dir, cache)
    assert called == [str(files[1])]
    assert len(list(cache.iterdir())) == 2  # a modified file replaces its entry


def test_changed_rules_and_version_are_misses(
    run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    _run(run_dir, cache)
    rules = tmp_path / "rules.toml"
    rules.write_text('[[host]]\npattern = "^my_loader$"\ntarget = "dataloader"\n')
    _, called = _run(run_dir, cache, str(rules))
    assert len(called) == 2
    _, called = _run(run_dir, cache, str(rules))
    assert called == []
    rules.write_text('[[host]]\npattern = "^other_loader$"\ntarget = "dataloader"\n')
    _, called = _run(run_dir, cache, str(rules))
    assert len(called) == 2
    monkeypatch.setattr(tracescale, "__version__", "999.0")
    _, called = _run(run_dir, cache)
    assert len(called) == 2


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty"])
def test_corrupt_entry_is_ignored_and_rewritten(run_dir: Path, tmp_path: Path, damage: str) -> None:
    cache = tmp_path / "cache"
    _run(run_dir, cache)
    for entry in cache.iterdir():
        blob = entry.read_bytes()
        data = {"garbage": b"\x00junk" * 50, "truncated": blob[: len(blob) - 100], "empty": b""}
        entry.write_bytes(data[damage])
    mapped, called = _run(run_dir, cache)
    assert len(called) == 2 and all(isinstance(r, RankResult) for r in mapped.results)
    _, called = _run(run_dir, cache)
    assert called == []


def test_unwritable_cache_dir_warns_once_and_still_works(run_dir: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache directory should be")
    mapped, called = _run(run_dir, blocker / "cache")
    assert len(called) == 2 and all(isinstance(r, RankResult) for r in mapped.results)
    assert len(mapped.warnings) == 1 and "not writable" in mapped.warnings[0]
    study = analyze(str(run_dir), jobs=1, cache_dir=str(blocker / "cache"))
    warnings = study.doc["studies"][0]["warnings"]
    assert sum("not writable" in w for w in warnings) == 1


def test_read_only_cache_dir(
    run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "ro"
    _run(run_dir, cache)  # entries exist and stay readable
    first = sorted(run_dir.glob("*.json.gz"))[0]
    os.utime(first, ns=(first.stat().st_atime_ns, first.stat().st_mtime_ns + 1))
    cache.chmod(0o555)

    def denied(*args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied")  # what a non-root user gets

    if os.geteuid() == 0:  # root writes into 0o555 directories
        monkeypatch.setattr("tracescale.parallel.cache.tempfile.mkstemp", denied)
    try:
        mapped, called = _run(run_dir, cache)
    finally:
        cache.chmod(0o755)
    assert called == [str(first)]  # the other rank still comes from the read-only cache
    assert len(mapped.warnings) == 1 and "Permission denied" in mapped.warnings[0]


def test_no_cache_neither_reads_nor_writes(run_dir: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _run(run_dir, cache)
    worker = Counting()
    run_tasks(_tasks(run_dir), jobs=1, cache_dir=str(cache), no_cache=True, _worker=worker)
    assert len(worker.paths) == 2
    empty = tmp_path / "unused"
    run_tasks(_tasks(run_dir), jobs=1, cache_dir=str(empty), no_cache=True)
    assert not empty.exists()


def test_default_dir_follows_xdg(
    run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    run_tasks(_tasks(run_dir), jobs=1)
    assert len(list((tmp_path / "xdg" / "tracescale").iterdir())) == 2
