"""Map/reduce over rank files: per-rank work in worker processes, compact results back."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor

from tracescale.classify.rank import RankResult
from tracescale.parallel.tasks import RankTask, TaskError, run_task

Progress = Callable[[RankTask], None]


def default_jobs() -> int:
    """Worker processes by default: the machine's cores."""
    return max(os.cpu_count() or 1, 1)


def run_tasks(
    tasks: Sequence[RankTask], *, jobs: int | None = None, progress: Progress | None = None
) -> list[RankResult | TaskError]:
    """Results in task order; with one job (or one task) everything runs in this process."""
    n = default_jobs() if jobs is None else max(int(jobs), 1)
    results: list[RankResult | TaskError] = []
    if n == 1 or len(tasks) <= 1:
        for t in tasks:
            results.append(run_task(t))
            if progress:
                progress(t)
        return results
    with ProcessPoolExecutor(max_workers=min(n, len(tasks))) as pool:
        for t, r in zip(tasks, pool.map(run_task, tasks)):
            results.append(r)
            if progress:
                progress(t)
    return results


__all__ = ["RankTask", "TaskError", "default_jobs", "run_task", "run_tasks"]
