"""Fuzzing the entry points besides trace files (those are in test_fuzz.py): study JSON given to
``report``, cache entries, rules files. Each either works or fails with its documented error:
never an internal error (exit 70), a hang, or code run from data."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracescale.classify.rank import RankResult
from tracescale.cli.main import main
from tracescale.errors import TracescaleError

RUN = Path(__file__).resolve().parents[1] / "sample_traces" / "sim_gpu_strong" / "ws1"
ODD = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.sampled_from(["<script>", "", "nan", "ws1", "compute"]),
)


@pytest.fixture(scope="module")
def study_doc() -> dict:
    from tracescale import api

    return api.analyze(str(RUN), jobs=1, no_cache=True).doc


def _paths(value: object, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:2]):
            out += _paths(v, (*prefix, i))
    return out


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_report_on_mutated_study_json(study_doc, tmp_path_factory, capsys, data):
    doc = copy.deepcopy(study_doc)
    paths = [p for p in _paths(doc) if p]
    for _ in range(data.draw(st.integers(1, 3))):
        where = data.draw(st.sampled_from(paths))
        parent = doc
        try:
            for key in where[:-1]:
                parent = parent[key]
            if data.draw(st.booleans()) and isinstance(parent, dict):
                parent.pop(where[-1], None)
            else:
                parent[where[-1]] = data.draw(ODD)
        except (KeyError, IndexError, TypeError):
            continue
    path = tmp_path_factory.mktemp("report") / "study.json"
    text = json.dumps(doc)
    if data.draw(st.booleans()):
        text = text[: data.draw(st.integers(0, len(text)))]
    path.write_text(text)
    fmt = data.draw(st.sampled_from(["table", "json", "markdown", "html"]))
    try:
        main(["report", str(path), "--format", fmt])
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    err = capsys.readouterr().err
    assert code in (0, 3), err
    if code:
        assert err.startswith(f"tracescale: error: {path}: ") and err.count("\n") == 1


@pytest.fixture(scope="module")
def entry(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, dict]:
    from tracescale.classify.rules import load_rules
    from tracescale.parallel import RankTask, run_task
    from tracescale.parallel.cache import make_key
    from tracescale.parallel.entry import encode

    task = RankTask(str(sorted(RUN.glob("*.json.gz"))[0]), rank=0)
    result = run_task(task)
    assert isinstance(result, RankResult)
    key = make_key(task, load_rules(None).digest)
    assert key is not None
    return encode(result, key.as_dict()), key.as_dict()


def _resealed(header: dict, payload: bytes) -> bytes:
    from tracescale.parallel.entry import MAGIC

    head = json.dumps(header).encode()
    body = len(head).to_bytes(8, "little") + head + payload
    return MAGIC + hashlib.sha256(body).digest() + body


@settings(max_examples=120, deadline=None)
@given(data=st.data())
def test_cache_entries_decode_or_miss(entry, data):
    """Damaged bytes, and crafted entries whose checksum is valid, never crash the decoder."""
    from tracescale.parallel.entry import decode, read_header

    blob, key = entry
    if data.draw(st.booleans()):  # raw damage: the checksum catches it
        b = bytearray(blob)
        for _ in range(data.draw(st.integers(1, 4))):
            b[data.draw(st.integers(0, len(b) - 1))] ^= data.draw(st.integers(1, 255))
        crafted = bytes(b)
    else:  # a crafted header with a correct checksum
        header, payload = read_header(blob)
        header = copy.deepcopy(header)
        where = data.draw(st.sampled_from([p for p in _paths(header) if p and p[0] != "key"]))
        parent = header
        for k in where[:-1]:
            parent = parent[k]
        parent[where[-1]] = data.draw(ODD)
        crafted = _resealed(header, bytes(payload))
    try:
        result = decode(crafted, key)
    except ValueError:  # EntryError and what numpy/zipfile raise: a miss
        return
    except (KeyError, TypeError, AttributeError, IndexError, OverflowError, EOFError):
        return  # also a miss in ResultCache.get, which catches every Exception
    assert isinstance(result, RankResult)


_RULE_LINES = st.sampled_from(
    [
        "[[host]]",
        "[[device]]",
        "[host]",
        'pattern = "^x$"',
        'pattern = "("',
        'pattern = "' + "(" * 300 + ")" * 300 + '"',
        'target = "dataloader"',
        'target = "compute"',
        'target = "nope"',
        'cat = "cpu_op"',
        'builtin = "nccl"',
        'builtin = "what"',
        "pattern = 3",
        "host = 5",
        "a = [[[[[[1]]]]]]",
        "\x00",
        "= =",
    ]
)


@settings(max_examples=100, deadline=None)
@given(lines=st.lists(_RULE_LINES, max_size=8), raw=st.binary(max_size=40))
def test_rules_files_load_or_usage_error(tmp_path_factory, lines, raw):
    from tracescale.classify.rules import load_rules

    path = tmp_path_factory.mktemp("rules") / "rules.toml"
    path.write_bytes("\n".join(lines).encode() + (raw if len(lines) % 3 == 0 else b""))
    try:
        rules = load_rules(str(path))
    except TracescaleError as exc:
        assert exc.exit_code == 2 and str(exc).startswith(str(path)) and "\n" not in exc.message
        return
    assert rules.digest


def test_rules_file_fifo_and_non_utf8(tmp_path):
    import os

    from tracescale.classify.rules import load_rules

    fifo = tmp_path / "rules.toml"
    os.mkfifo(fifo)
    with pytest.raises(TracescaleError, match="not a regular file"):
        load_rules(str(fifo))  # would block forever if opened
    bad = tmp_path / "latin1.toml"
    bad.write_bytes(b'[[host]]\npattern = "caf\xe9"\ntarget = "dataloader"\n')
    with pytest.raises(TracescaleError, match="not UTF-8"):
        load_rules(str(bad))


@pytest.fixture(scope="module")
def study_entry(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict, dict]:
    """A study-cache slot of the sample run: (cache dir, slot, header key, document)."""
    from tracescale.parallel import study_cache

    cache = tmp_path_factory.mktemp("study-cache")
    out = cache.parent / f"{cache.name}-first.txt"
    main(["analyze", str(RUN), "-j1", "--cache-dir", str(cache), "-q", "-o", str(out)])
    magic = study_cache.MAGIC
    (slot,) = [p for p in cache.rglob("*") if p.is_file() and p.read_bytes()[: len(magic)] == magic]
    blob = slot.read_bytes()
    fixed = len(magic) + hashlib.sha256().digest_size + 8
    n = int.from_bytes(blob[fixed - 8 : fixed], "little")
    return cache, slot, json.loads(blob[fixed : fixed + n])["key"], json.loads(blob[fixed + n :])


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_study_cache_entries_render_or_miss(study_entry, tmp_path, capsys, data):
    """A study-cache entry with a valid checksum but a crafted document (the checksum guards
    against damage, not against someone who can write the cache) still renders or fails with a
    documented code; damaged bytes are a miss."""
    from tracescale.parallel import study_cache

    cache, slot, key, doc = study_entry
    if data.draw(st.booleans()):
        crafted = copy.deepcopy(doc)
        where = data.draw(st.sampled_from([p for p in _paths(crafted) if p]))
        parent = crafted
        for k in where[:-1]:
            parent = parent[k]
        parent[where[-1]] = data.draw(ODD)
        slot.write_bytes(study_cache.encode(crafted, key))
    else:
        blob = bytearray(study_cache.encode(doc, key))
        blob[data.draw(st.integers(0, len(blob) - 1))] ^= data.draw(st.integers(1, 255))
        slot.write_bytes(bytes(blob))
    out = tmp_path / "report.txt"
    try:
        main(
            ["analyze", str(RUN), "-j1", "--cache-dir", str(cache), "-q", "-o", str(out), "--force"]
        )
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    err = capsys.readouterr().err
    assert code in (0, 2, 3) and "internal error" not in err, err
