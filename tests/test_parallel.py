"""run_tasks: one study for any --jobs, results in task order, a dying worker is one error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import require_module
from test_parallel_workers import crash_worker

from tracescale.classify.rank import RankResult
from tracescale.parallel import MapResult, RankTask, TaskError, run_task, run_tasks
from tracescale.parallel.progress import progress_bar
from tracescale.pipeline import analyze
from tracescale.simulate import simulate


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("study")
    simulate([1, 2, 4], out, steps=3)
    return out


def _tasks(study: Path) -> list[RankTask]:
    files = sorted(study.glob("ws*/*.json.gz"))
    return [RankTask(str(p), rank=i) for i, p in enumerate(files)]


def test_jobs_1_and_2_give_identical_json(study: Path) -> None:
    one = analyze(str(study), jobs=1, no_cache=True).to_json()
    two = analyze(str(study), jobs=2, no_cache=True).to_json()
    assert one == two
    assert json.loads(one)["studies"][0]["runs"]


def test_results_in_task_order_with_progress(study: Path) -> None:
    tasks = _tasks(study)
    seen: list[str] = []
    began: list[int] = []

    class Spy:
        def begin(self, ts: list[RankTask]) -> None:
            began.append(len(ts))

        def __call__(self, task: RankTask) -> None:
            seen.append(task.path)

    mapped = run_tasks(tasks, jobs=2, progress=Spy(), no_cache=True)
    assert isinstance(mapped, MapResult)
    assert [r.path for r in mapped.results] == [t.path for t in tasks]
    assert all(isinstance(r, RankResult) for r in mapped.results)
    assert sorted(seen) == sorted(t.path for t in tasks) and began == [len(tasks)]
    assert mapped.computed == len(tasks) and mapped.worker_peak_rss > 0


@pytest.mark.parametrize(
    ("marker", "expect"),
    [("exit7", "exited (code 7)"), ("sigkill", "SIGKILL"), ("boom", "RuntimeError: boom")],
)
def test_dying_worker_is_that_files_error(
    study: Path, tmp_path: Path, marker: str, expect: str
) -> None:
    tasks = _tasks(study)[:3]
    bad = tmp_path / f"{marker}.pt.trace.json.gz"
    bad.write_bytes(Path(tasks[0].path).read_bytes())
    tasks.insert(1, RankTask(str(bad), rank=99))
    mapped = run_tasks(tasks, jobs=2, no_cache=True, _worker=crash_worker)
    err = mapped.results[1]
    assert isinstance(err, TaskError) and err.path == str(bad)
    assert expect in err.message and err.exit_code == 3
    others = mapped.results[:1] + mapped.results[2:]
    assert all(isinstance(r, RankResult) for r in others)


def test_unexpected_exception_in_process_is_a_task_error(
    study: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise ValueError("classifier bug")

    monkeypatch.setattr("tracescale.parallel.tasks.classify_rank", broken)
    mapped = run_tasks(_tasks(study)[:2], jobs=1, no_cache=True)
    assert all(isinstance(r, TaskError) for r in mapped.results)
    assert "ValueError: classifier bug" in mapped.results[0].message  # type: ignore[union-attr]


def test_invalid_file_in_worker(study: Path, tmp_path: Path) -> None:
    bad = tmp_path / "rank3.json"
    bad.write_text("{ not json")
    tasks = [*_tasks(study)[:2], RankTask(str(bad), rank=3)]
    mapped = run_tasks(tasks, jobs=2, no_cache=True)
    err = mapped.results[2]
    assert isinstance(err, TaskError) and "JSON" in err.message and err.exit_code == 3


def test_remote_path_through_fsspec(study: Path) -> None:
    fsspec = require_module("fsspec", "remote (s3://, memory://) paths are read with fsspec")
    src = _tasks(study)[-1]
    url = "memory://tracescale-test/rank-3.pt.trace.json.gz"
    with fsspec.open(url, "wb") as fh:
        fh.write(Path(src.path).read_bytes())
    result = run_task(RankTask(url, rank=src.rank))
    local = run_task(src)
    assert isinstance(result, RankResult) and isinstance(local, RankResult)
    assert result.path == url
    assert result.steps.equals(local.steps)


def test_progress_bar_counts_files_and_bytes(study: Path) -> None:
    tasks = _tasks(study)
    with progress_bar(tasks, enabled=True) as callback:
        run_tasks(tasks, jobs=1, progress=callback, no_cache=True)
    assert callback._files == len(tasks)
    with progress_bar(None, enabled=False) as quiet:
        quiet(tasks[0])
