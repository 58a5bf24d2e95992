"""Hostile input at the ingest and discovery side, each case reproduced and pinned.

Sizes a file claims (world size, rank, ``Group size``) are bounded and refused in one line
naming the file and the field; file names that are not UTF-8 are handled as the OS gives them;
a multi-member gzip is read fully; a file met twice counts once; tracescale.toml never
overrides what the traces say; a folder that holds traces but is not read is named. The cases
that could exhaust memory run in a child under an address-space cap, so a regression fails the
test instead of the machine; the hypothesis properties in ``hostile_ingest_cases.py`` run
there too.
"""

from __future__ import annotations

import gzip
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hostile_ingest_cases import _cli, _events

from tracescale.errors import InvalidTraceError, UsageError
from tracescale.ingest.claims import MAX_GROUP_MEMBERS, MAX_WORLD_SIZE, missing_ranks
from tracescale.ingest.decode import load_trace
from tracescale.ingest.discover import discover
from tracescale.ingest.groups import group_table
from tracescale.scaling.blocks import MAX_RESAMPLED

HERE = Path(__file__).resolve().parent
#: The address-space cap of the child processes: a blow-up is a MemoryError there.
CAP_BYTES = 3 * 1024**3
GROUP = {"Group size": 2, "Process Group Name": "0", "Process Group Ranks": "[0, 1]"}


def _trace(rank: int | None, world: int | None, group: dict | None = None) -> dict:
    dist: dict = {"backend": "nccl"}
    if rank is not None:
        dist["rank"] = rank
    if world is not None:
        dist["world_size"] = world
    return {"distributedInfo": dist, "traceEvents": _events(rank or 0, group or GROUP, 7, 1)}


def _write_run(folder: Path, world: int | None, ranks=(0, 1), group: dict | None = None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for r in ranks:
        (folder / f"host_{r}.pt.trace.json").write_text(json.dumps(_trace(r, world, group)))


def _capped(code: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """Run Python ``code`` in a child limited to CAP_BYTES of address space."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (CAP_BYTES, CAP_BYTES))

    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-c", code],
        preexec_fn=cap,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=str(HERE.parent),
    )


@pytest.fixture(scope="module")
def claimed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, str, float]]:
    """Each hostile study's (exit code, stderr, seconds) from one capped child."""
    root = tmp_path_factory.mktemp("claimed")
    _write_run(root / "world" / "ws2", 10**9)
    (root / "rank" / "ws2").mkdir(parents=True)
    (root / "rank" / "ws2" / "host_0.pt.trace.json").write_text(json.dumps(_trace(10**12, None)))
    big = {**GROUP, "Group size": 10**12, "Global rank start": 0, "Global rank stride": 1}
    big["Process Group Ranks"] = "[0, 1, ...]"
    _write_run(root / "group" / "ws2", 2, ranks=(0,), group=big)
    _write_run(root / "toml" / "ws2", 2)
    (root / "toml" / "tracescale.toml").write_text(
        '[[run]]\nworld_size = 1000000000000\npath = "ws2"\n'
    )
    _write_run(root / "name" / "n1000000000000", None)
    (root / "digits" / "ws1").mkdir(parents=True)  # past int()'s 4,300-digit limit
    text = json.dumps(_trace(0, 1)).replace('"world_size": 1', '"world_size": ' + "9" * 5000)
    (root / "digits" / "ws1" / "host_0.pt.trace.json").write_text(text)
    names = ("world", "rank", "group", "toml", "name", "digits")
    cases = {name: str(root / name) for name in names}
    code = (
        "import json, sys, time\n"
        "from hostile_ingest_cases import _cli\n"
        f"cases = {cases!r}\n"
        "out = {}\n"
        "for name, path in cases.items():\n"
        "    t = time.perf_counter()\n"
        "    code, err = _cli(['analyze', path, '-j1', '--no-cache', '-q', '--format', 'json'])\n"
        "    out[name] = (code, err, time.perf_counter() - t)\n"
        "print(json.dumps(out))\n"
    )
    done = _capped(code)
    assert done.returncode == 0, done.stderr[-3000:]
    return {k: tuple(v) for k, v in json.loads(done.stdout.splitlines()[-1]).items()}


@pytest.mark.parametrize(
    ("case", "field"),
    [
        ("world", "distributedInfo.world_size 1000000000 is beyond the ceiling"),
        ("rank", "distributedInfo.rank 1000000000000 is beyond the ceiling"),
        ("digits", "distributedInfo.world_size of 20 digits or more is beyond the ceiling"),
    ],
)
def test_claimed_world_size_and_rank_are_one_line_exit_3(claimed, case, field):
    """Discovery built set(range(world_size)): 10^9 grew to 24 GB. Now refused at once."""
    code, err, seconds = claimed[case]
    assert code == 3 and field in err and err.count("\n") == 1
    assert "host_0.pt.trace.json" in err and seconds < 30


def test_claimed_group_size_never_builds_the_member_list(claimed):
    """A ``Group size`` of 10^12 with a rank progression was a 10^12-tuple (34 s, 2.8 GB
    before the cap ended it); now the file is refused naming the field."""
    code, err, seconds = claimed["group"]
    assert code == 3 and "'Group size' 1000000000000 is beyond the ceiling" in err
    assert err.count("\n") == 1 and seconds < 30


def test_manifest_world_size_beyond_the_ceiling_is_refused(claimed):
    code, err, _ = claimed["toml"]
    assert code == 2 and "tracescale.toml" in err and "1000000000000" in err
    assert err.count("\n") == 1


def test_folder_name_beyond_the_ceiling_states_no_world_size(claimed):
    code, err, seconds = claimed["name"]
    assert code == 0 and seconds < 60, err


def test_hypothesis_properties_hold_under_the_memory_cap():
    """Claimed sizes and byte file names from hypothesis, in a child capped at 3 GB."""
    done = _capped(
        "import runpy; runpy.run_path('tests/hostile_ingest_cases.py', run_name='__main__')"
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert "properties held" in done.stdout


def test_the_cap_is_real():
    """The child's cap turns a 4 GB allocation into a MemoryError (else the tests above would
    prove nothing about memory)."""
    done = _capped("bytearray(4 * 1024**3)")
    assert done.returncode != 0 and "MemoryError" in done.stderr


def test_missing_ranks_work_with_the_ranks_present_not_the_claim():
    t = time.perf_counter()
    count, first = missing_ranks([0, 1, 5], 10**18)
    assert count == 10**18 - 3 and first == [2, 3, 4, 6, 7, 8, 9, 10, 11, 12]
    assert time.perf_counter() - t < 5  # a walk of the claim would never end


def test_world_size_at_the_ceiling_is_a_partial_run_with_a_warning(tmp_path):
    _write_run(tmp_path / "s" / "ws2", MAX_WORLD_SIZE)
    [study] = discover(str(tmp_path / "s"))
    [run] = study.runs
    assert run.world_size == MAX_WORLD_SIZE
    assert any(
        f"2 of {MAX_WORLD_SIZE} ranks present; missing ranks 2, 3" in w for w in run.warnings
    )


def test_files_of_different_world_sizes_make_a_short_error(tmp_path):
    """The error named every file: thousands of rank files made one line of megabytes."""
    _write_run(tmp_path / "r", 64, ranks=range(40))
    (tmp_path / "r" / "odd.json").write_text(json.dumps(_trace(0, 8)))
    with pytest.raises(InvalidTraceError) as info:
        discover(str(tmp_path / "r"))
    text = str(info.value)
    assert "and 39 more (world size 64)" in text and "odd.json (world size 8)" in text
    assert len(text) < 300


def test_group_members_from_progressions_stay_within_the_budget(tmp_path):
    """Many distinct groups each claiming the whole world: members are built for the first
    ones only, up to MAX_GROUP_MEMBERS in all; the rest keep unknown members."""
    events = []
    for k in range(6):
        events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "record_param_comms",
                "pid": 1,
                "tid": 1,
                "ts": 10 + k,
                "dur": 1,
                "args": {
                    "Collective name": "allreduce",
                    "Group size": MAX_WORLD_SIZE,
                    "Global rank start": 0,
                    "Global rank stride": 1,
                    "Process Group Name": f"g{k}",
                    "Process Group Ranks": "[0, 1, ...]",
                },
            }
        )
    doc = {"distributedInfo": {"rank": 0, "world_size": MAX_WORLD_SIZE}, "traceEvents": events}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    table = group_table(load_trace(str(path)))
    built = [g for g in table.groups if g.ranks is not None]
    assert sum(len(g.ranks or ()) for g in table.groups) <= MAX_GROUP_MEMBERS
    assert len(built) == MAX_GROUP_MEMBERS // MAX_WORLD_SIZE and len(table.groups) == 6


def test_many_one_ns_steps_analyze_under_the_cap_with_a_bounded_bootstrap(tmp_path):
    """One rank of thousands of 1 ns ProfilerSteps (a million took ~64 s CPU and 2.4 GB):
    every step name was a regex walk over the rules and every string test walked them all.
    Under the 3 GB cap the report counts every step, and the bootstrap says it resampled
    them in its bounded number of blocks."""
    n = MAX_RESAMPLED + 904
    events = ",".join(
        f'{{"ph":"X","cat":"user_annotation","name":"ProfilerStep#{k}","pid":1,"tid":1,'
        f'"ts":{1000 + k}.000,"dur":0.001}}'
        for k in range(n)
    )
    (tmp_path / "in" / "ws1").mkdir(parents=True)
    doc = '{"distributedInfo":{"rank":0,"world_size":1},"traceEvents":[' + events + "]}"
    with gzip.open(tmp_path / "in" / "ws1" / "rank0.pt.trace.json.gz", "wt") as fh:
        fh.write(doc)
    out = tmp_path / "report.json"
    argv = [
        "analyze",
        str(tmp_path / "in"),
        "-j1",
        "--no-cache",
        "-q",
        "-f",
        "json",
        "-o",
        str(out),
    ]
    # compare (two thousand bootstrap replicates over every step asked for gigabytes) and
    # annotate (a row lookup and two held slices per step) of the same steps, capped too
    compare = ["compare", str(out), str(out), "-q"]
    annotate = ["annotate", str(tmp_path / "in"), "-o", str(tmp_path / "ann"), "-j1", "--no-cache"]
    calls = "".join(f"print(_cli({a!r}))\n" for a in (argv, compare, annotate))
    done = _capped(f"from hostile_ingest_cases import _cli\n{calls}")
    assert done.returncode == 0, done.stderr[-3000:]
    codes = done.stdout.splitlines()[-3:]
    assert all(line.startswith("(0, ") for line in codes), done.stdout[-3000:]
    with gzip.open(tmp_path / "ann" / "ws1" / "rank0.pt.trace.json.gz") as fh:
        added = [e for e in json.load(fh)["traceEvents"] if e.get("cat") == "tracescale"]
    assert sum(e.get("tid") == 2 and e.get("ph") == "X" for e in added) == n  # a slice a step
    study = json.loads(out.read_text())["studies"][0]
    assert study["runs"][0]["steps"] == n
    assert study["scaling"]["bootstrap"]["step_blocks"] == MAX_RESAMPLED
    assert f"{n:,} steps" in study["scaling"]["bootstrap"]["note"]


# -- file names that are not UTF-8 -------------------------------------------------------------


@pytest.fixture(scope="module")
def odd_named(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A 1+2-rank study whose files are named ``r\\xff.json``, ``\\x80\\n.json`` (bytes that
    are no UTF-8, and a newline), and a plain copy of it."""
    root = tmp_path_factory.mktemp("names")
    plain = root / "plain"
    _write_run(plain / "ws2", 2)
    (plain / "ws1").mkdir()
    (plain / "ws1" / "r.json").write_text(json.dumps(_trace(0, 1, {**GROUP, "Group size": 1})))
    odd = os.path.join(os.fsencode(root), b"odd")
    for sub, src, name in (
        (b"ws1", plain / "ws1" / "r.json", b"r\xff.json"),
        (b"ws2", plain / "ws2" / "host_0.pt.trace.json", b"\x80\n0.json"),
        (b"ws2", plain / "ws2" / "host_1.pt.trace.json", b"rank1\xfe.json"),
    ):
        os.makedirs(os.path.join(odd, sub), exist_ok=True)
        with open(os.path.join(odd, sub, name), "wb") as fh:
            fh.write(src.read_bytes())
    return os.fsdecode(odd), str(plain)


def test_non_utf8_names_analyze_compare_annotate(odd_named, tmp_path):
    """The cache key encoded the path as text: exit 70 UnicodeEncodeError. Stdout here is
    strict UTF-8, as a terminal's is."""
    odd, plain = odd_named
    cache = ["--cache-dir", str(tmp_path / "cache")]
    for argv in (
        ["analyze", odd, "-j1", *cache],
        ["analyze", odd, "-j1", *cache],  # the cached repeat
        ["analyze", odd, "-j1", "--no-cache", "--format", "markdown"],
        ["compare", odd, plain, "-j1", *cache],
        ["annotate", odd, "-o", str(tmp_path / "ann"), "-j1", *cache],
        ["inspect", odd, "--format", "json"],
        ["inspect", odd],
    ):
        code, err = _cli(argv)
        assert code == 0, (argv, err)
    copies = sorted(os.listdir(os.path.join(os.fsencode(tmp_path), b"ann", b"ws2")))
    assert set(copies) == {b"\x80\n0.json", b"rank1\xfe.json"}


def test_an_unreadable_non_utf8_name_is_one_line(tmp_path):
    study = os.path.join(os.fsencode(tmp_path), b"s", b"ws1")
    os.makedirs(study)
    with open(os.path.join(study, b"bad\n\xff.json"), "wb"):
        pass  # empty: not a trace
    code, err = _cli(["analyze", os.fsdecode(os.path.dirname(study)), "-j1", "--no-cache"])
    assert code == 3 and err.count("\n") == 1 and err.startswith("tracescale: error: ")


# -- gzip members, hard links, paths named twice ------------------------------------------------


def _json_bytes(doc: dict) -> bytes:
    return json.dumps(doc).encode()


def test_gzip_members_are_read_fully(tmp_path):
    """One JSON document split over two gzip members (``cat a.gz b.gz``) is the whole trace;
    before, only the first member was read."""
    data = _json_bytes(_trace(0, 1))
    cut = len(data) // 2
    split = tmp_path / "split.json.gz"
    split.write_bytes(gzip.compress(data[:cut]) + gzip.compress(data[cut:]) + b"\0" * 8)
    whole = tmp_path / "whole.json.gz"
    whole.write_bytes(gzip.compress(data))
    a, b = load_trace(str(split)), load_trace(str(whole))
    assert len(a.events) == len(b.events) == 8
    assert a.events.start.tolist() == b.events.start.tolist()


def test_a_head_in_many_small_gzip_members_is_sniffed_whole(tmp_path):
    """bgzip-style members smaller than the head: discovery reads on through them, as the full
    read does (it took the first member alone for the head and rejected the file)."""
    data = _json_bytes(_trace(0, 2))
    run = tmp_path / "ws2"
    run.mkdir()
    blocks = [data[i : i + 7] for i in range(0, len(data), 7)]
    (run / "r0.json.gz").write_bytes(b"".join(gzip.compress(b) for b in blocks))
    [study] = discover(str(run))
    [rank_file] = study.runs[0].groups[0].files
    assert study.runs[0].world_size == 2 and rank_file.rank_from == "distributedInfo"
    assert len(load_trace(rank_file.path).events) == 8


def test_two_traces_in_one_gzip_file_are_refused(tmp_path):
    """Two members each a whole trace: read fully, the file is no JSON document (exit 3 one
    line), never the first trace alone with exit 0."""
    member = gzip.compress(_json_bytes(_trace(0, 1)))
    run = tmp_path / "ws1"
    run.mkdir()
    (run / "r0.json.gz").write_bytes(member + member)
    with pytest.raises(InvalidTraceError, match="data after the end of the JSON document"):
        load_trace(str(run / "r0.json.gz"))
    code, err = _cli(["analyze", str(run / "r0.json.gz"), "-j1", "--no-cache"])
    assert code == 3 and "r0.json.gz" in err and err.count("\n") == 1
    (run / "r0.json.gz").write_bytes(member + b"garbage")
    with pytest.raises(InvalidTraceError, match="not another gzip member"):
        load_trace(str(run / "r0.json.gz"))


def test_hard_link_and_symlink_in_two_run_folders_count_once(tmp_path):
    _write_run(tmp_path / "s" / "ws2", 2)
    (tmp_path / "s" / "ws2_again").mkdir()
    for r in (0, 1):
        src = tmp_path / "s" / "ws2" / f"host_{r}.pt.trace.json"
        dst = tmp_path / "s" / "ws2_again" / src.name
        os.link(src, dst) if r == 0 else os.symlink(src, dst)
    [study] = discover(str(tmp_path / "s"))
    [run] = study.runs
    assert len(run.paths) == 2 and len(run.groups) == 1
    notes = [w for w in study.warnings if "counted once" in w]
    assert len(notes) == 2 and all("ws2_again" in w and "the same file as" in w for w in notes)


def test_a_path_named_twice_in_the_manifest_counts_once(tmp_path):
    _write_run(tmp_path / "s" / "a", 2)
    (tmp_path / "s" / "tracescale.toml").write_text(
        '[[run]]\nworld_size = 2\npath = "a"\n[[run]]\nworld_size = 2\npath = "a"\n'
    )
    [study] = discover(str(tmp_path / "s"))
    [run] = study.runs
    assert len(run.paths) == 2 and len(run.groups) == 1
    assert sum("named twice; counted once" in w for w in study.warnings) == 2


# -- the manifest against the traces -------------------------------------------------------------


def test_manifest_world_size_loses_to_the_traces_and_the_report_agrees(tmp_path):
    """tracescale.toml said 8 over 2-rank traces: the warning said "using 2", the report 8."""
    _write_run(tmp_path / "s" / "b", 2)
    _write_run(tmp_path / "s" / "a", 1, ranks=(0,), group={**GROUP, "Group size": 1})
    (tmp_path / "s" / "tracescale.toml").write_text(
        '[[run]]\nworld_size = 1\npath = "a"\n[[run]]\nworld_size = 8\npath = "b"\n'
    )
    [study] = discover(str(tmp_path / "s"))
    assert [r.world_size for r in study.runs] == [1, 2]
    assert any(
        "says world size 8 but distributedInfo says 2; using 2" in w for w in study.runs[1].warnings
    )
    out = tmp_path / "out.json"
    code, err = _cli(["analyze", str(tmp_path / "s"), "-j1", "--no-cache", "-q", "-o", str(out)])
    assert code == 0, err
    runs = json.loads(out.read_text())["studies"][0]["runs"]
    assert [r["world_size"] for r in runs] == [1, 2]


@pytest.mark.parametrize("value", ["1000000000000", "inf", "nan", "-3", "2.5e300"])
def test_manifest_world_size_out_of_range_is_a_usage_error(tmp_path, value):
    _write_run(tmp_path / "s" / "b", 2)
    (tmp_path / "s" / "tracescale.toml").write_text(f'[[run]]\nworld_size = {value}\npath = "b"\n')
    with pytest.raises(UsageError) as info:
        discover(str(tmp_path / "s"))
    assert "tracescale.toml" in str(info.value)


# -- folders that hold traces but are not read --------------------------------------------------


def test_a_study_inside_a_folder_named_like_a_world_size_is_named(tmp_path):
    """``n8/`` (a study: traces in its sub-folders) beside ``ws1/`` was ignored silently."""
    _write_run(tmp_path / "s" / "ws1", 1, ranks=(0,), group={**GROUP, "Group size": 1})
    _write_run(tmp_path / "s" / "n8" / "ws2", 2)
    (tmp_path / "s" / "empty_ws4").mkdir()
    [study] = discover(str(tmp_path / "s"))
    assert [r.world_size for r in study.runs] == [1]
    notes = [w for w in study.warnings if "not read" in w]
    assert len(notes) == 1 and notes[0].startswith(str(tmp_path / "s" / "n8") + ": not read")


def test_sub_folders_of_a_run_folder_and_unnamed_manifest_folders_are_named(tmp_path):
    _write_run(tmp_path / "r", 2)
    _write_run(tmp_path / "r" / "old" / "deeper", 2)
    [study] = discover(str(tmp_path / "r"))
    assert any(w.startswith(str(tmp_path / "r" / "old") + ": not read") for w in study.warnings)
    _write_run(tmp_path / "m" / "a", 2)
    _write_run(tmp_path / "m" / "forgotten", 2)
    (tmp_path / "m" / "tracescale.toml").write_text('[[run]]\nworld_size = 2\npath = "a"\n')
    [study] = discover(str(tmp_path / "m"))
    notes = [w for w in study.warnings if "not read" in w]
    assert len(notes) == 1 and "forgotten" in notes[0] and "tracescale.toml" in notes[0]


# -- out-of-range times on the compiled scanner's path too ---------------------------------------


def test_out_of_range_times_are_named_so_on_the_scanner_path(tmp_path):
    fast = pytest.importorskip("tracescale.ingest.fast")
    fast.warm_up()
    if not fast.loaded():
        pytest.skip("the compiled scanner is unavailable here")
    good = {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}
    text = (
        '{"traceEvents": [' + json.dumps(good) + ","
        '{"ph":"X","name":"b","pid":1,"tid":1,"ts":1e400,"dur":1},'
        '{"ph":"X","name":"c","pid":1,"tid":1,"ts":"x","dur":1}]}'
    )
    path = tmp_path / "t.json"
    path.write_text(text)
    trace = load_trace(str(path))
    assert trace.meta.skipped == {
        "events with ts/dur out of range": 1,
        "events with non-numeric ts/dur": 1,
    }
