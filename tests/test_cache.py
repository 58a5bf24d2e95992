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


# --- entries are untrusted input: never code, never a hang, never a wrong number -----------


def _slots(folder: Path, cache: Path) -> list[Path]:
    from tracescale.classify.rules import load_rules
    from tracescale.parallel.cache import make_key

    digest = load_rules(None).digest
    keys = [make_key(t, digest) for t in _tasks(folder)]
    return [cache / k.slot() for k in keys if k is not None]


def _same(a: object, b: object) -> None:
    import dataclasses

    import pandas as pd

    from tracescale.classify.timeline import Segments

    assert isinstance(a, RankResult) and isinstance(b, RankResult)
    for f in dataclasses.fields(RankResult):
        va, vb = getattr(a, f.name), getattr(b, f.name)
        if isinstance(va, pd.DataFrame):
            assert va.equals(vb) and list(va.dtypes) == list(vb.dtypes), f.name
        elif isinstance(va, Segments):
            assert (va.start == vb.start).all() and (va.cat == vb.cat).all()
            assert va.stop == vb.stop and va.cat.dtype == vb.cat.dtype
        else:
            assert va == vb and type(va) is type(vb), f.name


def test_flipped_bits_anywhere_are_misses_with_identical_results(
    run_dir: Path, tmp_path: Path
) -> None:
    import random

    cache = tmp_path / "cache"
    fresh, _ = _run(run_dir, tmp_path / "other")
    _run(run_dir, cache)
    slots = _slots(run_dir, cache)
    rng = random.Random(1234)
    for _ in range(12):
        for slot in slots:
            blob = bytearray(slot.read_bytes())
            pos = rng.randrange(len(blob))
            blob[pos] ^= 1 << rng.randrange(8)
            slot.write_bytes(bytes(blob))
        mapped, called = _run(run_dir, cache)
        assert len(called) == 2  # every damaged entry is a miss ...
        for a, b in zip(fresh.results, mapped.results, strict=True):
            _same(a, b)
        _, called = _run(run_dir, cache)
        assert called == []  # ... and was rewritten


def test_crafted_pickle_entries_never_run_code(run_dir: Path, tmp_path: Path) -> None:
    import pickle

    import numpy as np

    from tracescale.parallel import entry

    cache = tmp_path / "cache"
    _run(run_dir, cache)
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self):  # type: ignore[no-untyped-def]
            return (os.system, (f"touch {marker}",))

    slot0, slot1 = _slots(run_dir, cache)
    # 1. the old format: a pickle straight after a plausible header
    slot0.write_bytes(b"TRACESCALE-RANK-1\n" + pickle.dumps(Exploit()))
    # 2. the new format with a valid checksum whose array is a pickled object array
    header, _ = entry.read_header(slot1.read_bytes())
    arr = np.empty(1, dtype=object)
    arr[0] = Exploit()
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf, zf.open("segments.start.npy", "w") as fh:
        np.lib.format.write_array(fh, arr, allow_pickle=True)
    head = __import__("json").dumps(header).encode()
    body = len(head).to_bytes(8, "little") + head + buf.getvalue()
    import hashlib

    slot1.write_bytes(entry.MAGIC + hashlib.sha256(body).digest() + body)
    mapped, called = _run(run_dir, cache)
    assert len(called) == 2 and not marker.exists()
    assert all(isinstance(r, RankResult) for r in mapped.results)


def test_fifo_symlink_and_oversized_slots_are_misses(
    run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    _run(run_dir, cache)
    slot0, slot1 = _slots(run_dir, cache)
    good = slot1.read_bytes()
    slot0.unlink()
    os.mkfifo(slot0)  # reading it would block forever
    slot1.unlink()
    slot1.symlink_to("/dev/zero")  # reading it would never end
    _, called = _run(run_dir, cache)
    assert len(called) == 2
    assert slot0.is_file() and not slot1.is_symlink() and slot1.is_file()  # replaced
    # a symlink to a perfectly good entry is still not followed
    slot1.unlink()
    (tmp_path / "elsewhere").write_bytes(good)
    slot1.symlink_to(tmp_path / "elsewhere")
    _, called = _run(run_dir, cache)
    assert len(called) == 1
    monkeypatch.setattr("tracescale.parallel.cache.MAX_ENTRY_BYTES", 100)
    _, called = _run(run_dir, cache)
    assert len(called) == 2


def test_directory_in_one_slot_does_not_stop_other_writes(run_dir: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    slot0, slot1 = _slots(run_dir, cache)
    slot0.mkdir()
    mapped, called = _run(run_dir, cache)
    assert len(called) == 2 and slot1.is_file() and slot0.is_dir()
    assert len(mapped.warnings) == 1 and str(slot0) in mapped.warnings[0]
    assert "not writable" not in mapped.warnings[0]
    _, called = _run(run_dir, cache)
    assert len(called) == 1


def test_study_identical_with_and_without_cache(run_dir: Path, tmp_path: Path) -> None:
    import json

    cache = str(tmp_path / "cache")
    plain = analyze(str(run_dir), jobs=1, no_cache=True).doc
    analyze(str(run_dir), jobs=1, cache_dir=cache)
    cached = analyze(str(run_dir), jobs=1, cache_dir=cache, use_study_cache=False).doc
    assert json.dumps(plain, sort_keys=True) == json.dumps(cached, sort_keys=True)
    whole = analyze(str(run_dir), jobs=1, cache_dir=cache).doc  # the study-level cache
    assert json.dumps(plain, sort_keys=True) == json.dumps(whole, sort_keys=True)
