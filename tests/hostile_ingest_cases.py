"""Hypothesis fuzzing of discovery and ingest with hostile claimed sizes and byte file names.

Not collected by pytest on its own: ``test_hostile_ingest_fuzz.py`` runs it in a child process
under an address-space cap (``resource.setrlimit(RLIMIT_AS)``), so a claim that makes the tool
allocate in proportion to it (``set(range(world_size))``) ends the child with a MemoryError, a
failed test, instead of swapping the machine. Each property: the entry point either works or
refuses in one line with a documented exit code; never an internal error, never "out of memory".

Usage: ``python tests/hostile_ingest_cases.py``; exit 0 when every property held.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracescale.cli.main import main
from tracescale.ingest.claims import MAX_WORLD_SIZE
from tracescale.ingest.discover import discover
from tracescale.parallel.tasks import RankTask, TaskError, run_task

#: Examples per property (``HOSTILE_EXAMPLES`` in the environment; the file names get a fourth).
EXAMPLES = int(os.environ.get("HOSTILE_EXAMPLES", "40"))
#: Sizes a file may claim: small ones, the ceiling's edges, and the numbers attackers pick.
CLAIM = st.one_of(
    st.integers(-2, 9),
    st.sampled_from(
        [
            MAX_WORLD_SIZE - 1,
            MAX_WORLD_SIZE,
            MAX_WORLD_SIZE + 1,
            10**9,
            10**12,
            2**31,
            2**32 - 1,
            2**63 - 1,
            2**63,
            2**64,
            10**30,
        ]
    ),
    st.integers(-(2**70), 2**70),
)
OPTIONAL_CLAIM = st.one_of(st.none(), CLAIM)
#: ProfilerStep#N numbers: the claims above, and 18 / 19 / 400 digits.
STEP = st.one_of(CLAIM, st.sampled_from([10**18 - 1, 10**18, 10**400]))
FOLDERS = st.sampled_from(["ws2", "run", "n1000000000000", f"gpus{MAX_WORLD_SIZE + 1}", "8gpus"])
CODES = {0, 2, 3, 4}  # ok, usage (tracescale.toml), invalid input, nothing to read


def _events(rank: int, group: dict[str, Any], stream: Any, step: Any) -> list[dict[str, Any]]:
    """Two ProfilerSteps with a kernel each and one collective that names a process group."""
    pid = 100 + rank
    out: list[dict[str, Any]] = []
    for k in range(2):
        t = 1000 + k * 1000
        name = f"ProfilerStep#{step if k == 0 else 7}"
        out.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": name,
                "pid": pid,
                "tid": 1,
                "ts": t,
                "dur": 900,
            }
        )
        out.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::mm",
                "pid": pid,
                "tid": 1,
                "ts": t + 10,
                "dur": 100,
                "args": {"External id": k + 1},
            }
        )
        out.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": "gemm",
                "pid": 0,
                "tid": stream,
                "ts": t + 120,
                "dur": 300,
                "args": {"stream": stream, "device": 0, "correlation": k + 1},
            }
        )
        out.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "record_param_comms",
                "pid": pid,
                "tid": 1,
                "ts": t + 500,
                "dur": 50,
                "args": {
                    "Collective name": "allreduce",
                    "In msg nelems": 4,
                    "Out msg nelems": 4,
                    "dtype": "Float",
                    **group,
                },
            }
        )
    return out


def _cli(argv: list[str]) -> tuple[int, str]:
    """Exit code and stderr of the CLI, with stdout as strict UTF-8 (a terminal's) and stderr
    as Python's own (backslashreplace), so a path the terminal cannot take still fails."""
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="backslashreplace")
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
        except SystemExit as exc:
            code = int(exc.code or 0)
        out.flush()
        err.flush()
    assert isinstance(err.buffer, io.BytesIO)
    return code, err.buffer.getvalue().decode("utf-8", "replace")


def _check_refusal(code: int, err: str) -> None:
    assert code in CODES, (code, err)
    if code:
        assert err.count("\n") == 1 and err.startswith("tracescale: error: "), err


def _check_map(folder: str) -> None:
    """Every rank file discovery found loads and classifies, or is one file's clear refusal."""
    for study in discover(folder):
        for run in study.runs:
            for path in run.paths:
                got = run_task(RankTask(path, rank=0))
                if isinstance(got, TaskError):
                    assert "internal error" not in got.message, got.message
                    assert "out of memory" not in got.message, got.message


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(
    world=OPTIONAL_CLAIM,
    ranks=st.lists(OPTIONAL_CLAIM, min_size=1, max_size=3),
    group_size=CLAIM,
    start=CLAIM,
    stride=CLAIM,
    pg_size=CLAIM,
    pg_count=CLAIM,
    step=STEP,
    stream=CLAIM,
    folder=FOLDERS,
    toml_ws=OPTIONAL_CLAIM,
)
def claimed_sizes(
    world: int | None,
    ranks: list[int | None],
    group_size: int,
    start: int,
    stride: int,
    pg_size: int,
    pg_count: int,
    step: int,
    stream: int,
    folder: str,
    toml_ws: int | None,
) -> None:
    """Whatever sizes the files, the folder name and tracescale.toml claim: inspect and the
    per-rank map either work or refuse in one line, within the memory cap."""
    with tempfile.TemporaryDirectory() as tmp:
        run = os.path.join(tmp, "study", folder)
        os.makedirs(run)
        group = {
            "Group size": group_size,
            "Global rank start": start,
            "Global rank stride": stride,
            "Process Group Name": "0",
            "Process Group Ranks": "[0, 1, ...]",
        }
        for k, rank in enumerate(ranks):
            dist: dict[str, Any] = {
                "backend": "nccl",
                "pg_count": pg_count,
                "pg_config": [{"pg_name": "0", "pg_size": pg_size, "ranks": [0, 1]}],
            }
            if world is not None:
                dist["world_size"] = world
            if rank is not None:
                dist["rank"] = rank
            doc = {"distributedInfo": dist, "traceEvents": _events(k, group, stream, step)}
            with open(os.path.join(run, f"host_{k}.pt.trace.json"), "w") as fh:
                json.dump(doc, fh)
        root = os.path.join(tmp, "study")
        if toml_ws is not None:
            with open(os.path.join(root, "tracescale.toml"), "w") as fh:
                fh.write(f'[[run]]\nworld_size = {toml_ws}\npath = "{folder}"\n')
        code, err = _cli(["inspect", root, "--format", "json"])
        _check_refusal(code, err)
        if code == 0:
            _check_map(root)


NAME_BYTES = st.binary(min_size=1, max_size=12).filter(lambda b: b"/" not in b and b"\0" not in b)


@settings(
    max_examples=max(EXAMPLES // 4, 3),
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(names=st.lists(NAME_BYTES, min_size=1, max_size=2, unique=True), empty=st.booleans())
def byte_file_names(names: list[bytes], empty: bool) -> None:
    """Rank files named by any bytes (not UTF-8, controls, newlines): inspect and annotate
    work or refuse in one line; a name the terminal cannot take never crashes the tool
    (analyze and compare: test_hostile_ingest.py)."""
    group = {"Group size": 1, "Process Group Name": "0", "Process Group Ranks": "[0]"}
    trace = json.dumps({"traceEvents": _events(0, group, 7, 1)}).encode()
    with tempfile.TemporaryDirectory() as tmp:
        run = os.path.join(os.fsencode(tmp), b"study", b"ws1")
        os.makedirs(run)
        for k, name in enumerate(names):
            with open(os.path.join(run, name + b".json"), "wb") as fh:
                fh.write(b"" if empty and k == 0 else trace)
        root = os.fsdecode(os.path.join(os.fsencode(tmp), b"study"))
        for fmt in ("table", "json"):
            code, err = _cli(["inspect", root, "--format", fmt])
            _check_refusal(code, err)
        code, err = _cli(["annotate", root, "-o", os.path.join(tmp, "ann"), "-j1", "--no-cache"])
        _check_refusal(code, err)


if __name__ == "__main__":
    claimed_sizes()
    byte_file_names()
    print("hostile ingest properties held")
