"""Bad-input corpus: each file gets its documented one-line outcome.

Malformed files raise InvalidTraceError (exit 3) naming the file; malformed events inside a good
file are skipped and counted. Files are built here, not committed, so each case is readable.
"""

from __future__ import annotations

import gzip
import json

import pytest
from click.testing import CliRunner

from tracescale.cli.main import cli
from tracescale.errors import InvalidTraceError
from tracescale.ingest import load_trace

GOOD = {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}
GOOD_DOC = json.dumps({"traceEvents": [GOOD]}).encode()

# (case id, file bytes, expected message fragment)
BAD_FILES = [
    ("truncated_gzip", gzip.compress(GOOD_DOC * 50)[:-30], "truncated gzip"),
    ("gzip_of_garbage", b"\x1f\x8b\x08\x00" + b"\xff" * 100, "corrupt gzip"),
    ("invalid_json", b'{"traceEvents": [}', "not valid JSON"),
    ("truncated_json", GOOD_DOC[:-5], "not valid JSON"),
    ("empty_file", b"", "empty file"),
    ("whitespace_only", b"  \n ", "empty file"),
    ("top_level_number", b"42", "neither an object with 'traceEvents' nor an array"),
    ("top_level_string", b'"hello"', "neither an object"),
    ("events_empty", b'{"traceEvents": []}', "'traceEvents' is empty"),
    ("events_not_list", b'{"traceEvents": {"a": 1}}', "'traceEvents' is not a list"),
    ("no_trace_events", b'{"foo": 1}', "no 'traceEvents' key"),
    (
        "execution_trace",
        b'{"schema": "1.0.1", "pid": 1, "time": "x", "start_ts": 1, "nodes": [{"id": 1}]}',
        "execution trace",
    ),
    ("memory_snapshot", b'{"segments": [], "device_traces": [[]]}', "memory snapshot"),
    ("binary_junk", b"\x00\x01\x02PK\x03\x04", "not valid JSON"),
]


@pytest.mark.parametrize(("case", "data", "message"), BAD_FILES, ids=[c[0] for c in BAD_FILES])
def test_bad_file_raises_one_line(tmp_path, case, data, message):
    p = tmp_path / f"{case}.json"
    p.write_bytes(data)
    with pytest.raises(InvalidTraceError) as info:
        load_trace(str(p))
    text = str(info.value)
    assert message in text and text.startswith(str(p)) and "\n" not in text
    assert info.value.exit_code == 3


@pytest.mark.parametrize(
    ("case", "data", "message"), BAD_FILES[:4], ids=[c[0] for c in BAD_FILES[:4]]
)
def test_bad_file_through_cli_inspect(tmp_path, case, data, message):
    p = tmp_path / "rank0.json"
    p.write_bytes(data)
    res = CliRunner().invoke(cli, ["inspect", str(p)], standalone_mode=False)
    assert isinstance(res.exception, InvalidTraceError) and message in str(res.exception)


def test_cli_main_prints_one_line_and_exit_3(tmp_path, capsys):
    from tracescale.cli.main import main

    p = tmp_path / "bad.json"
    p.write_bytes(b'{"traceEvents": [')
    with pytest.raises(SystemExit) as info:
        main(["inspect", str(p)])
    assert info.value.code == 3
    err = capsys.readouterr().err
    assert err.startswith(f"tracescale: error: {p}: not valid JSON") and err.count("\n") == 1
    with pytest.raises(InvalidTraceError):  # --debug: the traceback, not the one-liner
        main(["--debug", "inspect", str(p)])


EVENT_CASES = [
    ("missing_ts", {"ph": "X", "name": "b", "dur": 1}, {"events without ts": 1}),
    ("missing_dur", {"ph": "X", "name": "b", "ts": 1}, {"events without dur": 1}),
    ("missing_ph", {"name": "b", "ts": 1, "dur": 1}, {"events without ph": 1}),
    ("negative_dur", {**GOOD, "dur": -1}, {"events with negative dur": 1}),
    ("absurd_dur", {**GOOD, "dur": 1e12}, {"events with absurd dur": 1}),  # 11 days
    ("string_dur", {**GOOD, "dur": "12"}, {"events with non-numeric ts/dur": 1}),
    ("not_an_object", 17, {"malformed events": 1}),
    ("begin_end", {"ph": "B", "name": "b", "ts": 1}, {"begin/end (B/E) events": 1}),
]


@pytest.mark.parametrize(("case", "event", "skipped"), EVENT_CASES, ids=[c[0] for c in EVENT_CASES])
def test_bad_events_are_skipped_and_counted(tmp_path, case, event, skipped):
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": [GOOD, event]}))
    t = load_trace(str(p))
    assert len(t.events) == 1 and t.meta.skipped == skipped


NON_NUMERIC = {"events with non-numeric ts/dur": 1}
OUT_OF_RANGE = {"events with ts/dur out of range": 1}
NUMBER_CASES = {
    "nan": ("1", "NaN", NON_NUMERIC),
    "infinity": ("1", "Infinity", NON_NUMERIC),
    "minus_infinity": ("1", "-Infinity", NON_NUMERIC),
    "string": ('"1"', "1", NON_NUMERIC),
    "float_overflow": ("1e400", "1", OUT_OF_RANGE),
    "ts_beyond_64_bits": ("123456789012345678901234567890", "1", OUT_OF_RANGE),
    "ts_1e18_us": ("1e18", "1", OUT_OF_RANGE),
    "dur_beyond_64_bits": ("1", "-98765432109876543210", OUT_OF_RANGE),
}


@pytest.mark.parametrize(("ts", "dur", "skipped"), NUMBER_CASES.values(), ids=NUMBER_CASES.keys())
def test_non_finite_and_huge_numbers(tmp_path, ts, dur, skipped):
    """A number too large for int64 ns is "out of range", never "non-numeric"."""
    text = f'{{"ph":"X","name":"b","pid":1,"tid":1,"ts":{ts},"dur":{dur}}}'
    p = tmp_path / "t.json"
    p.write_text('{"traceEvents": [' + json.dumps(GOOD) + "," + text + "]}")
    t = load_trace(str(p))
    assert len(t.events) == 1 and t.meta.skipped == skipped


def test_ints_beyond_64_bits_in_args_and_pid(tmp_path):
    big = 2**70
    p = tmp_path / "t.json"
    odd = {**GOOD, "pid": big, "args": {"correlation": big, "stream": 3}}
    doc = {"traceEvents": [GOOD, odd], "distributedInfo": {"rank": big, "world_size": 2}}
    p.write_text(json.dumps(doc))
    t = load_trace(str(p))
    assert len(t.events) == 2 and t.meta.rank is None
    assert sorted(t.events.correlation.tolist()) == [-1, -1]


def test_non_utf8_bytes_in_names(tmp_path):
    p = tmp_path / "t.json"
    p.write_bytes(b'{"traceEvents": [{"ph": "X", "name": "bad\xff\xfename", "ts": 1, "dur": 2}]}')
    t = load_trace(str(p))
    assert t.names(t.events.name) == ["bad\ufffd\ufffdname"]


def test_unreadable_file(tmp_path, monkeypatch):
    import builtins

    p = tmp_path / "t.json"
    p.write_bytes(GOOD_DOC)
    real_open = builtins.open

    def deny(file, *a, **k):
        if str(file) == str(p):
            raise PermissionError(13, "Permission denied")
        return real_open(file, *a, **k)

    monkeypatch.setattr(builtins, "open", deny)
    with pytest.raises(InvalidTraceError, match="permission denied"):
        load_trace(str(p))


def test_directory_and_missing_file(tmp_path):
    with pytest.raises(InvalidTraceError, match="is a directory"):
        load_trace(str(tmp_path))
    with pytest.raises(InvalidTraceError, match="no such file"):
        load_trace(str(tmp_path / "nope.json"))


def test_real_execution_trace_folder_is_kineto(shared_traces):
    # HTA's execution_trace folder holds the Kineto side of an ET pair: it loads.
    p = shared_traces / "hta" / "execution_trace" / "benchmark_simple_add_trace.json.gz"
    assert len(load_trace(str(p)).events) > 0


def test_regression_garbage_gzip_trailer_does_not_allocate_gigabytes(tmp_path):
    # The gzip trailer (ISIZE) of a corrupt file is noise: trusting it allocated 4 GB.
    import tracemalloc

    p = tmp_path / "g.json.gz"
    p.write_bytes(b"\x1f\x8b\x08\x00" + b"\xff" * 100)
    tracemalloc.start()
    with pytest.raises(InvalidTraceError):
        load_trace(str(p))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 50 * 1024 * 1024
