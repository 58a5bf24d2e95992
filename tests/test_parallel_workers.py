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


def hang_worker(task: RankTask) -> RankResult | TaskError:
    """Announces its pid in a file beside the task's, then works 'forever' (until killed)."""
    import time

    tmp = task.path + f".{os.getpid()}.tmp"
    with open(tmp, "w") as fh:
        fh.write(str(os.getpid()))
    os.replace(tmp, task.path + f".{os.getpid()}.pid")  # whole, never half-written
    time.sleep(120)
    return run_task(task)


def socket_count_worker(task: RankTask) -> RankResult | TaskError:
    """Reports how many sockets (pipe ends to the parent) this worker process holds open."""
    fds = os.listdir("/proc/self/fd")
    sockets = 0
    for fd in fds:
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                sockets += 1
        except OSError:
            continue
    return TaskError(task.path, f"sockets={sockets} pid={os.getpid()}", 0)
