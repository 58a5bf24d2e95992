"""Outputs that are never half-written, and never written over a user's traces.

Every file tracescale writes goes to a temporary file in the destination folder (same file
system, so the rename is atomic) and is renamed into place; on any exception, Ctrl-C included,
the temporary file is removed and an existing destination is left untouched. A new file gets
``0666 & ~umask`` like any other program's output; a replaced file keeps its mode.

``-o`` refuses, unless ``--force``, to replace an input, a trace (its JSON's top-level keys are
parsed as a stream, wherever ``traceEvents`` sits, gzip or not), a symlink or anything that is
not a regular file, and to write into a folder of input traces. With ``--force`` a symlink is
followed (like a shell redirection: the link stays) and a FIFO or a device is written through
(it cannot be renamed over).
OS failures become :class:`OutputError` naming the path (exit code 5).
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import os
import stat
import tempfile
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from tracescale.errors import OutputError, UsageError

#: File names that are trace inputs whatever they hold; ``-o`` refuses them without ``--force``.
_TRACE_SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz", ".trace.json", ".trace.json.gz")
_SNIFF_OPEN = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def os_error_message(exc: OSError) -> str:
    """A short reason for a failed write, the same words everywhere."""
    if exc.errno == errno.ENOENT:
        return "cannot write: the folder does not exist"
    if exc.errno == errno.ENOSPC:
        return "cannot write: no space left on device"
    if exc.errno == errno.EROFS:
        return "cannot write: read-only file system"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "cannot write: permission denied"
    return f"cannot write: {exc.strerror or exc}"


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary sibling file and ``os.replace``.

    Raises :class:`OutputError` (naming ``path``) on any OS failure: missing folder, full disk,
    read-only file system, permission.
    """
    atomic_write_chunks(path, [data])


def atomic_write_chunks(
    path: str | os.PathLike[str],
    chunks: Iterable[bytes | bytearray | memoryview],
    verify: Callable[[str], None] | None = None,
) -> None:
    """:func:`atomic_write_bytes` of the concatenated ``chunks``, written as they come (an
    output larger than memory never stands whole in it); ``verify(temporary path)`` runs on
    the complete file before it replaces ``path`` (raising leaves ``path`` as it was)."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    try:
        old_mode: int | None = stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        old_mode = None
    mode = old_mode if old_mode is not None else 0o666 & ~_umask()
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise OutputError(os_error_message(exc), path=str(path)) from exc
    try:
        with os.fdopen(fd, "wb") as fh:
            for chunk in chunks:
                fh.write(chunk)
            fh.flush()
            os.fchmod(fh.fileno(), mode)
            os.fsync(fh.fileno())
        if verify is not None:
            verify(tmp)
        os.replace(tmp, target)
    except BaseException as exc:  # KeyboardInterrupt too: leave no partial file behind
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise OutputError(os_error_message(exc), path=str(path)) from exc
        raise


def atomic_write_text(path: str | os.PathLike[str], text: str, encoding: str = "utf-8") -> None:
    """Text version of :func:`atomic_write_bytes`."""
    atomic_write_bytes(path, text.encode(encoding))


def write_through(path: str | os.PathLike[str], text: str) -> None:
    """Write into an existing FIFO or device (``--force``): it cannot be replaced by a rename."""
    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        raise OutputError(os_error_message(exc), path=str(path)) from exc


#: Top-level JSON events parsed before falling back to a plain byte search: Kineto writes its
#: few metadata keys first, so a trace is recognized in microseconds; a big non-trace document
#: (a saved study) is not walked event by event in Python.
_PARSE_EVENTS = 100_000
_KEY = b'"traceEvents"'


def _first_keys(stream: object) -> bool | None:
    """Does this JSON stream look like a Kineto trace (top-level ``traceEvents``, or an array
    of events with ``ph``)? None when undecided within :data:`_PARSE_EVENTS` events."""
    import ijson

    events = ijson.parse(stream, use_float=True)
    first = next(events, None)
    if first is None:
        return False
    _, event, _ = first
    if event not in ("start_map", "start_array"):
        return False
    want = ("", "map_key", "traceEvents") if event == "start_map" else ("item", "map_key", "ph")
    for n, (prefix, event, value) in enumerate(events):
        if (prefix, event, value) == want:
            return True
        if (prefix == "" and event in ("end_map", "end_array")) or (
            want[0] == "item" and prefix == "item" and event == "end_map"
        ):
            return False
        if n >= _PARSE_EVENTS:
            return None
    return False


def _contains_key(stream: Any) -> bool:
    """Whether ``"traceEvents"`` occurs anywhere in the stream (chunked byte search)."""
    tail = b""
    while chunk := stream.read(8 << 20):
        if _KEY in tail + chunk:
            return True
        tail = chunk[-len(_KEY) :]
    return False


def is_trace_file(fd: int) -> bool:
    """Whether the open regular file ``fd`` holds a Kineto trace (plain or gzip JSON).

    A gzip file that cannot be read is taken as a trace: without proof it is not one, it is
    not replaced without ``--force``. A document too long to decide by parsing its top level
    is a trace when ``"traceEvents"`` appears anywhere in it.
    """
    import ijson

    with os.fdopen(os.dup(fd), "rb") as raw:
        gz = raw.read(2) == b"\x1f\x8b"

        def stream() -> Any:
            raw.seek(0)
            return gzip.GzipFile(fileobj=raw) if gz else raw

        try:
            verdict = _first_keys(stream())
            return _contains_key(stream()) if verdict is None else verdict
        except (ijson.JSONError, ValueError, EOFError, zlib.error, OSError, RecursionError):
            if gz:
                return True
            raw.seek(0)
            return _KEY in raw.read(1 << 20)


def _input_folders(inputs: Iterable[str | os.PathLike[str]]) -> set[Path]:
    folders: set[Path] = set()
    for item in inputs:
        p = Path(item).resolve()
        if p.is_dir():
            folders.add(p)
            folders.update(d for d in p.rglob("*") if d.is_dir())
        else:
            folders.add(p.parent)
    return folders


def _existing_kind(target: Path) -> str | None:
    """What is at ``target`` that -o must not replace silently (None: nothing or a plain
    non-trace file)."""
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return None
    except OSError as exc:
        message = f"cannot check the output: {exc.strerror or exc}"
        raise OutputError(message, path=str(target)) from exc
    if stat.S_ISLNK(st.st_mode):
        return "symlink"
    if stat.S_ISDIR(st.st_mode):
        return "directory"
    if not stat.S_ISREG(st.st_mode):
        return "special"
    if target.name.lower().endswith(_TRACE_SUFFIXES):
        return "trace"
    try:
        fd = os.open(target, _SNIFF_OPEN)
    except OSError:
        return None  # unreadable: the write itself will say why if it fails
    try:
        return "trace" if is_trace_file(fd) else None
    finally:
        os.close(fd)


def check_output_path(
    out: str | os.PathLike[str], inputs: Iterable[str | os.PathLike[str]], force: bool
) -> None:
    """Raise :class:`UsageError` when ``out`` would replace something it must not.

    Refused without ``force``: an input file, an existing trace, a symlink, a FIFO, device or
    socket, and a path in a folder of input traces. A directory is refused even with ``force``.
    """
    target = Path(out)
    kind = _existing_kind(target)
    if kind == "directory":
        raise UsageError("is a directory, not a file", path=str(out))
    if force:
        return
    if kind == "symlink":
        raise UsageError(
            "refusing to write through a symlink (use --force to write to its target)",
            path=str(out),
        )
    if kind == "special":
        raise UsageError(
            "refusing to write to something that is not a regular file (a FIFO or a device; "
            "use --force to write through it)",
            path=str(out),
        )
    resolved = target.resolve()
    inputs = list(inputs)
    if any(resolved == Path(i).resolve() for i in inputs):
        raise UsageError(
            "refusing to write over an input file (use --force to overwrite)", path=str(out)
        )
    if kind == "trace":
        raise UsageError(
            "refusing to write over an existing trace file (use --force to overwrite)",
            path=str(out),
        )
    if resolved.parent in _input_folders(inputs):
        raise UsageError(
            "refusing to write into a folder of input traces (use --force, or another folder)",
            path=str(out),
        )


def write_output(out: str, text: str) -> None:
    """Write a report to ``out`` (after :func:`check_output_path`): atomically for a regular
    path, to a symlink's target and through a FIFO or device when ``--force`` allowed them."""
    real = os.path.realpath(out) if os.path.islink(out) else out
    try:
        special = not stat.S_ISREG(os.stat(real).st_mode)
    except OSError:
        special = False
    if special:
        write_through(real, text)
    else:
        atomic_write_text(real, text)
