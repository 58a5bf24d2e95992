"""Local worker processes: one short-lived process per rank file, ``jobs`` at a time.

Why not a long-lived pool: when a pool worker dies (OOM killer, segfault in a decoder,
``os._exit``), ``ProcessPoolExecutor`` breaks every pending future and cannot say which file
did it, and ``multiprocessing.Pool`` can hang forever (HTA's hang on 8 x 5 GB ranks). Here
each file has its own process and pipe, so a death is noticed on that process's sentinel and
becomes that file's :class:`TaskError`; nothing else is affected and nothing can hang. A
process per file also hands each rank's memory back to the OS as soon as the rank is done.

Processes are forked while the parent has a single thread (cheapest, and a user's script is
never re-run); with other threads alive (progress bar, Dask client), whose locks a fork could
copy while held, they come from a ``forkserver`` that preloads tracescale instead.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing as mp
import pickle
import resource
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess

from tracescale.classify.rank import RankResult
from tracescale.errors import EXIT_INVALID_TRACE
from tracescale.parallel.tasks import RankTask, TaskError, internal_error, run_task

PICKLE_PROTOCOL = 5
Worker = Callable[[RankTask], RankResult | TaskError]
Done = Callable[[int, bytes | TaskError], None]
_PRELOAD = ["tracescale.parallel.tasks"]
_JOIN_TIMEOUT = 10.0


def context() -> BaseContext:
    """The start method for workers: ``fork`` while this process has one thread, else
    ``forkserver`` with tracescale preloaded (``spawn`` where neither exists).

    A fork is the cheapest start (measured: 16 rank files, jobs=2, 3.1 s with fork against
    5.9 s with forkserver, whose children paid for their imports) and it never re-runs the
    caller's script, so an unguarded script works too. With other threads alive (a progress
    bar, a Dask client) a fork could copy a held lock, so then the forkserver is used.
    """
    methods = mp.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        return mp.get_context("fork")
    if "forkserver" in methods:
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(_PRELOAD)
        return ctx
    return mp.get_context("spawn")


def peak_rss() -> int:
    """This process's peak resident memory in bytes (VmHWM; ru_maxrss where there is no /proc)."""
    try:
        with open("/proc/self/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    ru = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(ru if sys.platform == "darwin" else ru * 1024)


def _child(conn: Connection, task: RankTask, fn: Worker) -> None:
    """Worker body: run one task, send the pickled outcome, then this process's peak RSS."""
    try:
        result: RankResult | TaskError = fn(task)
    except BaseException as exc:
        result = TaskError(task.path, internal_error(exc), EXIT_INVALID_TRACE)
    try:
        payload = pickle.dumps(result, protocol=PICKLE_PROTOCOL)
    except Exception as exc:
        err = TaskError(task.path, internal_error(exc), EXIT_INVALID_TRACE)
        payload = pickle.dumps(err, protocol=PICKLE_PROTOCOL)
    conn.send_bytes(payload)
    conn.send_bytes(peak_rss().to_bytes(8, "little"))
    conn.close()


def death_message(exitcode: int | None) -> str:
    """Why a worker ended without a result, in the user's words."""
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        hint = " (out of memory? try fewer --jobs)" if -exitcode == signal.SIGKILL else ""
        return f"worker process was killed by {name} while analyzing this file{hint}"
    return (
        f"worker process exited (code {exitcode}) while analyzing this file, without a result"
        " (a script that calls tracescale must guard it with `if __name__ == '__main__':`)"
    )


class _Running:
    """One live worker: its process, the read end of its pipe, and the task index."""

    def __init__(self, ctx: BaseContext, index: int, task: RankTask, fn: Worker) -> None:
        self.index = index
        self.task = task
        reader, writer = ctx.Pipe(duplex=False)
        self.conn = reader
        self.proc: BaseProcess = ctx.Process(  # type: ignore[attr-defined]
            target=_child,
            args=(writer, task, fn),
            name=f"tracescale-rank-{task.rank}",
            daemon=True,
        )
        self.proc.start()
        writer.close()  # only the child holds the write end: its death reads as EOF

    def collect(self) -> tuple[bytes | TaskError, int]:
        """The outcome (pickled result or a death error) and the worker's peak RSS."""
        rss = 0
        try:
            payload: bytes | TaskError = self.conn.recv_bytes()
        except (EOFError, OSError):
            payload = TaskError(self.task.path, "", EXIT_INVALID_TRACE)
        else:
            with contextlib.suppress(EOFError, OSError):
                rss = int.from_bytes(self.conn.recv_bytes(), "little")
        self.conn.close()
        self.proc.join(_JOIN_TIMEOUT)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        if isinstance(payload, TaskError):
            payload = TaskError(
                self.task.path, death_message(self.proc.exitcode), EXIT_INVALID_TRACE
            )
        self.proc.close()
        return payload, rss

    def kill(self) -> None:
        self.conn.close()
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join()


def run_local(
    tasks: Sequence[tuple[int, RankTask]], jobs: int, on_done: Done, fn: Worker = run_task
) -> int:
    """Run ``(index, task)`` pairs ``jobs`` at a time; ``on_done(index, outcome)`` as each ends.

    Returns the largest worker peak RSS in bytes.
    """
    ctx = context()
    queue = list(reversed(tasks))
    live: dict[Connection, _Running] = {}
    peak = 0
    # Forked children would copy every inherited page their garbage collector touches:
    # freezing the parent's objects first keeps them shared (and the children as fast as one).
    gc.freeze()
    try:
        while queue or live:
            while queue and len(live) < max(jobs, 1):
                index, task = queue.pop()
                run = _Running(ctx, index, task, fn)
                live[run.conn] = run
            ready = wait(list(live) + [r.proc.sentinel for r in live.values()])
            for obj in ready:
                run_or_none = (
                    live.get(obj)
                    if isinstance(obj, Connection)
                    else next((r for r in live.values() if r.proc.sentinel == obj), None)
                )
                if run_or_none is None or run_or_none.conn not in live:
                    continue
                run = run_or_none
                del live[run.conn]
                payload, rss = run.collect()
                peak = max(peak, rss)
                on_done(run.index, payload)
    finally:
        for run in live.values():
            run.kill()
        gc.unfreeze()
    return peak
