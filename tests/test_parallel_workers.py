"""Worker functions for test_parallel: a module that imports almost nothing, so the worker
processes that unpickle them start fast (they import this module, not pytest or the tests)."""

from __future__ import annotations

import os
import signal

from tracescale.classify.rank import RankResult
from tracescale.parallel.tasks import RankTask, TaskError, run_task


def crash_worker(task: RankTask) -> RankResult | TaskError:
    """Dies on marked files the way an OOM kill or a native crash would; else the real worker."""
    if "exit7" in task.path:
        os._exit(7)
    if "sigkill" in task.path:
        os.kill(os.getpid(), signal.SIGKILL)
    if "boom" in task.path:
        raise RuntimeError("boom")
    return run_task(task)
