"""``tracescale report study.json``: re-render a saved study in any format, without the traces."""

from __future__ import annotations

import click

from tracescale.cli.analyze import pick_format
from tracescale.cli.options import emit
from tracescale.cli.settings import CONTEXT
from tracescale.report import FORMATS


@click.command(
    epilog="Exit codes: 0 ok; 2 usage; 3 not a study document.", context_settings=CONTEXT
)
@click.argument("study", type=click.Path(dir_okay=False))
@click.option(
    "--format",
    "-f",
    "fmt",
    type=click.Choice(list(FORMATS)),
    help="table, json, markdown or html; guessed from -o.",
)
@click.option("--output", "-o", type=click.Path(dir_okay=False), help="Write the report here.")
@click.option("--force", is_flag=True, help="Allow -o to overwrite files next to the inputs.")
def report(study: str, fmt: str | None, output: str | None, force: bool) -> None:
    """Render a study saved with `analyze --format json -o study.json`."""
    from tracescale import api

    doc = api.load(study)
    emit(doc.render(pick_format(fmt, output)), output, inputs=[], force=force)
