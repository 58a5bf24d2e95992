"""``Process Group Ranks``: parsed once per distinct text, kept per trace as a table of groups,
and used to tell apart disjoint groups that share a name (exact, on tiny hand-written traces)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.minitrace import MiniTrace
from tests.test_classify_rules import US
from tracescale.classify.rank import classify_rank
from tracescale.classify.result import RunBreakdown
from tracescale.classify.rules import load_rules
from tracescale.ingest import load_trace
from tracescale.ingest.groups import (
    ProcessGroup,
    group_key,
    group_table,
    key_members,
    key_name,
    key_role,
    members_text,
    parse_ranks,
)
from tracescale.ingest.lenient import load_lenient
from tracescale.pipeline import analyze

CUT = '"[' + ", ".join(map(str, range(30))) + ', ...]"'  # PyTorch's text of a 64-rank group


@pytest.mark.parametrize(
    ("text", "members", "listed"),
    [
        ('"[0, 1, 2, 3]"', (0, 1, 2, 3), ()),
        ('"[2, 3]"', (2, 3), ()),
        ("[3, 1]", (1, 3), ()),  # a JSON list instead of PyTorch's string; sorted
        ('"[7]"', (7,), ()),
        (CUT, None, tuple(range(30))),  # cut after 30: the members are unknown
        ('"[]"', None, ()),
        ("", None, ()),
        ('"[0, x]"', None, ()),
        ('"[1, 1]"', None, ()),
        ('"[-1, 0]"', None, ()),
        ('"[1.5]"', None, ()),
        ('"0, 1"', None, ()),
        ('"[0, 1"', None, ()),
        ('"[0, 1]', None, ()),  # an unterminated JSON string
        ("17", None, ()),
    ],
)
def test_parse_ranks(text: str, members: tuple[int, ...] | None, listed: tuple[int, ...]) -> None:
    assert parse_ranks(text) == (members, listed)


@pytest.mark.parametrize(
    ("ranks", "text"),
    [
        ((5,), "5"),
        ((0, 8), "0,8"),
        ((0, 1, 2, 3), "0-3"),
        (tuple(range(0, 16, 2)), "0-14/2"),
        ((0, 1, 4, 5), "0-1,4-5"),
        ((0, 1, 2, 7), "0-2,7"),
    ],
)
def test_members_text_round_trip(ranks: tuple[int, ...], text: str) -> None:
    assert members_text(ranks) == text
    key = group_key("1", ranks)
    assert key == f"1:{text}"
    assert key_members(key) == ranks
    assert key_name(key) == "1"


def test_keys_without_members() -> None:
    assert group_key("3", None, tuple(range(30))) == "3:0..."
    assert key_members("3:0...") is None
    assert group_key("3", None) == "3" and key_members("3") is None
    assert key_name("3") == "3"
    assert key_members("1:x-y") is None


def _nccl_args(name: str | None, size: int, ranks: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"Group size": size}
    if name is not None:
        out["Process Group Name"] = name
    if ranks is not None:
        out["Process Group Ranks"] = ranks
    return out


def test_table_of_groups_from_one_trace(tmp_path: Path) -> None:
    """Rank 2 of 64: its pair (plain text), the world (cut list), a group whose ranks are
    absent, one whose text is malformed and one that leaves out rank 2 (both unknown, no
    traceback), and the pair again as a JSON list (another text: its own row, same key)."""
    t = MiniTrace(rank=2, world_size=64)
    t.step(1, 0, 1000)
    cases = [
        ("1", 2, "[2, 3]"),  # json.dumps writes PyTorch's string
        ("0", 64, CUT.strip('"')),
        ("5", 4, None),
        ("6", 2, "[2, x"),
        ("7", 2, "[0, 1]"),
        ("1", 2, [3, 2]),  # a JSON list
    ]
    for k, (name, size, ranks) in enumerate(cases):
        args = _nccl_args(name, size, ranks)
        t.nccl(10 + 100 * k, 50, extra=args)
    path = t.write(tmp_path / "rank2.json")
    trace = load_trace(str(path))
    table = group_table(trace)
    by_name = {g.name: g for g in table.groups[::-1]}
    assert by_name["1"] == ProcessGroup("1", 2, (2, 3))
    assert by_name["0"] == ProcessGroup("0", 64, None, tuple(range(30)))
    assert by_name["5"] == ProcessGroup("5", 4, None)
    assert by_name["6"] == ProcessGroup("6", 2, None)
    assert by_name["7"] == ProcessGroup("7", 2, None)
    assert len(table.groups) == 6
    assert table.groups[table.of_event[np.flatnonzero(trace.events.coll_name >= 0)[-1]]] == (
        ProcessGroup("1", 2, (2, 3))
    )
    kernels = np.flatnonzero(trace.events.coll_name >= 0)
    assert len(kernels) == 6
    names = [table.groups[i].name for i in table.of_event[kernels]]
    assert names == ["1", "0", "5", "6", "7", "1"]
    assert (table.of_event >= 0).sum() == 6  # the launch calls and the step name no group
    assert [table.groups[i].key for i in table.of_event[kernels]] == [
        "1:2,3", "0:0...", "5", "6", "7", "1:2,3",
    ]  # fmt: skip
    # every reader (lenient per-event path included) gives the same texts
    lenient = load_lenient(path.read_bytes(), str(path), path.stat().st_size)
    assert group_table(lenient).groups == table.groups


def test_pg_config_fills_in_when_the_args_hold_no_ranks(tmp_path: Path) -> None:
    t = MiniTrace(rank=3, world_size=4)
    t.step(1, 0, 1000)
    t.nccl(10, 50, extra=_nccl_args("1", 2, None))
    t.nccl(100, 50, extra=_nccl_args(None, 4, None))
    doc = t.to_dict()
    doc["distributedInfo"]["pg_config"] = [
        {"pg_name": "0", "pg_size": 4, "ranks": [0, 1, 2, 3]},
        {"pg_name": "1", "pg_size": 2, "ranks": [2, 3]},
    ]
    path = tmp_path / "rank3.json"
    path.write_text(json.dumps(doc))
    table = group_table(load_trace(str(path)))
    assert [g.key for g in table.groups] == ["1:2,3"]  # a group named by neither arg: none
    coll = _instances(path)  # that one is pg_config's only group of its size
    assert coll["pg"].tolist() == ["1:2,3", "0:0-3"]


def _instances(path: Path) -> Any:
    return classify_rank(load_trace(str(path)), load_rules()).collectives


def _pairs_study(folder: Path, ranks_text: bool) -> RunBreakdown:
    """Four ranks, tensor-parallel pairs {0,1} and {2,3} both named "1", no pg_config.

    Pair {0,1}: rank 0 arrives at 100 us, rank 1 at 300, both end at 400 (transfer 100 us,
    rank 0 waits 200). Pair {2,3}: rank 2 at 150, rank 3 at 250, both end at 300 (transfer
    50, rank 2 waits 100)."""
    arrive = {0: 100, 1: 300, 2: 150, 3: 250}
    end = {0: 400, 1: 400, 2: 300, 3: 300}
    for r in range(4):
        t = MiniTrace(rank=r, world_size=4)
        t.step(1, 0, 1000)
        t.kernel("fwd", 0, 50)
        pair = f"[{r - r % 2}, {r - r % 2 + 1}]" if ranks_text else None
        t.nccl(arrive[r], end[r] - arrive[r], launch=60, seq=0, extra=_nccl_args("1", 2, pair))
        t.write(folder / f"rank{r}.json")
    study = analyze(str(folder), jobs=1, no_cache=True)
    (run,) = study.runs_by_study[0]
    return run


def test_disjoint_groups_of_one_name_are_matched_separately(tmp_path: Path) -> None:
    run = _pairs_study(tmp_path, ranks_text=True)
    c = run.collectives.sort_values("rank").reset_index(drop=True)
    assert c["pg"].tolist() == ["1:0,1", "1:0,1", "1:2,3", "1:2,3"]
    assert c["transfer"].tolist() == pytest.approx([100 * US, 100 * US, 50 * US, 50 * US])
    assert c["wait"].tolist() == pytest.approx([200 * US, 0.0, 100 * US, 0.0], abs=1e-12)
    wait = run.steps.groupby("rank")["communication_wait"].sum().to_dict()
    assert wait == pytest.approx({0: 200 * US, 1: 0.0, 2: 100 * US, 3: 0.0}, abs=1e-12)


def test_without_ranks_one_name_mixes_the_pairs(tmp_path: Path) -> None:
    """The same traces without ``Process Group Ranks``: one instance over all four ranks (what
    the name alone can say): the shortest duration of any rank is everyone's transfer."""
    run = _pairs_study(tmp_path, ranks_text=False)
    c = run.collectives.sort_values("rank").reset_index(drop=True)
    assert c["pg"].tolist() == ["1"] * 4
    assert c["transfer"].tolist() == pytest.approx([50 * US] * 4)
    assert c["wait"].tolist() == pytest.approx([250 * US, 50 * US, 100 * US, 0.0], abs=1e-12)


def test_progression_args_complete_a_cut_or_absent_list(tmp_path: Path) -> None:
    """``Global rank start`` / ``Global rank stride`` (PyTorch writes them beside the ranks):
    a 64-rank world whose list was cut, 32 strided ranks without a list, and the cases that
    must not guess (irregular stride -1, a progression the cut list contradicts)."""
    t = MiniTrace(rank=2, world_size=64)
    t.step(1, 0, 1000)
    cut = CUT.strip('"')
    cases: list[tuple[str, int, Any, int, int]] = [
        ("0", 64, cut, 0, 1),
        ("4", 32, None, 0, 2),
        ("5", 1, None, 2, 0),  # a group of one: stride 0
        ("6", 40, cut, 0, -1),  # not a progression: unknown
        ("7", 64, cut, 1, 1),  # contradicts the listed ranks: unknown
        ("9", 8, None, 2, 3),  # 2, 5, ..., 23
    ]
    for k, (name, size, ranks, start, stride) in enumerate(cases):
        args = _nccl_args(name, size, ranks)
        args.update({"Global rank start": start, "Global rank stride": stride})
        t.nccl(10 + 100 * k, 50, extra=args)
    path = t.write(tmp_path / "rank2.json")
    table = group_table(load_trace(str(path)))
    keys = {g.name: g.key for g in table.groups}
    assert keys == {
        "0": "0:0-63",
        "4": "4:0-62/2",
        "5": "5:2",
        "6": "6:0...",
        "7": "7:0...",
        "9": "9:2-23/3",
    }
    lenient = load_lenient(path.read_bytes(), str(path), path.stat().st_size)
    assert group_table(lenient).groups == table.groups


def test_description_names_the_role() -> None:
    assert group_key("3", (0, 2), (), "mesh_dp") == "3(mesh_dp):0,2"
    assert key_role("3(mesh_dp):0,2") == "mesh_dp"
    assert key_role("3:0,2") == "3"
    assert key_role("3(mesh_dp)") == "mesh_dp"
    assert key_members("3(mesh_dp):0,2") == (0, 2)


def test_description_read_and_undefined_dropped(tmp_path: Path) -> None:
    t = MiniTrace(rank=0, world_size=4)
    t.step(1, 0, 1000)
    t.nccl(10, 50, extra={**_nccl_args("1", 2, "[0, 1]"), "Process Group Description": "mesh_tp"})
    t.nccl(
        100, 50, extra={**_nccl_args("2", 2, "[0, 2]"), "Process Group Description": "undefined"}
    )
    path = t.write(tmp_path / "rank0.json")
    table = group_table(load_trace(str(path)))
    assert sorted(g.key for g in table.groups) == ["1(mesh_tp):0,1", "2:0,2"]
    lenient = load_lenient(path.read_bytes(), str(path), path.stat().st_size)
    assert group_table(lenient).groups == table.groups


@pytest.mark.parametrize(
    "value", [17, None, True, {"ranks": [0, 1]}, [[0, 1]], ["0", "1"], "[0, 1]\u00e9", 1e400]
)
def test_odd_ranks_values_read_as_unknown(tmp_path: Path, value: Any) -> None:
    """Any JSON value in ``Process Group Ranks``: no traceback, members unknown (the name and
    size still key the instance), the same on the scanner, typed and lenient readers."""
    t = MiniTrace(rank=0, world_size=2)
    t.step(1, 0, 1000)
    t.nccl(10, 50, extra={"Process Group Name": "0", "Group size": 2})
    assert t.events[-2]["cat"] == "kernel"
    t.events[-2]["args"]["Process Group Ranks"] = value
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(t.to_dict()).replace("Infinity", "1e400"))
    trace = load_trace(str(path))
    texts = {trace.strings[i] for i in trace.events.pg_ranks.tolist() if i >= 0}
    assert len(texts) == 1  # read as its raw JSON text
    table = group_table(trace)
    assert [g.key for g in table.groups] == ["0"]
    lenient = load_lenient(path.read_bytes(), str(path), path.stat().st_size)
    assert [g.key for g in group_table(lenient).groups] == ["0"]
