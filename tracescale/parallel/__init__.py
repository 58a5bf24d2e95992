"""Map/reduce over rank files: per-rank work in worker processes, compact results back.

:func:`run_tasks` is the map side: cached results first, then the rest in local worker
processes (:mod:`.pool`), in this process (one job or one file), or on Dask (:mod:`.dask_run`).
Whatever runs them, each file gets a :class:`RankResult` or a :class:`TaskError`, in task order,
and the parent only ever holds those compact results.

The names load on first use (PEP 562): the study-level cache and discovery import parts of
this package, and they must not pay for the workers, the classifier and pandas.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tracescale.parallel.cache import default_cache_dir
    from tracescale.parallel.mapping import MapResult, default_jobs, run_tasks
    from tracescale.parallel.tasks import RankTask, TaskError, run_task

_HOMES = {
    "MapResult": "mapping",
    "default_jobs": "mapping",
    "run_tasks": "mapping",
    "RankTask": "tasks",
    "TaskError": "tasks",
    "run_task": "tasks",
    "default_cache_dir": "cache",
}

__all__ = [
    "MapResult",
    "RankTask",
    "TaskError",
    "default_cache_dir",
    "default_jobs",
    "run_task",
    "run_tasks",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'tracescale.parallel' has no attribute {name!r}")
    return getattr(importlib.import_module(f"tracescale.parallel.{home}"), name)
