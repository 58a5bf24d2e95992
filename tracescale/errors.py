"""One error root for the whole tool: every failure the user can cause carries its exit code.

The CLI catches :class:`TracescaleError` and prints ``tracescale: error: FILE: what is wrong``
on one line; anything else is a bug: one line ``internal error`` and exit 70 (a traceback only
with ``--debug``). Every code here is listed in the README's exit-code table.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_USAGE = 2
EXIT_INVALID_TRACE = 3
EXIT_NO_TRACES = 4
EXIT_OUTPUT = 5
EXIT_SCRIPT_FAILED = 6  # sweep: the profiled training script did not produce its traces
EXIT_INTERRUPTED = 130
EXIT_INTERNAL = 70  # a bug in tracescale, never an expected failure (BSD EX_SOFTWARE)


class TracescaleError(Exception):
    """Root of all expected failures; ``exit_code`` is what the CLI exits with."""

    exit_code: int = EXIT_USAGE

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.path = path

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class UsageError(TracescaleError):
    """Bad command-line usage or option values."""

    exit_code = EXIT_USAGE


class InvalidTraceError(TracescaleError):
    """A file is not a readable Kineto trace (or a run/folder is inconsistent)."""

    exit_code = EXIT_INVALID_TRACE


class NoTracesError(TracescaleError):
    """A path names nothing to read: it is missing, or a folder without trace files."""

    exit_code = EXIT_NO_TRACES


class OutputError(TracescaleError):
    """An output could not be written: missing folder, full disk, read-only, permission."""

    exit_code = EXIT_OUTPUT
