"""``tracescale analyze PATH``: breakdown, scaling and projections of the studies under PATH."""

from __future__ import annotations

from typing import Any

import click

from tracescale.cli.options import (
    analysis_kwargs,
    analysis_options,
    emit,
    output_options,
    pick_format,
    show_progress,
    table_style,
)
from tracescale.cli.settings import CONTEXT


@click.command(
    epilog="Exit codes: 0 ok; 2 usage; 3 invalid trace data; 4 no traces found; "
    "5 output not written.",
    context_settings=CONTEXT,
)
@click.argument("path", type=click.Path())
@output_options
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
    emit(study.render(fmt, **table_style(output)), output, inputs=[path], force=force)
