"""Trace folders behind a URL (``s3://``, ``gs://``, ``hdfs://``, ``memory://``) via fsspec.

Discovery lists folders and reads file heads through these few functions; workers copy a
remote rank file to a local temp file before parsing (tracescale.parallel.tasks). fsspec and
the filesystem's package (s3fs, gcsfs) are the user's: a clear error says what is missing.
"""

from __future__ import annotations

from typing import Any

from tracescale.errors import NoTracesError, UsageError


def is_url(path: str) -> bool:
    """``s3://bucket/x`` is remote; plain paths and ``file://`` are local."""
    return "://" in path and not path.startswith("file://")


def _fs(path: str) -> tuple[Any, str]:
    try:
        import fsspec
    except ImportError as exc:
        raise UsageError(
            "reading traces from a URL needs fsspec: pip install 'tracescale[dask]'", path=path
        ) from exc
    try:
        fs, inner = fsspec.core.url_to_fs(path)
        return fs, str(inner)
    except (ImportError, ValueError) as exc:
        raise UsageError(f"cannot open this URL's filesystem: {exc}", path=path) from exc


def _url(fs: Any, name: str) -> str:
    return str(fs.unstrip_protocol(name))


def exists(path: str) -> bool:
    fs, inner = _fs(path)
    return bool(fs.exists(inner))


def is_file(path: str) -> bool:
    fs, inner = _fs(path)
    return bool(fs.isfile(inner))


def size(path: str) -> int:
    fs, inner = _fs(path)
    return int(fs.size(inner) or 0)


def listing(folder: str) -> tuple[list[str], list[str]]:
    """(files, sub-folders) directly in ``folder``, as URLs, sorted."""
    fs, inner = _fs(folder)
    try:
        entries = fs.ls(inner, detail=True)
    except FileNotFoundError as exc:
        raise NoTracesError("no such file or folder", path=folder) from exc
    files: list[str] = []
    dirs: list[str] = []
    for e in sorted(entries, key=lambda e: str(e["name"])):
        name = str(e["name"]).rstrip("/")
        if name == inner.rstrip("/"):
            continue
        (dirs if e.get("type") == "directory" else files).append(_url(fs, name))
    return files, dirs


def head(path: str, limit: int) -> bytes:
    """The first ``limit`` bytes of a remote file."""
    fs, inner = _fs(path)
    with fs.open(inner, "rb") as fh:
        data = fh.read(limit)
    return bytes(data)
