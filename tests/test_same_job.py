"""Same-job check: runs of a study that share too few operators warn (--strict: exit 3)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import tracescale
from tests.minitrace import MiniTrace
from tracescale.classify.rank import RankResult
from tracescale.classify.same_job import JobSignature, different_job, job_signature
from tracescale.cli.main import cli
from tracescale.errors import InvalidTraceError

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"


def _sig(label: str, ops: dict[str, float], sizes: tuple[int, ...] = ()) -> JobSignature:
    return JobSignature(label, ops, frozenset(sizes))


def test_shared_names_or_time_mean_the_same_job() -> None:
    a = _sig("a", {f"op{i}": 1.0 for i in range(10)})
    b = _sig("b", {f"op{i}": 1.0 for i in range(2, 12)})  # 8 of 12 names in common
    assert different_job(a, b) is None
    # Few names in common, but they carry nearly all the time: still the same job.
    c = _sig("c", {"op0": 100.0, **{f"x{i}": 0.1 for i in range(10)}})
    d = _sig("d", {"op0": 100.0, **{f"y{i}": 0.1 for i in range(10)}})
    assert different_job(c, d) is None


def test_different_jobs_name_the_evidence() -> None:
    a = _sig("ws1", {"aten::conv2d": 5.0, "aten::relu": 1.0, **{f"a{i}": 0.1 for i in range(4)}})
    b = _sig("ws8", {"aten::embedding_bag": 3.0, "aten::relu": 0.1, "aten::mm": 2.0}, (4096, 8))
    text = different_job(a, b)
    assert text is not None
    assert text.startswith("runs look like different jobs: ws1 and ws8 share 1 of 8")
    assert "only in ws1: aten::conv2d" in text and "only in ws8: aten::embedding_bag" in text
    assert "message sizes" not in text  # only one side has collectives
    a2 = _sig("ws1", a.op_seconds, (1024,))
    assert "collective message sizes in common: 0 of 3" in (different_job(a2, b) or "")


def test_too_little_evidence_is_not_judged() -> None:
    assert different_job(_sig("a", {"x": 1.0}), _sig("b", {"y": 1.0})) is None


def _job(folder: Path, ops: list[str], ranks: int) -> None:
    for r in range(ranks):
        t = MiniTrace(rank=r, world_size=ranks).step(1, 0, 1000).step(2, 1000, 1000)
        for k, op in enumerate(ops):
            for base in (0, 1000):
                t.host(op, base + 10 + 60 * k, 50)
        t.write(folder / f"rank{r}.json")


CNN = ["aten::conv2d", "aten::batch_norm", "aten::relu", "aten::max_pool2d", "aten::linear"]
DLRM = ["aten::embedding_bag", "aten::bmm", "aten::index_select", "aten::cat", "aten::linear"]


def test_study_of_two_jobs_warns_and_strict_refuses(tmp_path: Path) -> None:
    _job(tmp_path / "ws1", CNN, 1)
    _job(tmp_path / "ws2", DLRM, 2)
    study = tracescale.analyze(tmp_path, jobs=1)
    [w] = [w for w in study.studies[0]["warnings"] if "different jobs" in w]
    assert "share 1 of 9 operator names" in w and "aten::embedding_bag" in w
    with pytest.raises(InvalidTraceError, match="runs look like different jobs"):
        tracescale.analyze(tmp_path, jobs=1, strict=True)
    res = CliRunner().invoke(cli, ["analyze", str(tmp_path), "--strict"])
    assert isinstance(res.exception, InvalidTraceError)  # main() exits with its code
    assert res.exception.exit_code == 3 and "different jobs" in res.exception.message


def test_same_job_at_two_sizes_is_quiet(tmp_path: Path) -> None:
    _job(tmp_path / "ws1", CNN, 1)
    _job(tmp_path / "ws2", CNN, 2)
    study = tracescale.analyze(tmp_path, jobs=1)
    assert not [w for w in study.studies[0]["warnings"] if "different jobs" in w]


@pytest.mark.skipif(not TRACES.is_dir(), reason="../shared/traces is absent: no real traces")
def test_real_bert_inference_beside_dlrm_training(tmp_path: Path) -> None:
    """The case from the field: a 1-GPU inference trace and an 8-rank DLRM run in one folder."""
    for name, src in (
        ("infer", TRACES / "external" / "param_resnet_1gpu"),
        ("dlrm", TRACES / "external" / "param_dlrm_8rank"),
    ):
        (tmp_path / name).mkdir()
        for f in src.glob("*.json.gz"):
            (tmp_path / name / f.name).symlink_to(f)
    res = CliRunner().invoke(cli, ["analyze", str(tmp_path), "--format", "json"])
    assert res.exit_code == 0, res.output
    warnings = json.loads(res.output)["studies"][0]["warnings"]
    [w] = [w for w in warnings if "different jobs" in w]
    assert "infer" in w and "dlrm" in w


def test_signature_reads_range_totals_and_sizes() -> None:
    import pandas as pd

    from tracescale.classify.timeline import Segments

    r = RankResult(
        path="p",
        rank=0,
        world_size=1,
        kind="cpu",
        steps=pd.DataFrame(),
        collectives=pd.DataFrame({"bytes": [4096, -1, 4096]}),
        segments=Segments(
            start=np.zeros(0, dtype=np.int64), cat=np.zeros(0, dtype=np.int8), stop=0
        ),
        comm_by_type={},
        warnings=(),
        range_totals=pd.DataFrame(
            {"step": [1, 2, 1], "name": ["a", "a", "b"], "seconds": [1.0, 2.0, 0.5]}
        ),
    )
    sig = job_signature("x", [r, r])
    assert sig.op_seconds == {"a": 6.0, "b": 1.0}
    assert sig.message_bytes == frozenset({4096})
