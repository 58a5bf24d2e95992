"""The compiled scanner gives exactly the typed path's RankTrace, and the lenient reference's
values, on every shipped, real and simulated trace and on hand-written edge cases."""

from __future__ import annotations

import dataclasses
import gzip
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
from conftest import require_module

from tracescale.categories import ANNOTATION_CAT as ANNOTATION
from tracescale.ingest import decode, fast
from tracescale.ingest.build import STRING_COLUMNS
from tracescale.ingest.lenient import load_lenient
from tracescale.ingest.numbers import slow_parse, us_text_to_ns
from tracescale.ingest.trace import RankTrace
from tracescale.simulate import make_params, simulate

require_module(
    "numba", "the compiled scanner needs numba (a dependency; the typed path is used without it)"
)
from tracescale.ingest import jsonbytes  # noqa: E402

fast.warm_up()  # every load_trace below goes through the scanner, whatever the file's size
ROOT = Path(__file__).parents[1]
SHARED = ROOT.parent / "shared" / "traces"
#: The lenient reference runs Python per event: on the few larger real files the typed path
#: (itself compared with the lenient one on every other file) is the reference.
_LENIENT_MAX_BYTES = 8_000_000
ID_COLUMNS = STRING_COLUMNS


@contextmanager
def typed_path() -> Iterator[None]:
    with mock.patch.object(fast, "available", lambda: False):
        yield


def load_three(path: Path, *, lenient: bool = True) -> tuple[RankTrace, RankTrace, Any]:
    """(scanner, typed, lenient) results for one file; asserts the scanner really ran."""
    data = decode.read_bytes(str(path))
    assert fast.scan_trace(data) is not None, "the scanner gave up on a plain trace"
    got = decode.load_trace(str(path))
    with typed_path():
        typed = decode.load_trace(str(path))
    if not lenient:
        return got, typed, None
    return got, typed, load_lenient(data, str(path), path.stat().st_size)


def assert_identical(a: RankTrace, b: RankTrace) -> None:
    """Same table, same ids, same dtypes, same metadata: nothing differs at all."""
    assert a.strings == b.strings
    for f in dataclasses.fields(a.events):
        x, y = getattr(a.events, f.name), getattr(b.events, f.name)
        assert x.dtype == y.dtype, f.name
        np.testing.assert_array_equal(x, y, err_msg=f.name)
    assert a.meta == b.meta
    assert list(a.meta.skipped) == list(b.meta.skipped)  # reasons in the same order
    assert a.pid_names == b.pid_names


def assert_same_values(a: RankTrace, ref: RankTrace) -> None:
    """Against the lenient reference: the same decoded strings and numbers per event (its one
    chunk may number strings and string pids in another order)."""
    for f in dataclasses.fields(a.events):
        x, y = getattr(a.events, f.name), getattr(ref.events, f.name)
        if f.name in ("input_dims", "input_type"):  # JSON text: the lenient path re-spells it
            assert [_json(t) for t in a.names(x)] == [_json(t) for t in ref.names(y)], f.name
        elif f.name in ID_COLUMNS:
            assert a.names(x) == ref.names(y), f.name
        elif f.name in ("pid", "tid"):
            assert [a.pid_names.get(v, v) for v in x.tolist()] == [
                ref.pid_names.get(v, v) for v in y.tolist()
            ], f.name
        else:
            np.testing.assert_array_equal(x, y, err_msg=f.name)
    assert a.meta.skipped == ref.meta.skipped
    assert a.meta.total_events == ref.meta.total_events


def _json(text: str) -> Any:
    return json.loads(text) if text else None


def _shipped() -> list[Path]:
    files = sorted((ROOT / "sample_traces").glob("*/ws*/*.json*"))
    if SHARED.is_dir():
        files += sorted(p for p in SHARED.rglob("*.json*") if "trace" in p.name or "rank" in p.name)
    return files


@pytest.mark.parametrize("path", _shipped(), ids=lambda p: str(p.relative_to(p.parents[2])))
def test_shipped_and_real_traces(path: Path) -> None:
    data = decode.read_bytes(str(path))
    if fast.scan_trace(data) is None:  # e.g. non-ASCII names: the typed path reads it
        with typed_path():
            typed = decode.load_trace(str(path))
        assert_identical(decode.load_trace(str(path)), typed)
        return
    got, typed, lenient = load_three(path, lenient=len(data) <= _LENIENT_MAX_BYTES)
    assert_identical(got, typed)
    if lenient is not None:
        assert_same_values(got, lenient)


def test_real_traces_present_or_skip(shared_traces: Path) -> None:
    assert any(shared_traces.rglob("*.json.gz"))


def test_simulated_study_many_chunks(tmp_path: Path) -> None:
    """Several chunks of events per file, so first-seen string order spans chunks."""
    simulate([2], tmp_path, steps=6, seed=3, params=make_params({"layers": 60}))
    files = sorted(tmp_path.glob("ws2/*.json.gz"))
    assert files
    for path in files:
        got, typed, lenient = load_three(path)
        assert got.meta.total_events > decode.CHUNK_EVENTS
        assert_identical(got, typed)
        assert_same_values(got, lenient)


def _event(i: int, **kw: Any) -> dict[str, Any]:
    ev: dict[str, Any] = {
        "ph": "X",
        "cat": "cpu_op",
        "name": f"op{i % 7}",
        "pid": 1,
        "tid": 2,
        "ts": 1000 + i,
        "dur": 3,
    }
    ev.update(kw)
    return {k: v for k, v in ev.items() if v is not _DROP}


_DROP = object()


def _edge_events(n: int) -> list[dict[str, Any]]:
    """Every quirk the typed path handles, spread over several chunks."""
    events: list[dict[str, Any]] = []
    for i in range(n):
        k = i % 23
        if k == 0:
            events.append(_event(i, pid="Spans", tid="t" + str(i % 3)))
        elif k == 1:
            events.append(_event(i, pid="25738", tid=7))
        elif k == 2:
            events.append(_event(i, ts=_DROP))
        elif k == 3:
            events.append(_event(i, dur="12"))
        elif k == 4:
            events.append(_event(i, ts=1.5e3))
        elif k == 5:
            events.append(_event(i, dur=-4))
        elif k == 6:
            events.append(_event(i, dur=10**15))
        elif k == 7:
            events.append(_event(i, ph="B"))
        elif k == 8:
            events.append(_event(i, ph=_DROP))
        elif k == 9:
            events.append(_event(i, name='quote " back \\ tab \t é'.replace("é", "e")))
        elif k == 10:
            args = {"Input Dims": [[1, 2], []], "Input type": ["float", ""], "Seq": 4}
            events.append(_event(i, args=args))
        elif k == 11:
            args = {"Collective name": "allreduce", "dtype": "Float", "In msg nelems": 2**62}
            events.append(_event(i, cat="kernel", args=args))
        elif k == 12:
            events.append(_event(i, ts="1234.5678", name=""))
        elif k == 13:
            events.append(_event(i, ts=1234.5675, dur=0.0005))
        elif k == 14:
            events.append(
                {
                    "ph": "M",
                    "name": "thread_name",
                    "pid": 1,
                    "tid": 2,
                    "args": {"name": f"thread {i}"},
                }
            )
        elif k == 15:
            events.append({"ph": "s", "id": i, "pid": 1, "tid": 2, "ts": 5, "cat": "ac2g"})
        elif k == 16:
            events.append(_event(i, cat=_DROP, extra={"nested": [1, {"a": None}]}))
        elif k == 17:
            events.append(_event(i, ts=123456789012345.678, dur=99999999.9999))
        elif k == 18:
            events.append(_event(i, args={"External id": i, "external id": 5, "stream": 7}))
        else:
            events.append(_event(i))
    return events


@pytest.mark.parametrize("n", [40, 3 * 8192 + 17])
def test_edge_cases_match_typed_and_lenient(tmp_path: Path, n: int) -> None:
    path = tmp_path / "edge.json.gz"
    doc = {
        "schemaVersion": 1,
        "distributedInfo": {"rank": 3, "world_size": 4},
        "traceEvents": _edge_events(n),
    }
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    got, typed, lenient = load_three(path)
    assert_identical(got, typed)
    assert_same_values(got, lenient)
    assert set(got.meta.skipped) >= {
        "events without ph",
        "begin/end (B/E) events",
        "events without ts",
        "events with negative dur",
    }
    assert -1 in got.pid_names and got.meta.thread_names


@pytest.mark.parametrize(
    "event",
    [
        {"ph": "X", "name": "a", "ts": 1, "dur": 2, "args": {"Seq": 4.0}},  # float count
        {"ph": "X", "name": "a", "ts": 1, "dur": 2, "args": None},
        {"ph": "X", "name": None, "ts": 1, "dur": 2},
        {"ph": "X", "name": "a", "pid": 1.5, "ts": 1, "dur": 2},
        {"ph": "X", "name": "a", "ts": 1, "dur": 2, "args": {"stream": 10**20}},
        {"ph": "X", "name": "a", "ts": 1, "dur": 2, "args": {"dtype": 5}},
        [1, 2],
    ],
)
def test_what_the_typed_decoder_rejects_is_left_to_it(tmp_path: Path, event: Any) -> None:
    path = tmp_path / "odd.json"
    good = {"ph": "X", "name": "b", "ts": 5, "dur": 1}
    path.write_text(json.dumps({"traceEvents": [good, event]}))
    assert fast.scan_trace(decode.read_bytes(str(path))) is None
    with typed_path():
        typed = decode.load_trace(str(path))
    assert_identical(decode.load_trace(str(path)), typed)


def test_duplicate_keys_are_left_to_the_typed_decoder(tmp_path: Path) -> None:
    path = tmp_path / "dup.json"
    path.write_text('{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "ts": 2, "dur": 1}]}')
    assert fast.scan_trace(decode.read_bytes(str(path))) is None
    assert decode.load_trace(str(path)).events.start.tolist() == [2000]


def test_parse_us_matches_vectorized_parser() -> None:
    rng = np.random.default_rng(5)
    alphabet = list(b"0123456789.-e+ ")
    texts = [
        b"",
        b"-",
        b".",
        b"0",
        b"-0",
        b"1.0005",
        b"-1.0005",
        b"1.00049",
        b"8999999999999999",
        b"9999999999999999",
        b"1e3",
        b"12.3456789",
        b"00012",
        b"1..2",
        b"NaN",
        b'"5"',
    ]
    for _ in range(3000):
        length = int(rng.integers(1, 22))
        if rng.random() < 0.7:  # mostly plausible decimals
            ip = "".join(rng.choice(list("0123456789"), int(rng.integers(1, 18))))
            fp = "".join(rng.choice(list("0123456789"), int(rng.integers(0, 8))))
            sign = "-" if rng.random() < 0.2 else ""
            texts.append(f"{sign}{ip}.{fp}".encode() if fp else f"{sign}{ip}".encode())
        else:
            texts.append(bytes(rng.choice(alphabet, length).tolist()))
    values, valid = us_text_to_ns(texts)
    for t, v, ok in zip(texts, values.tolist(), valid.tolist(), strict=True):
        buf = np.frombuffer(t or b" ", dtype=np.uint8)
        status, got = jsonbytes.parse_us(buf, 0, len(t))
        if status == jsonbytes.NUM_PLAIN:
            assert ok and got == v, t
        elif status == jsonbytes.NUM_MISSING:
            assert t == b"" and not ok
        else:  # the scanner's caller parses these with Decimal: must agree with numpy's path
            parsed = slow_parse(t)
            assert (parsed is not None) == ok and (parsed is None or parsed == v), t


def test_annotated_copy_reads_as_its_original_with_the_scanner_loaded(tmp_path: Path) -> None:
    """tracescale annotate's added tracks are dropped on every path, so re-analysis of a copy
    equals the original even where the scanner reads the files (big studies)."""
    from tracescale.annotate import annotate

    src = ROOT / "sample_traces" / "sim_gpu_strong" / "ws2"
    annotate(str(src), str(tmp_path / "out"))
    copies = sorted((tmp_path / "out").rglob("*.json*"))
    assert copies
    for copy in copies:
        original = src / copy.name
        got = decode.load_trace(str(copy))
        with typed_path():
            typed = decode.load_trace(str(copy))
        assert_identical(got, typed)
        base = decode.load_trace(str(original))
        assert len(got.events.cat) == len(base.events.cat)
        assert ANNOTATION not in {got.strings[i] for i in got.events.cat.tolist()}
