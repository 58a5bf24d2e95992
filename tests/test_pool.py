"""Persistent workers: one process serves many files, holds only its own pipe end, and dies
with the parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_parallel_workers import socket_count_worker

from tracescale.parallel import RankTask, TaskError, run_tasks

LINUX_ONLY = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads /proc to see the worker's pipes"
)


def _files(tmp_path: Path, n: int) -> list[RankTask]:
    tasks = []
    for i in range(n):
        path = tmp_path / f"rank{i}.json"
        path.write_text("{}")
        tasks.append(RankTask(str(path), rank=i))
    return tasks


@LINUX_ONLY
def test_workers_persist_and_hold_only_their_own_pipe(tmp_path: Path) -> None:
    mapped = run_tasks(_files(tmp_path, 6), jobs=2, no_cache=True, _worker=socket_count_worker)
    messages = [r.message for r in mapped.results if isinstance(r, TaskError)]
    assert len(messages) == 6
    # Two processes served the six files (a fresh process per file would give six pids).
    pids = {m.split("pid=")[1] for m in messages}
    assert len(pids) == 2
    # Each holds one socket: its end of its own pipe, none of its sibling's or the parent's.
    assert all(m.startswith("sockets=1 ") for m in messages), messages


_PARENT = """
import sys
sys.path.insert(0, {tests!r})
from test_parallel_workers import hang_worker
from tracescale.parallel import RankTask, run_tasks
tasks = [RankTask(p, rank=i) for i, p in enumerate(sys.argv[1:])]
run_tasks(tasks, jobs=2, no_cache=True, _worker=hang_worker)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie waiting for its (dead) parent's reaper is gone for our purpose
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@LINUX_ONLY
def test_workers_exit_when_the_parent_is_killed(tmp_path: Path) -> None:
    tasks = _files(tmp_path, 4)
    script = _PARENT.format(tests=str(Path(__file__).parent))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    parent = subprocess.Popen([sys.executable, "-c", script, *[t.path for t in tasks]], env=env)
    try:
        deadline = time.monotonic() + 60
        while len(list(tmp_path.glob("*.pid"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        pids = [int(p.read_text() or 0) for p in tmp_path.glob("*.pid")]
        assert len(pids) == 2 and all(pids), "workers did not start"
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 5
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [p for p in pids if _alive(p)], "workers outlived the killed parent"
    finally:
        if parent.poll() is None:
            parent.kill()
        for p in tmp_path.glob("*.pid"):
            pid = int(p.read_text() or 0)
            if pid and _alive(pid):
                os.kill(pid, signal.SIGKILL)
