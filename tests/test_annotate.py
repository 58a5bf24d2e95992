"""``tracescale annotate``: the attribution as trace-viewer tracks, exact to the nanosecond.

A hand-written two-rank trace pins every added slice (a wait takes the late rank's category);
the shipped simulated study checks the step sums, the report's numbers, re-analysis (identical
document) and HTA loading; the output rules are those of ``-o``.
"""

from __future__ import annotations

import gzip
import hashlib
import itertools
import json
import re
from collections import defaultdict
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import tracescale
from tests.minitrace import MiniTrace
from tracescale.annotate import annotate
from tracescale.annotate.write import event_count, splice, unused_pid, us_text
from tracescale.categories import ANNOTATION_CAT, CATEGORIES
from tracescale.cli.annotate import plural
from tracescale.cli.main import cli, main
from tracescale.errors import InvalidTraceError

ROOT = Path(__file__).resolve().parent.parent
SIM = ROOT / "sample_traces" / "sim_gpu_strong"


def _events(path: Path) -> list[dict[str, Any]]:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    doc = json.loads(data, parse_float=Decimal)  # exact: epoch-µs ts need 16+ digits
    events: list[dict[str, Any]] = doc["traceEvents"] if isinstance(doc, dict) else doc
    return events


def _added(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """(metadata, category slices, step slices) added to one annotated file."""
    ours = [e for e in _events(path) if e.get("cat") == ANNOTATION_CAT]
    meta = [e for e in ours if e["ph"] == "M"]
    xs = [e for e in ours if e["ph"] == "X"]
    tids = {e["args"]["name"]: e["tid"] for e in meta if e["name"] == "thread_name"}
    cats = [e for e in xs if e["tid"] == tids["categories"]]
    steps = [e for e in xs if e["tid"] == tids["steps"]]
    return meta, cats, steps


def test_us_text_is_exact_and_splice_keeps_the_original_bytes() -> None:
    assert us_text(1_700_000_000_001_000_003) == "1700000000001000.003"
    assert us_text(999) == "0.999" and us_text(-1500) == "-1.500"
    original = b'{"schemaVersion": 1, "traceEvents" : [ {"ph":"X","ts":1.5}], "x": 1}'
    out = splice(original, ['{"a":1}', '{"b":2}'], "f")
    assert out == original.replace(b"[ {", b'[{"a":1},{"b":2}, {')
    assert json.loads(splice(b'{"traceEvents": []}', ['{"a":1}'], "f")) == {
        "traceEvents": [{"a": 1}]
    }
    assert json.loads(splice(b"[]", ['{"a":1}'], "f")) == [{"a": 1}]
    assert unused_pid(b'{"traceEvents": [{"pid": 7}, {"pid": "Spans"}, {"pid" :12}]}') == 13
    assert unused_pid(b'{"traceEvents": []}') == 1
    assert event_count(b'{"traceEvents": [{"a": NaN}, {}], "x": 1}', "f") == 2
    assert event_count(b"[{}, {}, {}]", "f") == 3
    with pytest.raises(InvalidTraceError):
        event_count(b'{"schemaVersion": 1}', "f")


def _two_ranks(folder: Path) -> None:
    """Rank 1 loads data 0-2000 µs then computes 2000-3000; rank 0 waits for it in AllReduce."""
    for rank in (0, 1):
        t = MiniTrace(rank=rank, world_size=2)
        t.step(1, 0, 5000)
        if rank == 1:
            t.dataloader(0, 2000)
        t.kernel("fwd", 2000 if rank else 0, 1000)
        start = 3000 if rank else 1000
        t.nccl(start, 4000 - start, launch=start)
        t.write(folder / f"rank{rank}.json")


def test_a_wait_takes_the_late_ranks_category_instant_by_instant(tmp_path: Path) -> None:
    _two_ranks(tmp_path / "run")
    written, warnings = annotate(tmp_path / "run", tmp_path / "out", jobs=1, no_cache=True)
    assert [w.rank for w in written] == [0, 1] and not warnings
    _, cats, steps = _added(tmp_path / "out" / "rank0.json")
    got = [(e["name"], e["ts"], e["dur"], e["args"].get("cause")) for e in cats]
    assert got == [
        ("compute", 0.0, 1000.0, None),
        ("dataloader", 1000.0, 1000.0, "dataloader"),  # rank 1 was loading data
        ("compute", 2000.0, 1000.0, "compute"),  # then computing
        ("communication", 3000.0, 1000.0, None),  # the transfer itself
        ("idle", 4000.0, 1000.0, None),
    ]
    wait = cats[1]["args"]
    assert wait["collective"] == "allreduce" and wait["wait_for_rank"] == 1
    assert wait["step"] == 1 and "allreduce" in wait["why"]
    assert len(steps) == 1 and (steps[0]["ts"], steps[0]["dur"]) == (0.0, 5000.0)
    assert {c: float(v) for c, v in steps[0]["args"]["breakdown_s"].items()} == pytest.approx(
        {"compute": 2e-3, "dataloader": 1e-3, "communication": 1e-3, "idle": 1e-3}
        | {c: 0.0 for c in ("memcpy", "sync", "reduction", "host")},
        abs=1e-12,
    )
    _, cats1, _ = _added(tmp_path / "out" / "rank1.json")
    assert [(e["name"], e["dur"]) for e in cats1] == [
        ("dataloader", 2000.0),
        ("compute", 1000.0),
        ("communication", 1000.0),
        ("idle", 1000.0),
    ]


def test_instants_the_late_rank_did_not_trace_are_split_like_the_breakdown(
    tmp_path: Path,
) -> None:
    """Rank 1's step starts 2 ms after rank 0's: rank 0 waits 1000-3000 µs, but rank 1 traced
    only 2000-3000 of it (compute). The breakdown spreads the whole wait over what rank 1 did
    in the traced part; the slices do the same, and say so."""
    for rank in (0, 1):
        t = MiniTrace(rank=rank, world_size=2)
        t.step(1, 2000 if rank else 0, 5000)
        t.kernel("fwd", 2000 if rank else 0, 1000)
        start = 3000 if rank else 1000
        t.nccl(start, 4000 - start, launch=start)
        t.write(tmp_path / "run" / f"rank{rank}.json")
    annotate(tmp_path / "run", tmp_path / "out", jobs=1, no_cache=True)
    _, cats, _ = _added(tmp_path / "out" / "rank0.json")
    got = [(e["name"], e["ts"], e["dur"], "no trace" in e["args"].get("why", "")) for e in cats]
    assert got == [
        ("compute", 0.0, 1000.0, False),
        ("compute", 1000.0, 1000.0, True),  # rank 1 not traced yet: split in proportion
        ("compute", 2000.0, 1000.0, False),  # rank 1 computing
        ("communication", 3000.0, 1000.0, False),
        ("idle", 4000.0, 1000.0, False),
    ]
    study = tracescale.analyze(tmp_path / "run", jobs=1, no_cache=True)
    run = study.runs[0]
    row = dict(zip(run["step_rows"]["columns"], run["step_rows"]["data"][0], strict=True))
    assert row["rank"] == 0 and row["compute"] == pytest.approx(3e-3, abs=1e-12)


@pytest.fixture(scope="module")
def annotated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("annotate") / "out"
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in SIM.rglob("*") if p.is_file()}
    res = CliRunner().invoke(cli, ["annotate", str(SIM), "-o", str(out), "-j1", "--no-cache"])
    assert res.exit_code == 0, (res.output, res.exception)
    assert "15 annotated traces in" in res.output
    (out.parent / "cli-output.txt").write_text(res.output)
    after = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in SIM.rglob("*") if p.is_file()}
    assert after == before, "inputs are never modified"
    return out


@pytest.fixture(scope="module")
def sim_study() -> tracescale.Study:
    """The shipped study analyzed once for the module (read, never edited, by its tests)."""
    return tracescale.analyze(SIM, jobs=1, no_cache=True)


def _files(out: Path) -> list[Path]:
    files = sorted(out.rglob("*.pt.trace.json.gz"))
    assert len(files) == 15
    return files


def _ns(us: Decimal) -> int:
    """Microseconds as written (exact decimal) -> integer nanoseconds."""
    return int(us * 1000)


def _check_against_report(study: tracescale.Study, files: list[tuple[Path, int]]) -> int:
    """Every step's category slices add up to the step, and per category to the report's own
    per-step numbers, within 1 µs; returns how many slices are waits given a cause."""
    rows = {
        (r["world_size"], row[0], row[1]): dict(zip(r["step_rows"]["columns"], row, strict=True))
        for st in study.studies
        for r in st["runs"]
        for row in r["step_rows"]["data"]
    }
    waits = 0
    for f, world_size in files:
        meta, cats, steps = _added(f)
        names = {e["name"]: e["args"] for e in meta}
        title = names["process_name"]["name"]
        assert title.startswith("tracescale attribution (rank")
        rank = int(title.rsplit(" ", 1)[1].rstrip(")"))
        by_step: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for e in cats:
            assert e["name"] in CATEGORIES and e["dur"] > 0
            by_step[e["args"]["step"]][e["name"]] += _ns(e["dur"])
            waits += "cause" in e["args"]
        assert steps
        for track in (cats, steps):  # one thread each: slices in sequence, never overlapping
            ends = [(_ns(e["ts"]), _ns(e["ts"] + e["dur"])) for e in track]
            assert all(b[0] >= a[1] for a, b in itertools.pairwise(sorted(ends)))
            assert all(isinstance(e["pid"], int) and isinstance(e["tid"], int) for e in track)
        for s in steps:
            n = s["args"]["step"]
            inside = [e for e in cats if e["args"]["step"] == n]
            lo, hi = _ns(s["ts"]), _ns(s["ts"] + s["dur"])
            assert all(lo <= _ns(e["ts"]) and _ns(e["ts"] + e["dur"]) <= hi for e in inside)
            assert abs(sum(by_step[n].values()) - (hi - lo)) <= 1000  # within 1 µs
            row = rows[(world_size, rank, n)]
            for c in CATEGORIES:  # the report's own per-step numbers, in µs
                assert by_step[n][c] == pytest.approx(row[c] * 1e9, abs=1000), (f, n, c)
                assert float(s["args"]["breakdown_s"][c]) == pytest.approx(row[c], abs=1e-9)
    return waits


def _norm(study: tracescale.Study) -> str:
    doc = json.loads(study.to_json())
    for st in doc["studies"]:
        st["path"] = ""
        st["warnings"] = [re.sub(r"\S*/", "", w) for w in st["warnings"]]
        for r in st["runs"]:
            r["paths"] = [Path(p).name for p in r["paths"]]
            r["warnings"] = [re.sub(r"\S*/", "", w) for w in r.get("warnings", [])]
    return json.dumps(doc, sort_keys=True)


def test_files_left_out_at_discovery_are_warned_about(tmp_path: Path) -> None:
    _two_ranks(tmp_path / "run")
    (tmp_path / "run" / "rank9.pt.trace.json").write_text("")
    written, warnings = annotate(tmp_path / "run", tmp_path / "out", jobs=1, no_cache=True)
    assert [w.rank for w in written] == [0, 1]
    assert [w for w in warnings if "rank9.pt.trace.json" in w and "empty" in w], warnings


def test_strict_fails_on_a_rejected_file_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _two_ranks(tmp_path / "run")
    for bad, content in (("rank9.pt.trace.json", ""), ("rank8.pt.trace.json", "null")):
        (tmp_path / "run" / bad).write_text(content)
        argv = [str(tmp_path / "run"), "-o", str(tmp_path / "out"), "-j1", "--no-cache"]
        code, err = _exit([*argv, "--strict"], capsys)
        assert code == 3 and bad in err and err.count("\n") == 1, err
        assert not (tmp_path / "out").exists()
        (tmp_path / "run" / bad).unlink()


def test_counts_take_their_number() -> None:
    assert [plural(1, "step"), plural(2, "step"), plural(0, "category slice")] == [
        "1 step",
        "2 steps",
        "0 category slices",
    ]


def test_category_slices_sum_to_each_step(annotated: Path, sim_study: tracescale.Study) -> None:
    waits = _check_against_report(
        sim_study, [(f, int(f.parent.name[2:])) for f in _files(annotated)]
    )
    assert waits > 0, "the study has waits for late ranks (rank 0's reduction)"


@pytest.mark.parametrize("rel", ["external/param_dlrm_8rank", "tb_plugin/resnet50_num_workers_0"])
def test_real_traces(shared_traces: Path, tmp_path: Path, rel: str) -> None:
    """8 NCCL ranks of one DLRM step (waits for ranks whose step starts later) and 2021's
    pooled profiling windows: exact sums, the report's numbers, identical re-analysis."""
    src = shared_traces / rel
    if not src.is_dir():
        pytest.skip(f"{src} not present")
    written, _ = annotate(src, tmp_path / "out", jobs=2, no_cache=True)
    study = tracescale.analyze(src, jobs=2, no_cache=True)
    waits = _check_against_report(study, [(Path(w.output), w.world_size) for w in written])
    assert waits > 0 or rel.startswith("tb_plugin")
    assert _norm(tracescale.analyze(tmp_path / "out", jobs=2, no_cache=True)) == _norm(study)


def test_timestamps_keep_nanoseconds(annotated: Path) -> None:
    text = gzip.decompress(_files(annotated)[-1].read_bytes()).decode()
    ours = re.findall(
        r'"cat":"tracescale","name":"[^"]+","pid":\d+,"tid":\d,"ts":([^,]+),"dur":([^,]+)', text
    )
    assert ours and all(
        re.fullmatch(r"\d+\.\d{3}", ts) and re.fullmatch(r"\d+\.\d{3}", d) for ts, d in ours
    )


def test_reanalysis_gives_the_identical_document(
    annotated: Path, sim_study: tracescale.Study
) -> None:
    original = sim_study
    again = tracescale.analyze(annotated, jobs=1, no_cache=True)
    assert _norm(again) == _norm(original)


def test_annotated_traces_load_in_hta(annotated: Path) -> None:
    from conftest import require_module

    require_module("hta", "HTA loading needs the hta extra (pip install 'tracescale[hta]')")
    from hta.trace_analysis import TraceAnalysis

    frames = []
    for folder in (SIM / "ws2", annotated / "ws2"):
        analysis = TraceAnalysis(trace_dir=str(folder), include_last_profiler_step=True)
        assert sorted(analysis.t.traces) == [0, 1]
        frames.append(analysis.get_temporal_breakdown(visualize=False))
    assert frames[0].equals(frames[1]), "the added tracks change nothing HTA computes"


def _exit(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """Exit code and stderr of the console entry point (one-line errors, documented codes)."""
    with pytest.raises(SystemExit) as info:
        main(["annotate", *args])
    code = info.value.code
    return code if isinstance(code, int) else 0, capsys.readouterr().err


def test_output_rules(annotated: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _exit([str(SIM), "-o", str(annotated), "-j1"], capsys)
    assert code == 2 and "refusing to write over an existing trace" in err
    assert err.count("\n") == 1, "one line"
    forced = CliRunner().invoke(cli, ["annotate", str(SIM), "-o", str(annotated), "-j1", "--force"])
    assert forced.exit_code == 0, forced.output
    code, err = _exit([str(SIM), "-o", str(SIM / "annotated")], capsys)
    assert code == 2 and "inside the traces' folder" in err
    assert not (SIM / "annotated").exists()
    (tmp_path / "file").write_text("x")
    assert _exit([str(SIM / "ws1"), "-o", str(tmp_path / "file")], capsys)[0] == 2
    assert _exit([str(tmp_path / "nope"), "-o", str(tmp_path / "o")], capsys)[0] == 4


def test_docs_show_real_annotate_output(annotated: Path) -> None:
    text = (ROOT / "docs" / "api.md").read_text()
    block = re.search(
        r"\$ tracescale annotate sample_traces/sim_gpu_strong -o annotated/\n(.*?)```", text, re.S
    )
    assert block, "docs/api.md's In Perfetto section"
    actual = (
        (annotated.parent / "cli-output.txt").read_text().replace(f"{annotated}/", "annotated/")
    )
    actual = actual.replace(str(annotated), "annotated/")
    shown = [ln for ln in block.group(1).splitlines() if ln.strip() and ln != "..."]
    assert shown and all(ln in actual.splitlines() for ln in shown), (shown, actual)
