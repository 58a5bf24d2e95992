"""Per-rank work on a Dask cluster: an existing one (``tcp://HOST:PORT``) or a LocalCluster.

Workers return the pickled outcome, exactly what a local worker sends, so caching and result
handling are shared. Every worker needs tracescale installed (same version) and, for remote
paths (``s3://``...), the fsspec filesystem package and its credentials.
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Sequence
from typing import Any

from tracescale.errors import EXIT_INVALID_TRACE, UsageError
from tracescale.parallel.pool import PICKLE_PROTOCOL, Done
from tracescale.parallel.tasks import RankTask, TaskError, run_task

CONNECT_TIMEOUT = "20s"  # to reach an existing scheduler
MISSING = "--scheduler needs the dask extra: pip install 'tracescale[dask]'"


def _run_pickled(task: RankTask) -> bytes:
    """The Dask task: one rank file, its outcome pickled as a local worker would send it."""
    return pickle.dumps(run_task(task), protocol=PICKLE_PROTOCOL)


def _client(scheduler: str, jobs: int) -> tuple[Any, Any]:
    """(client, cluster or None); a LocalCluster for ``local``, else connect to the address."""
    try:
        from distributed import Client, LocalCluster
    except ImportError as exc:
        raise UsageError(MISSING) from exc
    if scheduler == "local":
        cluster = LocalCluster(  # type: ignore[no-untyped-call]
            n_workers=jobs,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            silence_logs=logging.ERROR,
        )
        return Client(cluster), cluster  # type: ignore[no-untyped-call]
    try:
        return Client(scheduler, timeout=CONNECT_TIMEOUT), None  # type: ignore[no-untyped-call]
    except (OSError, TimeoutError, ValueError) as exc:
        raise UsageError(f"cannot connect to the Dask scheduler at {scheduler}: {exc}") from exc


def run_dask(
    tasks: Sequence[tuple[int, RankTask]], scheduler: str, jobs: int, on_done: Done
) -> None:
    """Run ``(index, task)`` pairs on Dask; a task whose workers died becomes its TaskError."""
    if not tasks:
        return
    try:
        from distributed import as_completed
    except ImportError as exc:
        raise UsageError(MISSING) from exc
    client, cluster = _client(scheduler, jobs)
    try:
        futures = client.map(_run_pickled, [t for _, t in tasks], pure=False)
        index = {f.key: (i, t) for f, (i, t) in zip(futures, tasks, strict=True)}
        for fut in as_completed(futures):  # type: ignore[no-untyped-call]
            i, task = index[fut.key]
            try:
                payload: bytes | TaskError = fut.result()
            except Exception as exc:
                payload = TaskError(
                    task.path,
                    f"Dask worker failed on this file (killed, out of memory, or a bug): "
                    f"{type(exc).__name__}: {exc}",
                    EXIT_INVALID_TRACE,
                )
            fut.release()  # the cluster keeps nothing once the parent has the result
            on_done(i, payload)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
