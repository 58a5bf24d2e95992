"""``tracescale report doc.json``: re-render a saved study or comparison, without the traces."""

from __future__ import annotations

import click

from tracescale.cli.options import emit, output_options, pick_format, table_style
from tracescale.cli.settings import CONTEXT


@click.command(
    epilog="Exit codes: 0 ok; 2 usage; 3 not a study or compare document; 4 no such file; "
    "5 output not written.",
    context_settings=CONTEXT,
)
@click.argument("study", type=click.Path())  # read_json refuses a folder: exit 3, one line
@output_options
def report(study: str, fmt: str | None, output: str | None, force: bool) -> None:
    """Render a document saved with `analyze` or `compare` `--format json -o doc.json`."""
    from tracescale import api
    from tracescale.comparison.document import (
        checked_compare_document,
        is_compare_document,
        read_json,
    )

    fmt = pick_format(fmt, output)
    doc = read_json(study)
    style = table_style(output)
    if is_compare_document(doc):
        comparison = api.Comparison(doc=checked_compare_document(doc, study))
        text = comparison.render(fmt, **style)
    else:
        text = api.load(study).render(fmt, **style)
    emit(text, output, inputs=[], force=force)
