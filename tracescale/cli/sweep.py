"""``tracescale sweep``: run a training script under torchrun at several process counts.

A thin layer over :func:`tracescale.capture.run_sweep`; progress goes to stderr so stdout
stays clean. Runnable on its own as ``python -m tracescale.cli.sweep``.
"""

from __future__ import annotations

import os
import sys

import click

from tracescale.atomic import os_error_message
from tracescale.capture.sweep import parse_nproc, run_sweep
from tracescale.cli.options import FiniteFloat
from tracescale.cli.settings import CONTEXT
from tracescale.errors import (
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    OutputError,
    TracescaleError,
    UsageError,
)
from tracescale.text import clean


def _echo_err(message: str) -> None:
    click.echo(f"tracescale sweep: {clean(message)}", err=True)


@click.command(
    "sweep",
    epilog="Exit codes: 0 ok; 2 usage (bad option, missing script); 5 output not written; "
    "6 the script failed, timed out or wrote no traces, or torch is missing.",
    context_settings={
        **CONTEXT,
        "ignore_unknown_options": True,
        "allow_interspersed_args": False,
    },
)
@click.option("--nproc", default="1,2,4", show_default=True, help="Process counts, e.g. 1,2,4.")
@click.option(
    "--out",
    required=True,
    type=click.Path(file_okay=False),
    help="Study folder: one ws{N}/ subfolder per process count.",
)
@click.option(
    "--timeout", type=FiniteFloat(), default=None, help="Seconds allowed per run (default none)."
)
@click.option("--python", "python", default=None, help="Python that runs torchrun (default: this).")
@click.option("--overwrite", is_flag=True, help="Replace traces already in OUT/ws{N}/.")
@click.option("--show-output", is_flag=True, help="Let the script's output through (else hidden).")
@click.argument("script", type=click.Path(dir_okay=False))
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
def sweep(
    nproc: str,
    out: str,
    timeout: float | None,
    python: str | None,
    overwrite: bool,
    show_output: bool,
    script: str,
    script_args: tuple[str, ...],
) -> None:
    """Profile SCRIPT under torchrun at each --nproc count into OUT/ws{N}/.

    Example: tracescale sweep --nproc 1,2,4 --out runs/ddp -- examples/ddp_cpu.py --steps 7

    SCRIPT must profile with tracescale.capture.Capture (it reads $TRACESCALE_OUT).
    """
    try:
        runs = run_sweep(
            script,
            script_args,
            nproc=parse_nproc(nproc),
            out=out,
            timeout=timeout,
            python=python,
            overwrite=overwrite,
            passthrough=show_output,
            progress=_echo_err,
        )
    except OSError as exc:
        where = str(exc.filename or out)
        if os.path.abspath(where).startswith(os.path.abspath(out)):
            raise OutputError(os_error_message(exc), path=where) from exc
        raise UsageError(f"cannot run: {exc.strerror or exc}", path=where) from exc
    total = sum(len(r.trace_files) for r in runs)
    _echo_err(f"done: {total} trace(s) for nproc={','.join(str(r.nproc) for r in runs)} in {out}")


def main(argv: list[str] | None = None) -> int:
    """Standalone entry: turn TracescaleError into the one-line message and its exit code."""
    try:
        sweep.main(args=argv, prog_name="tracescale sweep", standalone_mode=False)
    except TracescaleError as exc:
        click.echo(f"tracescale: error: {clean(exc)}", err=True)
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return EXIT_USAGE if exc.exit_code == 2 else exc.exit_code
    except (click.Abort, KeyboardInterrupt):
        click.echo("tracescale: interrupted", err=True)
        return EXIT_INTERRUPTED
    return 0


if __name__ == "__main__":
    sys.exit(main())
