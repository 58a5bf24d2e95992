"""The unit of per-rank work (parse + classify one file) and its picklable outcome.

Workers run :func:`run_task`; every failure of one file, expected or not, comes back as a
:class:`TaskError` value so one bad rank never takes the whole analysis (or a pool) down.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from tracescale.classify.rank import RankResult, classify_rank
from tracescale.classify.rules import load_rules
from tracescale.errors import EXIT_INVALID_TRACE, TracescaleError
from tracescale.ingest import last_read
from tracescale.ingest.decode import DEFAULT_MEMORY_BUDGET, load_trace
from tracescale.ingest.plausible import NESTED_TOO_DEEPLY, vet
from tracescale.memory import return_freed_memory
from tracescale.table import replace_tables, table_of

_COPY_CHUNK = 8 << 20


@dataclass(frozen=True)
class RankTask:
    """Everything a worker needs to process one rank file, and nothing that holds events."""

    path: str
    rank: int
    rules_file: str | None = None
    memory_budget: int = DEFAULT_MEMORY_BUDGET


@dataclass(frozen=True)
class TaskError:
    """A file that could not be analyzed: the message the user sees, and its exit code."""

    path: str
    message: str
    exit_code: int


def has_protocol(path: str) -> bool:
    """``s3://bucket/x.json`` paths are read through fsspec; plain and ``file://`` are local."""
    return "://" in path and not path.startswith("file://")


@contextmanager
def local_copy(path: str) -> Iterator[str]:
    """A local file with the contents of ``path``: itself, or an fsspec download to a temp file.

    Ingest reads local files only (it needs ``fstat`` and seeks for the gzip trailer), so a
    remote rank file is streamed to local disk first, one at a time per worker, and deleted
    after parsing: a worker's disk use is one rank file.
    """
    if path.startswith("file://"):
        yield path[len("file://") :]
        return
    if not has_protocol(path):
        yield path
        return
    try:
        import fsspec
    except ImportError as exc:
        raise TracescaleError(
            "reading remote paths needs fsspec: pip install 'tracescale[dask]'", path=path
        ) from exc
    suffix = ".json.gz" if path.endswith(".gz") else ".json"
    fd, tmp = tempfile.mkstemp(prefix="tracescale-", suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as out, fsspec.open(path, "rb") as src:
            shutil.copyfileobj(src, out, _COPY_CHUNK)
        yield tmp
    except (OSError, ValueError) as exc:
        raise TracescaleError(f"cannot read through fsspec: {exc}", path=path) from exc
    finally:
        os.unlink(tmp)


def run_task(task: RankTask) -> RankResult | TaskError:
    """Parse and classify one rank file; every failure comes back as a value, not a raise.

    Non-tracescale exceptions are bugs, but they are still one file's failure: the message
    names the exception so the rest of the study is analyzed and the user can report it.
    """
    try:
        last_read.drop_trace()  # one trace at a time: the one kept goes before this one is read
        rules = load_rules(task.rules_file)
        with local_copy(task.path) as local:
            trace = vet(load_trace(local, memory_budget=task.memory_budget))
            result = classify_rank(trace, rules, rank=task.rank)
        key = (task.path, task.rank, rules.digest, task.memory_budget)
        last_read.remember(key, trace, table_of(result, "collectives"))
        del trace
        return_freed_memory()  # the next rank file's buffers must not stack on this one's
        if result.path != task.path:
            result = replace_tables(result, path=task.path)
        return result
    except TracescaleError as exc:
        return TaskError(task.path, exc.message, exc.exit_code)
    except RecursionError:
        return TaskError(task.path, NESTED_TOO_DEEPLY, EXIT_INVALID_TRACE)
    except MemoryError:
        return TaskError(
            task.path,
            "out of memory while analyzing this file (try fewer --jobs)",
            EXIT_INVALID_TRACE,
        )
    except Exception as exc:
        return TaskError(task.path, internal_error(exc), EXIT_INVALID_TRACE)


def internal_error(exc: BaseException) -> str:
    """The message for an unexpected exception in a worker (a tracescale bug)."""
    return f"internal error while analyzing this file: {type(exc).__name__}: {exc}"
