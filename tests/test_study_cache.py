"""The study-level cache: a repeat analyze reuses the document only when nothing it depends on
changed, renders byte for byte what a cold run renders, and never trusts a damaged entry."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import tracescale
from tracescale import api, pipeline
from tracescale.cli.main import cli
from tracescale.parallel import study_cache
from tracescale.simulate import make_params, simulate

FORMATS = ("table", "markdown", "html", "json")


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three runs (7 rank files) of a small model: the cache's behaviour, not the numbers, is
    what these tests read, and every cold analyze pays for the study's size."""
    out = tmp_path_factory.mktemp("src")
    simulate([1, 2, 4], out, steps=3, params=make_params({"layers": 2}), compresslevel=1)
    return out


@pytest.fixture
def study(source: Path, tmp_path: Path) -> Path:
    """A private, writable copy (tests touch its files)."""
    dst = tmp_path / "study"
    shutil.copytree(source, dst)
    return dst


class MapCounter:
    """Counts map steps (a study-cache hit runs none)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        real = pipeline.map_ranks

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(pipeline, "map_ranks", counted)


def _renders(s: tracescale.Study) -> dict[str, str]:
    return {fmt: s.render(fmt, width=120) for fmt in FORMATS}


def _entries(cache: Path) -> list[Path]:
    return sorted(cache.glob("*.sd"))


@pytest.mark.parametrize("entry", [api.analyze, pipeline.analyze])
def test_hit_renders_identical_bytes_and_keeps_typed_parts(
    entry: Callable[..., tracescale.Study],
    study: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache = tmp_path / "cache"
    counter = MapCounter(monkeypatch)
    cold = entry(str(study), jobs=1, cache_dir=str(cache))
    assert counter.calls == 1 and len(_entries(cache)) == 1
    warm = entry(str(study), jobs=1, cache_dir=str(cache))
    assert counter.calls == 1, "a study-cache hit must not map the ranks again"
    assert _renders(warm) == _renders(cold)
    assert warm.to_json() == cold.to_json()
    # The typed parts are recomputed on demand and agree with the cold run's.
    assert counter.calls == 1
    assert warm.scaling.serial_fraction.total == cold.scaling.serial_fraction.total
    assert [r.world_size for r in warm.runs_by_study[0]] == [1, 2, 4]
    assert counter.calls == 2


def test_cached_cli_output_is_identical(study: Path, tmp_path: Path) -> None:
    cache = str(tmp_path / "cache")
    runner = CliRunner()
    for fmt in FORMATS:
        args = ["analyze", str(study), "--cache-dir", cache, "--format", fmt, "-q"]
        cold = runner.invoke(cli, args)
        warm = runner.invoke(cli, args)
        assert cold.exit_code == 0, cold.output
        assert warm.output == cold.output
    assert len(_entries(Path(cache))) == 1


def test_hit_imports_neither_pandas_nor_scipy(study: Path, tmp_path: Path) -> None:
    cache = str(tmp_path / "cache")
    api.analyze(str(study), cache_dir=cache)
    code = (
        "import sys, tracescale\n"
        f"s = tracescale.analyze({str(study)!r}, cache_dir={cache!r})\n"
        "s.render('table'); s.render('html')\n"
        "print(sorted(m for m in ('pandas', 'scipy', 'numba') if m in sys.modules))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(tracescale.__file__).parent.parent)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.strip() == "[]"


KEY_CHANGES: dict[str, Callable[[Path, dict[str, Any], pytest.MonkeyPatch], None]] = {
    "mode": lambda s, kw, mp: kw.update(mode="strong"),
    "project": lambda s, kw, mp: kw.update(project=[8, 16]),
    "what_if": lambda s, kw, mp: kw.update(what_if={"communication": 0.5}),
    "steps": lambda s, kw, mp: kw.update(steps="1:"),
    "assumptions": lambda s, kw, mp: kw.update(assumptions={"sync": "parallel"}),
    "memory_budget": lambda s, kw, mp: kw.update(memory_budget=10**9),
    "topology": lambda s, kw, mp: kw.update(gpus_per_node=2),
    "replay": lambda s, kw, mp: kw.update(replay=False),
    "file touched": lambda s, kw, mp: os.utime(
        next((s / "ws2").glob("*.json.gz")), ns=(1, 1_000_000_000)
    ),
    "file removed": lambda s, kw, mp: next((s / "ws4").glob("*.json.gz")).unlink(),
    "version": lambda s, kw, mp: mp.setattr(tracescale, "__version__", "999.0"),
    "code": lambda s, kw, mp: mp.setattr(study_cache, "package_digest", lambda: "edited"),
    "libraries": lambda s, kw, mp: mp.setattr(
        study_cache, "library_versions", lambda: {"numpy": "0"}
    ),
}


@pytest.mark.parametrize("change", sorted(KEY_CHANGES))
def test_any_key_part_changed_is_a_miss(
    change: str, study: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = str(tmp_path / "cache")
    kwargs: dict[str, Any] = {"jobs": 1, "cache_dir": cache}
    pipeline.analyze(str(study), **kwargs)
    counter = MapCounter(monkeypatch)
    KEY_CHANGES[change](study, kwargs, monkeypatch)
    changed = pipeline.analyze(str(study), **kwargs)
    assert counter.calls == 1, f"{change} must invalidate the cached document"
    again = pipeline.analyze(str(study), **kwargs)
    assert counter.calls == 1, "the new document is cached in turn"
    assert again.to_json() == changed.to_json()


def test_rules_file_contents_are_part_of_the_key(
    study: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text('[[host]]\ntarget = "dataloader"\npattern = "enumerate.*DataLoader"\n')
    kwargs: dict[str, Any] = {"jobs": 1, "cache_dir": str(tmp_path / "cache"), "rules": str(rules)}
    pipeline.analyze(str(study), **kwargs)
    counter = MapCounter(monkeypatch)
    pipeline.analyze(str(study), **kwargs)
    assert counter.calls == 0
    rules.write_text('[[host]]\ntarget = "dataloader"\npattern = "enumerate.*Loader"\n')
    pipeline.analyze(str(study), **kwargs)
    assert counter.calls == 1


@pytest.mark.parametrize("damage", ["flip", "truncate", "symlink", "fifo", "directory"])
def test_damaged_entry_is_a_miss_and_rewritten(
    damage: str, study: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    cold = pipeline.analyze(str(study), jobs=1, cache_dir=str(cache))
    (slot,) = _entries(cache)
    blob = slot.read_bytes()
    if damage == "flip":
        for offset in (len(blob) // 2, len(blob) - 3):  # a bit of the document, of the header
            flipped = bytearray(blob)
            flipped[offset] ^= 0x01
            slot.write_bytes(bytes(flipped))
            assert study_cache.StudyCache(str(cache)).get(_key(study, cache)) is None
        slot.write_bytes(bytes(flipped))
    elif damage == "truncate":
        slot.write_bytes(blob[:100])
    else:
        slot.unlink()
        if damage == "symlink":
            good = tmp_path / "elsewhere.sd"
            good.write_bytes(blob)
            slot.symlink_to(good)
        elif damage == "fifo":
            os.mkfifo(slot)
        else:
            slot.mkdir()
    counter = MapCounter(monkeypatch)
    again = pipeline.analyze(str(study), jobs=1, cache_dir=str(cache))
    assert counter.calls == 1
    assert again.to_json() == cold.to_json()
    if damage != "directory":
        assert slot.is_file() and not slot.is_symlink() and slot.read_bytes() == blob


def _key(study: Path, cache: Path) -> dict[str, Any]:
    from tracescale.preflight import prepare

    prepared = prepare(str(study), parallel_options={"cache_dir": str(cache)})
    assert prepared.key is not None
    return prepared.key


def test_entry_holds_exactly_the_key_and_the_document(study: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cold = pipeline.analyze(str(study), jobs=1, cache_dir=str(cache))
    key = _key(study, cache)
    doc = study_cache.decode(_entries(cache)[0].read_bytes(), key)
    assert json.dumps(doc, indent=2) == cold.to_json()
    other = {**key, "memory_budget": 1}
    with pytest.raises(study_cache.StudyEntryError):
        study_cache.decode(_entries(cache)[0].read_bytes(), other)


def test_no_cache_and_custom_workers_bypass_it(
    study: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    pipeline.analyze(str(study), jobs=1, cache_dir=str(cache), no_cache=True)
    assert _entries(cache) == []
    pipeline.analyze(str(study), jobs=1, cache_dir=str(cache))
    counter = MapCounter(monkeypatch)
    pipeline.analyze(str(study), jobs=1, cache_dir=str(cache), use_study_cache=False)
    seen: list[str] = []
    pipeline.analyze(str(study), jobs=1, cache_dir=str(cache), progress=lambda t: seen.append(t))
    assert counter.calls == 2 and len(seen) == 7


CRAFTED: dict[str, Callable[[dict[str, Any]], None]] = {
    # The field the report's stragglers section once indexed (a TypeError, exit 70).
    "per_rank not a list": lambda d: d["studies"][0]["runs"][1].update(per_rank=1),
    "a string for a number": lambda d: d["studies"][0]["scaling"].update(amdahl_limit="x"),
    "studies not a list": lambda d: d.update(studies={"0": 1}),
    "NaN": lambda d: d["studies"][0]["scaling"].update(amdahl_limit=float("nan")),
}


@pytest.mark.parametrize("craft", sorted(CRAFTED))
def test_crafted_document_with_a_valid_checksum_is_a_miss(
    craft: str, study: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checksum only catches damage: a document rewritten with a valid checksum that
    breaks the study schema must be recomputed, not handed to the renderers."""
    cache = tmp_path / "cache"
    args = ["analyze", str(study), "--cache-dir", str(cache), "-q", "-j1"]
    runner = CliRunner()
    cold = runner.invoke(cli, args)
    assert cold.exit_code == 0, cold.output
    (slot,) = _entries(cache)
    good = slot.read_bytes()
    fixed = len(study_cache.MAGIC) + hashlib.sha256().digest_size + 8
    n = int.from_bytes(good[fixed - 8 : fixed], "little")
    key = json.loads(good[fixed : fixed + n])["key"]  # the CLI's key (its own memory budget)
    doc = study_cache.decode(good, key)
    CRAFTED[craft](doc)
    body = json.dumps(doc).encode()  # allow_nan: a crafter need not use the writer
    head = json.dumps({"format": study_cache.FORMAT_VERSION, "key": key}, sort_keys=True)
    rest = len(head).to_bytes(8, "little") + head.encode() + body
    slot.write_bytes(study_cache.MAGIC + hashlib.sha256(rest).digest() + rest)
    with pytest.raises(study_cache.StudyEntryError):
        study_cache.decode(slot.read_bytes(), key)
    counter = MapCounter(monkeypatch)
    warm = runner.invoke(cli, args)
    assert counter.calls == 1, "a crafted document must be recomputed"
    assert warm.exit_code == 0 and warm.output == cold.output
    assert slot.read_bytes() == good, "the recomputed document replaces the crafted one"
