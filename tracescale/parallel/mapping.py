"""The map side: every task's outcome, cached results first, the rest in local workers or Dask.

Whatever runs a task, each file gets a :class:`RankResult` or a :class:`TaskError`, in task
order, and the parent only ever holds those compact results.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tracescale.classify.rank import RankResult
from tracescale.classify.rules import load_rules
from tracescale.ingest import last_read
from tracescale.parallel.cache import CacheKey, ResultCache, make_key
from tracescale.parallel.pool import Worker, load_scanner_if_worth, run_local
from tracescale.parallel.tasks import RankTask, TaskError, run_task
from tracescale.table import replace_tables, table_of

Progress = Callable[[RankTask], None]
Outcome = RankResult | TaskError


def default_jobs() -> int:
    """Worker processes by default: the machine's cores."""
    return max(os.cpu_count() or 1, 1)


#: Below this much trace JSON (estimated from the files' sizes on disk) a map with no
#: ``--jobs`` runs in this process: forking workers, pickling their results back and decoding
#: the replay's rank again in the parent cost more than the parallel work saves. Measured on
#: the 8-rank DLRM step (7.4 MB of JSON, 2 cores): 2.35 s with two workers, 1.5 s in-process.
IN_PROCESS_BYTES = 16 * 2**20
#: A compressed trace holds about this many times its size in JSON (Kineto's gzip: 8-12x).
COMPRESSED_RATIO = 8


def small_enough_for_one_process(tasks: Sequence[RankTask]) -> bool:
    """Whether the files' JSON, estimated from their sizes on disk, is below
    ``IN_PROCESS_BYTES`` (an unreadable size counts as large: the workers then decide)."""
    total = 0
    for task in tasks:
        try:
            size = os.stat(task.path).st_size
        except OSError:
            return False
        compressed = task.path.endswith((".gz", ".zst", ".bz2", ".xz"))
        total += size * (COMPRESSED_RATIO if compressed else 1)
        if total > IN_PROCESS_BYTES:
            return False
    return True


@dataclass(frozen=True)
class MapResult:
    """Outcomes in task order, plus what the user should be told and a few counters."""

    results: list[Outcome]
    warnings: tuple[str, ...] = ()
    cached: int = 0  # results read from the cache
    computed: int = 0  # results computed by a worker (or in this process)
    worker_peak_rss: int = 0  # bytes, largest over local worker processes (0: none ran)


def run_tasks(
    tasks: Sequence[RankTask],
    *,
    jobs: int | None = None,
    progress: Progress | None = None,
    cache_dir: str | None = None,
    no_cache: bool = False,
    scheduler: str | None = None,
    _worker: Worker = run_task,
) -> MapResult:
    """Outcomes in task order; cached where the file, rules and version are unchanged.

    ``jobs`` worker processes (default: the cores, or this process alone below
    ``IN_PROCESS_BYTES`` of JSON); with one job or one file to compute everything runs in this
    process. ``scheduler`` (``"local"`` or a Dask address) runs the
    work on Dask instead. ``progress(task)`` is called as each task finishes (cache hits too);
    if it has a ``begin(tasks)`` method, that is called first with all the tasks.
    """
    tasks = list(tasks)
    last_read.forget()  # a new map: what an earlier one read or found is not this one's
    n_jobs = default_jobs() if jobs is None else max(int(jobs), 1)
    begin = getattr(progress, "begin", None)
    if callable(begin):
        begin(tasks)
    out: list[Outcome | None] = [None] * len(tasks)
    cache = None if no_cache else ResultCache(cache_dir)
    keys: list[CacheKey | None] = [None] * len(tasks)
    digests: dict[str | None, str] = {}
    todo: list[tuple[int, RankTask]] = []
    hits = 0
    for i, task in enumerate(tasks):
        if cache is not None:
            if task.rules_file not in digests:
                digests[task.rules_file] = load_rules(task.rules_file).digest
            key = keys[i] = make_key(task, digests[task.rules_file])
            hit = cache.get(key) if key is not None else None
            if hit is not None:
                out[i] = hit if hit.path == task.path else replace_tables(hit, path=task.path)
                hits += 1
                if progress:
                    progress(task)
                continue
        todo.append((i, task))

    def store(i: int, result: Outcome) -> None:
        out[i] = result
        key = keys[i]
        if isinstance(result, RankResult) and _worker is run_task:
            task = tasks[i]  # the replay classifies its rank's trace no second time
            if task.rules_file not in digests:
                digests[task.rules_file] = load_rules(task.rules_file).digest
            found_key = (task.path, result.rank, digests[task.rules_file], task.memory_budget)
            last_read.note_found(found_key, table_of(result, "collectives"))
        # A file modified while it was being analyzed must not be cached under the old key.
        if (
            cache is not None
            and key is not None
            and isinstance(result, RankResult)
            and make_key(tasks[i], key.rules) == key
        ):
            cache.put(key, result)
        if progress:
            progress(tasks[i])

    def done(i: int, payload: bytes | TaskError) -> None:
        # Worker pipes and Dask carry pickles between our own processes (trusted); the on-disk
        # cache never does (see .entry).
        store(i, payload if isinstance(payload, TaskError) else pickle.loads(payload))

    peak = 0
    if scheduler:
        from tracescale.parallel.dask_run import run_dask

        run_dask(todo, scheduler, n_jobs if jobs is not None else default_jobs(), done)
    elif (
        n_jobs == 1
        or len(todo) <= 1
        or (jobs is None and small_enough_for_one_process([t for _, t in todo]))
    ):
        load_scanner_if_worth(todo)
        with last_read.keeping_last_read():  # the replay may take the last trace read here
            for i, task in todo:
                store(i, _worker(task))
    else:
        load_scanner_if_worth(todo)  # before the fork: the workers inherit it
        peak = run_local(todo, min(n_jobs, len(todo)), done, _worker)
    results = [r for r in out if r is not None]
    assert len(results) == len(tasks)
    return MapResult(
        results=results,
        warnings=tuple(cache.warnings) if cache is not None else (),
        cached=hits,
        computed=len(todo),
        worker_peak_rss=peak,
    )
