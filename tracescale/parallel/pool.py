"""Local worker processes that live for the run: ``jobs`` of them, one rank file at a time each.

Why persistent workers: a fresh forked child per file faults in ~100 MB of the parent's pages
before it does any work (measured: 2 jobs cost 30x the page faults of 1). A worker that
analyzes file after file pays that once. Why not ``ProcessPoolExecutor``: when one of its
workers dies (OOM killer, segfault in a decoder, ``os._exit``) it breaks every pending future
and cannot say which file did it, and ``multiprocessing.Pool`` can hang forever. Here each
worker has its own pipe and the parent knows which file it is running, so a death (seen on the
process sentinel or as EOF) becomes that file's :class:`TaskError` and a new worker takes over
the rest; nothing else is affected and nothing can hang.

A worker never outlives the parent: on Linux the kernel kills it when the parent dies
(``PR_SET_PDEATHSIG``); elsewhere a watchdog thread checks the parent pid. Each forked child
closes the parent's ends of every pipe it inherited, so a dead parent reads as EOF and a
blocked write as a broken pipe, never as a pipe some sibling still holds open.

Processes are forked while the parent has a single thread (cheapest, and a user's script is
never re-run); with other threads alive (Dask client), whose locks a fork could copy while
held, they come from a ``forkserver`` that preloads tracescale instead.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import multiprocessing as mp
import os
import pickle
import resource
import signal
import sys
import threading
import time
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
_WATCHDOG_PERIOD = 0.5  # seconds between parent-pid checks where there is no PDEATHSIG
_PR_SET_PDEATHSIG = 1


def context() -> BaseContext:
    """The start method for workers: ``fork`` while this process has one thread, else
    ``forkserver`` with tracescale preloaded (``spawn`` where neither exists).

    A fork is the cheapest start (measured: 16 rank files, jobs=2, 3.1 s with fork against
    5.9 s with forkserver, whose children paid for their imports) and it never re-runs the
    caller's script, so an unguarded script works too. With other threads alive (a Dask
    client) a fork could copy a held lock, so then the forkserver is used.
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


def die_with_parent(parent_pid: int | None) -> None:
    """Make this process end when its parent does (called first thing in a worker).

    Linux: the kernel sends SIGKILL when the parent dies. The parent may already be gone by
    then (it died between the fork and this call), hence the pid check after it. Elsewhere a
    daemon thread polls the parent pid. ``parent_pid`` is the forking process's pid; None
    (forkserver, spawn) means the current parent, which ends when the caller does.
    """
    if parent_pid is None:
        parent_pid = os.getppid()
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0:
                if os.getppid() != parent_pid:
                    os._exit(1)
                return

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(_WATCHDOG_PERIOD)
        os._exit(1)

    if os.getppid() != parent_pid:
        os._exit(1)
    threading.Thread(target=watch, name="tracescale-parent-watch", daemon=True).start()


def _serve(
    conn: Connection, fn: Worker, parent_pid: int | None, inherited: Sequence[Connection]
) -> None:
    """Worker body: run the tasks the parent sends until it sends nothing (or goes away).

    Each task arrives as a pickled ``RankTask``; the reply is the pickled outcome, then this
    process's peak RSS so far.
    """
    die_with_parent(parent_pid)
    for other in inherited:  # fork copies the parent's ends of every pipe: drop them
        with contextlib.suppress(OSError):
            other.close()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    while True:
        try:
            message = conn.recv_bytes()
        except (EOFError, OSError):
            return
        if not message:
            return
        task: RankTask = pickle.loads(message)
        try:
            result: RankResult | TaskError = fn(task)
        except BaseException as exc:
            result = TaskError(task.path, internal_error(exc), EXIT_INVALID_TRACE)
        try:
            payload = pickle.dumps(result, protocol=PICKLE_PROTOCOL)
        except Exception as exc:
            err = TaskError(task.path, internal_error(exc), EXIT_INVALID_TRACE)
            payload = pickle.dumps(err, protocol=PICKLE_PROTOCOL)
        del result
        try:
            conn.send_bytes(payload)
            conn.send_bytes(peak_rss().to_bytes(8, "little"))
        except OSError:  # the parent is gone
            return
        del payload


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


class _Worker:
    """One live worker process, the parent's end of its pipe, and the task it is running."""

    def __init__(self, ctx: BaseContext, fn: Worker, siblings: Sequence[Connection]) -> None:
        ours, theirs = ctx.Pipe(duplex=True)
        self.conn = ours
        self.current: tuple[int, RankTask] | None = None
        forked = ctx.get_start_method() == "fork"
        # A forked child inherits every pipe end the parent holds; it closes them at once.
        inherited = [ours, *siblings] if forked else []
        self.proc: BaseProcess = ctx.Process(  # type: ignore[attr-defined]
            target=_serve,
            args=(theirs, fn, os.getpid() if forked else None, inherited),
            name="tracescale-worker",
            daemon=True,
        )
        self.proc.start()
        theirs.close()  # only the child holds its end: the child's death reads as EOF here

    def send(self, index: int, task: RankTask) -> bool:
        """Hand the worker a task; False when it is already dead."""
        self.current = (index, task)
        try:
            self.conn.send_bytes(pickle.dumps(task, protocol=PICKLE_PROTOCOL))
        except OSError:
            return False
        return True

    def receive(self) -> tuple[bytes | None, int]:
        """The pickled outcome and peak RSS, or (None, 0) when the worker died instead."""
        try:
            payload = self.conn.recv_bytes()
        except (EOFError, OSError):
            return None, 0
        rss = 0
        with contextlib.suppress(EOFError, OSError):
            rss = int.from_bytes(self.conn.recv_bytes(), "little")
        return payload, rss

    def death(self) -> TaskError:
        """The current task's error after the worker died; reaps the process."""
        self.conn.close()
        self.proc.join(_JOIN_TIMEOUT)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        index_task = self.current
        assert index_task is not None
        return TaskError(index_task[1].path, death_message(self.proc.exitcode), EXIT_INVALID_TRACE)

    def stop(self, *, kill: bool = False) -> None:
        """Tell the worker to exit (an empty message), or kill it; then reap it."""
        if not kill:
            with contextlib.suppress(OSError):
                self.conn.send_bytes(b"")
        self.conn.close()
        if kill and self.proc.is_alive():
            self.proc.kill()
        self.proc.join(_JOIN_TIMEOUT)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        self.proc.close()


def load_scanner_if_worth(tasks: Sequence[tuple[int, RankTask]]) -> None:
    """Load the compiled ingest scanner in this process when the files to read are big enough
    together to pay for it; forked workers then inherit it instead of each loading it."""
    from tracescale.ingest.decode import SCANNER_WORTH_BYTES

    total = 0
    for _i, task in tasks:
        total += _json_size(task.path)
        if total >= SCANNER_WORTH_BYTES:
            from tracescale.ingest.fast import warm_up

            warm_up()
            return


def _json_size(path: str) -> int:
    """Decompressed size from a gzip file's trailer (mod 4 GB), else the file size."""
    try:
        with open(path, "rb") as fh:
            if fh.read(2) != b"\x1f\x8b":
                return os.fstat(fh.fileno()).st_size
            fh.seek(-4, os.SEEK_END)
            return int.from_bytes(fh.read(4), "little")
    except (OSError, ValueError):
        return 0


def _size(task: RankTask) -> int:
    try:
        return os.path.getsize(task.path)
    except (OSError, ValueError):
        return 0


def run_local(
    tasks: Sequence[tuple[int, RankTask]], jobs: int, on_done: Done, fn: Worker = run_task
) -> int:
    """Run ``(index, task)`` pairs on ``jobs`` workers; ``on_done(index, outcome)`` as each ends.

    The largest files go first, so a big rank does not start last and leave the other workers
    idle at the end. Returns the largest worker peak RSS in bytes.
    """
    ctx = context()
    queue = sorted(tasks, key=lambda it: _size(it[1]))  # popped from the end: largest first
    workers: list[_Worker] = []
    peak = 0
    # Forked children would copy every inherited page their garbage collector touches:
    # freezing the parent's objects first keeps them shared (and the children as fast as one).
    gc.freeze()
    try:
        for _ in range(min(max(jobs, 1), len(queue))):
            workers.append(_Worker(ctx, fn, [w.conn for w in workers]))
        idle = list(workers)
        busy: dict[Connection, _Worker] = {}
        while queue or busy:
            while queue and idle:
                worker = idle.pop()
                index, task = queue.pop()
                if worker.send(index, task):
                    busy[worker.conn] = worker
                else:
                    on_done(index, worker.death())
                    workers.remove(worker)
                    replacement = _Worker(ctx, fn, [w.conn for w in workers])
                    workers.append(replacement)
                    idle.append(replacement)
            sentinels = {w.proc.sentinel: w for w in busy.values()}
            for ready in wait([*busy, *sentinels]):
                worker_or_none = busy.get(ready) if isinstance(ready, Connection) else None
                if worker_or_none is None and isinstance(ready, int):
                    worker_or_none = sentinels.get(ready)
                if worker_or_none is None or worker_or_none.conn not in busy:
                    continue  # already handled through its other handle in this round
                worker = worker_or_none
                del busy[worker.conn]
                payload, rss = worker.receive()
                index, _task = worker.current or (-1, None)
                if payload is None:
                    on_done(index, worker.death())
                    workers.remove(worker)
                    if queue:
                        replacement = _Worker(ctx, fn, [w.conn for w in workers])
                        workers.append(replacement)
                        idle.append(replacement)
                    continue
                peak = max(peak, rss)
                worker.current = None
                idle.append(worker)
                on_done(index, payload)
    finally:
        for worker in workers:
            worker.stop(kill=worker.current is not None)
        gc.unfreeze()
    return peak
