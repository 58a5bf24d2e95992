"""Run one training script under torchrun at several process counts: one study folder.

For each N, ``python -m torch.distributed.run --standalone --nproc_per_node N script args``
runs with ``$TRACESCALE_OUT`` pointing at the study folder, so a script that profiles with
:class:`tracescale.capture.Capture` writes ``OUT/ws{N}/`` with one trace per rank. Nothing
here prints: the child's output is captured (or passed through when asked) and failures are
:class:`SweepError` subclasses with a one-line message.
"""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tracescale.capture.profiler import OUT_ENV, world_out_dir
from tracescale.errors import EXIT_SCRIPT_FAILED, TracescaleError, UsageError

TRACE_SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz")
_REPO_ROOT = Path(__file__).resolve().parents[2]


class SweepError(TracescaleError):
    """A sweep could not produce its traces: the script failed, timed out or lacks torch.

    Its own exit code, not a usage error: a CI job tells "my training script broke" from
    "I called tracescale wrongly" by the code alone.
    """

    exit_code = EXIT_SCRIPT_FAILED


class TorchMissingError(SweepError):
    """The Python that runs torchrun has no torch."""


class ScriptFailedError(SweepError):
    """The training script exited non-zero (or wrote no traces) at some process count."""

    def __init__(self, message: str, *, nproc: int, returncode: int, output: str = "") -> None:
        super().__init__(message)
        self.nproc = nproc
        self.returncode = returncode
        self.output = output


class SweepTimeoutError(SweepError):
    """One run took longer than the timeout and was killed."""


@dataclass(frozen=True)
class SweepRun:
    """What one torchrun invocation produced."""

    nproc: int
    out_dir: Path
    trace_files: tuple[Path, ...]
    seconds: float
    command: tuple[str, ...]


def parse_nproc(text: str) -> tuple[int, ...]:
    """``"1,2,4"`` -> ``(1, 2, 4)``: positive, distinct, in the order given."""
    values: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            n = int(part)
        except ValueError:
            raise UsageError(f"--nproc: {part!r} is not an integer (expected e.g. 1,2,4)") from None
        if n < 1:
            raise UsageError(f"--nproc: process counts must be >= 1, got {n}")
        if n in values:
            raise UsageError(f"--nproc: {n} is listed twice")
        values.append(n)
    if not values:
        raise UsageError("--nproc: give at least one process count (e.g. 1,2,4)")
    return tuple(values)


def build_command(
    nproc: int, script: str | os.PathLike[str], args: Sequence[str] = (), python: str | None = None
) -> list[str]:
    """The torchrun command line for one process count (single node, local rendezvous)."""
    return [
        python or sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        str(script),
        *args,
    ]


def sweep_env(out: str | os.PathLike[str], base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Child environment: the study folder, one OpenMP thread per rank, tracescale importable.

    ``OMP_NUM_THREADS=1`` keeps ranks from fighting over cores (torchrun would set it anyway,
    with a warning); the repository root goes on ``PYTHONPATH`` so an uninstalled checkout's
    scripts can ``import tracescale``.
    """
    env = dict(os.environ if base is None else base)
    env[OUT_ENV] = str(Path(out).resolve())
    env["OMP_NUM_THREADS"] = "1"
    env.setdefault("PYTHONUNBUFFERED", "1")
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(_REPO_ROOT) not in paths:
        env["PYTHONPATH"] = os.pathsep.join([str(_REPO_ROOT), *paths])
    return env


def _trace_files(folder: Path) -> tuple[Path, ...]:
    if not folder.is_dir():
        return ()
    return tuple(sorted(p for p in folder.iterdir() if p.name.endswith(TRACE_SUFFIXES)))


def _check_torch(python: str | None) -> None:
    if python is None or Path(python) == Path(sys.executable):
        if importlib.util.find_spec("torch") is None:
            raise TorchMissingError(
                "tracescale sweep needs PyTorch in this Python: install the 'capture' extra "
                "(pip install 'tracescale[capture]')"
            )
        return
    probe = subprocess.run(
        [python, "-c", "import torch.distributed.run"], capture_output=True, check=False
    )
    if probe.returncode != 0:
        raise TorchMissingError(f"{python} cannot import torch.distributed.run: install torch")


_EXC_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Interrupt)\b")


def _last_error_line(output: str) -> str:
    """The most telling line of a failed run: the script's own last exception, if any.

    torchrun ends every failure with its own log lines and ``ChildFailedError`` report; they
    say nothing the exit code does not, so only the output before them is searched.
    """
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    cut = next((i for i, ln in enumerate(lines) if "distributed/elastic/" in ln), len(lines))
    own = [re.sub(r"^\[(?:default)?rank\d+\]:\s*", "", ln) for ln in lines[:cut]]
    for line in reversed(own):
        if _EXC_LINE.match(line):
            return line
    return own[-1] if own else "no error message (rerun with --show-output)"


def _run_one(
    cmd: list[str], env: dict[str, str], timeout: float | None, passthrough: bool
) -> tuple[int, str]:
    """Run torchrun in its own session so a timeout can kill every rank with it."""
    proc = subprocess.Popen(
        cmd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=None if passthrough else subprocess.PIPE,
        stderr=None if passthrough else subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return proc.returncode, output or ""


def run_sweep(
    script: str | os.PathLike[str],
    args: Sequence[str] = (),
    *,
    nproc: Sequence[int],
    out: str | os.PathLike[str],
    timeout: float | None = None,
    python: str | None = None,
    overwrite: bool = False,
    passthrough: bool = False,
    env: Mapping[str, str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[SweepRun]:
    """Run ``script`` at each process count; return one :class:`SweepRun` per count.

    Refuses to mix new traces with old ones: a ``ws{N}`` folder that already holds traces is an
    error unless ``overwrite`` (which deletes those trace files first). ``timeout`` is per run,
    in seconds. ``progress`` receives one-line messages (the CLI echoes them to stderr).
    """
    script_path = Path(script)
    if not script_path.is_file():
        raise UsageError(f"training script not found: {script}")
    counts = tuple(nproc)
    if not counts:
        raise UsageError("--nproc: give at least one process count")
    if timeout is not None and timeout <= 0:
        raise UsageError(f"--timeout must be positive, got {timeout}")
    _check_torch(python)
    child_env = sweep_env(out, env)
    for n in counts:
        existing = _trace_files(world_out_dir(out, n))
        if existing and not overwrite:
            raise UsageError(
                f"{world_out_dir(out, n)} already holds {len(existing)} trace(s): "
                "use another --out or --overwrite"
            )
    runs: list[SweepRun] = []
    for n in counts:
        folder = world_out_dir(out, n)
        for old in _trace_files(folder):
            old.unlink()
        cmd = build_command(n, script_path, args, python)
        if progress:
            progress(f"nproc={n}: {' '.join(cmd)}")
        start = time.perf_counter()
        try:
            code, output = _run_one(cmd, child_env, timeout, passthrough)
        except subprocess.TimeoutExpired:
            raise SweepTimeoutError(
                f"{script_path.name} at nproc={n} ran past --timeout {timeout:g}s and was killed"
            ) from None
        seconds = time.perf_counter() - start
        if code != 0:
            if "No module named 'torch'" in output or "No module named torch" in output:
                raise TorchMissingError(f"torch is missing in the run at nproc={n}: install it")
            raise ScriptFailedError(
                f"{script_path.name} failed at nproc={n} (exit code {code}): "
                f"{_last_error_line(output)}",
                nproc=n,
                returncode=code,
                output=output,
            )
        traces = _trace_files(folder)
        if len(traces) != n:
            raise ScriptFailedError(
                f"{script_path.name} at nproc={n} wrote {len(traces)} trace(s) to {folder}, "
                f"expected {n} (one per rank): does it profile with tracescale.capture.Capture "
                "and run the whole profiler schedule?",
                nproc=n,
                returncode=code,
                output=output,
            )
        runs.append(SweepRun(n, folder, traces, seconds, tuple(cmd)))
        if progress:
            progress(f"nproc={n}: {len(traces)} trace(s) in {folder} ({seconds:.1f}s)")
    return runs
