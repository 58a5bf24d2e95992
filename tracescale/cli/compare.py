"""``tracescale compare BEFORE AFTER``: did a change make steps faster, and does it scale better."""

from __future__ import annotations

import sys
from typing import Any

import click

from tracescale.cli.options import (
    FiniteFloat,
    analysis_kwargs,
    analysis_options,
    emit,
    output_options,
    pick_format,
    table_style,
)
from tracescale.cli.settings import CONTEXT


@click.command(
    context_settings=CONTEXT,
    epilog="Exit codes: 0 ok; 1 a matched run regressed by more than --fail-on-regression; "
    "2 usage; 3 invalid trace data, or a gate set and a run not comparable (NaN, missing or zero "
    "step time on one side: no data to gate on); 4 no traces found; 5 output not written.",
)
@click.argument("before", type=click.Path())
@click.argument("after", type=click.Path())
@output_options
@click.option(
    "--fail-on-regression",
    "fail_pct",
    type=FiniteFloat(allow_zero=True),
    metavar="PCT",
    help="Exit 1 when a matched run is significantly slower by more than PCT %.",
)
@click.option(
    "--match",
    type=click.Choice(["size", "any"]),
    default="size",
    show_default=True,
    help="Pair runs by equal world size, or 'any': in world-size order whatever N is "
    "(with a warning; step times and categories compare, scaling does not). Two single "
    "runs are always compared.",
)
@analysis_options
def compare(
    before: str,
    after: str,
    fmt: str | None,
    output: str | None,
    force: bool,
    fail_pct: float | None,
    match: str,
    **options: Any,
) -> None:
    """Compare BEFORE and AFTER (trace folders or saved study JSON), run by run."""
    from tracescale import api

    kwargs = analysis_kwargs(options)
    fmt = pick_format(fmt, output)
    comparison = api.compare(before, after, fail_on_regression_pct=fail_pct, match=match, **kwargs)
    emit(comparison.render(fmt, **table_style(output)), output, inputs=[before, after], force=force)
    code = comparison.exit_code(fail_pct)
    if code:
        sys.exit(code)
