"""Outputs that are never half-written, and never written over a user's traces.

Every file tracescale writes goes to a temporary file in the destination folder (same file
system, so the rename is atomic) and is renamed into place; on any exception, Ctrl-C included,
the temporary file is removed and an existing destination is left untouched.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from tracescale.errors import UsageError

#: File names that look like trace inputs; ``-o`` refuses to replace them without ``--force``.
_TRACE_SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz", ".json.gz", ".trace.json")


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary sibling file and ``os.replace``."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:  # KeyboardInterrupt too: leave no partial file behind
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | os.PathLike[str], text: str, encoding: str = "utf-8") -> None:
    """Text version of :func:`atomic_write_bytes`."""
    atomic_write_bytes(path, text.encode(encoding))


def _looks_like_trace(path: Path) -> bool:
    name = path.name.lower()
    if name.endswith(_TRACE_SUFFIXES):
        return True
    if not path.is_file():
        return False
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    return head[:2] == b"\x1f\x8b" or b'"traceEvents"' in head


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


def check_output_path(
    out: str | os.PathLike[str], inputs: Iterable[str | os.PathLike[str]], force: bool
) -> None:
    """Raise :class:`UsageError` when ``out`` would replace a trace or land in an input folder.

    ``force`` lifts both checks (the write itself stays atomic). Outputs into a folder that is
    not an input's (or one of its sub-folders) are always allowed.
    """
    if force:
        return
    target = Path(out)
    resolved = target.resolve()
    inputs = list(inputs)
    if any(resolved == Path(i).resolve() for i in inputs):
        raise UsageError(
            "refusing to write over an input file (use --force to overwrite)", path=str(out)
        )
    if resolved.exists() and _looks_like_trace(resolved):
        raise UsageError(
            "refusing to write over an existing trace file (use --force to overwrite)",
            path=str(out),
        )
    if resolved.parent in _input_folders(inputs):
        raise UsageError(
            "refusing to write into a folder of input traces (use --force, or another folder)",
            path=str(out),
        )
