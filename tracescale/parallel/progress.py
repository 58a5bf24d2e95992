"""A rich progress bar over rank files and their bytes, on stderr, for :func:`run_tasks`.

Bytes are the files' sizes on disk, so a study with one huge rank does not look stuck at
"63/64 files". The CLI enables it only on a terminal and without ``--quiet``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from tracescale.parallel.tasks import RankTask, has_protocol


def _size(task: RankTask) -> int:
    if has_protocol(task.path):
        return 0
    try:
        return os.path.getsize(task.path)
    except OSError:
        return 0


class ProgressCallback:
    """Callable per finished task; ``begin(tasks)`` sets the totals (run_tasks calls it)."""

    def __init__(self, bar: Any | None) -> None:
        self._bar = bar
        self._id: Any = None
        self._files = 0
        self._total_files = 0

    def begin(self, tasks: Sequence[RankTask]) -> None:
        self._files = 0
        self._total_files = len(tasks)
        if self._bar is None:
            return
        total = sum(_size(t) for t in tasks)
        if self._id is not None:
            self._bar.remove_task(self._id)
        self._id = self._bar.add_task(
            "analyzing", total=total or None, files=f"0/{len(tasks)} files"
        )
        self._bar.refresh()

    def __call__(self, task: RankTask) -> None:
        self._files += 1
        if self._bar is None or self._id is None:
            return
        self._bar.update(
            self._id, advance=_size(task), files=f"{self._files}/{self._total_files} files"
        )
        self._bar.refresh()


@contextmanager
def progress_bar(tasks: Sequence[RankTask] | None, enabled: bool) -> Iterator[ProgressCallback]:
    """Yield the callback for ``run_tasks(progress=...)``; a no-op one when not ``enabled``.

    ``tasks`` may be None when the caller does not know them yet (``analyze`` builds them):
    ``run_tasks`` then calls ``begin`` with them.
    """
    if not enabled:
        yield ProgressCallback(None)
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[files]}"),
        DownloadColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
        # No refresh thread: redrawn on each finished file, so the parent stays single-threaded
        # and workers can be forked (see pool.context).
        auto_refresh=False,
    )
    callback = ProgressCallback(bar)
    with bar:
        if tasks is not None:
            callback.begin(tasks)
        yield callback
