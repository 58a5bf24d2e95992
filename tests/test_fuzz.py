"""Fuzzing: mutated real (small) traces load (and pass the plausibility checks) into a valid
RankTrace or raise InvalidTraceError.

Bounded examples keep the whole file well under a minute. Crashes found here become named
regression tests in test_bad_inputs.py / test_numbers.py.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracescale.errors import InvalidTraceError
from tracescale.ingest.group import load_checked
from tracescale.ingest.steps import find_steps

_SHARED = Path(__file__).parents[1].parent / "shared" / "traces" / "hta"
_SMALL = ["trace_compare/base/base.json.gz", "amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"]
_FALLBACK = {
    "schemaVersion": 1,
    "distributedInfo": {"rank": 0, "world_size": 2},
    "traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
         "ts": 100.5, "dur": 50},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
         "ts": 101, "dur": 2, "args": {"correlation": 4, "External id": 3}},
        {"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce", "pid": 0, "tid": 7,
         "ts": 120, "dur": 40, "args": {"correlation": 4, "device": 0, "stream": 7}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}},
    ],
}  # fmt: skip


def _seeds() -> list[dict]:
    docs = [_FALLBACK]
    for rel in _SMALL:
        p = _SHARED / rel
        if p.exists():
            docs.append(json.loads(gzip.decompress(p.read_bytes())))
    return docs


SEEDS = _seeds()
ODD = st.one_of(
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.none(),
    st.booleans(),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.sampled_from(["", "X", "M", "B", "\ud7ff", "ProfilerStep#1", "1e400", "-"]),
)
KEYS = ["ph", "ts", "dur", "pid", "tid", "name", "cat", "args"]
ARG_KEYS = ["correlation", "stream", "device", "External id", "Collective name", "Input Dims"]


@st.composite
def mutated(draw):
    doc = json.loads(json.dumps(draw(st.sampled_from(SEEDS))))
    events = doc["traceEvents"]
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["drop", "set", "arg", "shuffle", "top", "delete"]))
        if not events:
            break
        i = draw(st.integers(0, len(events) - 1))
        ev = events[i]
        if op == "drop" and isinstance(ev, dict):
            ev.pop(draw(st.sampled_from(KEYS)), None)
        elif op == "set" and isinstance(ev, dict):
            ev[draw(st.sampled_from(KEYS))] = draw(ODD)
        elif op == "arg" and isinstance(ev, dict):
            args = ev.setdefault("args", {})
            if isinstance(args, dict):
                args[draw(st.sampled_from(ARG_KEYS))] = draw(ODD)
        elif op == "shuffle":
            draw(st.randoms()).shuffle(events)
        elif op == "top":
            doc[
                draw(st.sampled_from(["distributedInfo", "schemaVersion", "baseTimeNanoseconds"]))
            ] = draw(ODD)
        elif op == "delete":
            events[i] = draw(ODD)
    text = json.dumps(doc, allow_nan=True).encode("utf-8", "surrogatepass")
    if draw(st.booleans()):
        text = text[: draw(st.integers(0, len(text)))]
    return text


def _check(path: Path) -> None:
    try:
        t = load_checked(str(path))  # decode + plausibility, as workers and inspect do
    except InvalidTraceError as exc:
        assert str(exc).startswith(str(path)) and "\n" not in str(exc)
        return
    ev = t.events
    n = len(ev)
    assert all(len(col) == n for col in ev.__dict__.values())
    assert np.all(ev.dur >= 0) and np.all(np.diff(ev.start) >= 0)
    assert np.all(ev.name < len(t.strings)) and np.all(ev.cat < len(t.strings))
    if n:
        find_steps(t)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated(), st.booleans())
def test_mutated_traces_load_or_raise_invalid_trace(tmp_path_factory, data, gz):
    path = tmp_path_factory.mktemp("fuzz") / "t.json"
    path.write_bytes(gzip.compress(data) if gz else data)
    _check(path)


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_never_crash(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fuzz") / "r.json"
    path.write_bytes(data)
    _check(path)


@pytest.mark.parametrize("cut", [1, 10, 100, 1000])
def test_truncated_gzip_of_real_trace(tmp_path, cut):
    data = gzip.compress(json.dumps(SEEDS[-1]).encode())
    path = tmp_path / "t.json.gz"
    path.write_bytes(data[:-cut])
    _check(path)
