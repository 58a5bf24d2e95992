"""``tracescale report study.json``: re-render a saved study in any format, without the traces."""

from __future__ import annotations

import click

from tracescale.cli.options import emit, output_options, pick_format, table_style
from tracescale.cli.settings import CONTEXT


@click.command(
    epilog="Exit codes: 0 ok; 2 usage; 3 not a study document; 5 output not written.",
    context_settings=CONTEXT,
)
@click.argument("study", type=click.Path(dir_okay=False))
@output_options
def report(study: str, fmt: str | None, output: str | None, force: bool) -> None:
    """Render a study saved with `analyze --format json -o study.json`."""
    from tracescale import api

    fmt = pick_format(fmt, output)
    doc = api.load(study)
    emit(doc.render(fmt, **table_style(output)), output, inputs=[], force=force)
