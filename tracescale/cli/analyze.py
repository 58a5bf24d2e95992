"""``tracescale analyze PATH``: breakdown, scaling and projections of the studies under PATH."""

from __future__ import annotations

from typing import Any

import click

from tracescale.cli.options import analysis_kwargs, analysis_options, emit, show_progress
from tracescale.cli.settings import CONTEXT
from tracescale.report import FORMATS, guess_format


def pick_format(fmt: str | None, output: str | None) -> str:
    """Explicit --format, else guessed from -o's extension, else the terminal table."""
    if fmt:
        return fmt
    return guess_format(output) or "table"


@click.command(
    epilog="Exit codes: 0 ok; 2 usage; 3 invalid trace data; 4 no traces found.",
    context_settings=CONTEXT,
)
@click.argument("path", type=click.Path())
@click.option(
    "--format",
    "-f",
    "fmt",
    type=click.Choice(list(FORMATS)),
    help="table (default on a terminal), json, markdown or html; guessed from -o.",
)
@click.option("--output", "-o", type=click.Path(dir_okay=False), help="Write the report here.")
@click.option("--force", is_flag=True, help="Allow -o to overwrite files next to the traces.")
@analysis_options
def analyze(path: str, fmt: str | None, output: str | None, force: bool, **options: Any) -> None:
    """Where each step's time goes and how far the job scales, for the traces under PATH.

    PATH is a trace file, a run folder (rank files of one run), a study folder whose
    sub-folders are runs at different world sizes (ws1/, ws2/, ...), or a parent of studies.
    """
    from tracescale import api

    kwargs = analysis_kwargs(options)
    fmt = pick_format(fmt, output)
    study = api.analyze(path, show_progress=show_progress(options.get("quiet", False)), **kwargs)
    emit(study.render(fmt), output, inputs=[path], force=force)
