"""``tracescale annotate PATH -o OUT_DIR``: copies of the traces with the attribution as tracks."""

from __future__ import annotations

import click

from tracescale.cli.settings import CONTEXT
from tracescale.text import clean


def plural(n: int, noun: str) -> str:
    """``n`` with ``noun`` in the number it takes: "1 step", "2 steps"."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


@click.command(
    epilog="Exit codes: 0 ok; 2 usage (e.g. -o would replace a trace); 3 invalid trace data "
    "(with --strict: any bad rank file); 4 no traces found; 5 output not written.",
    context_settings=CONTEXT,
)
@click.argument("path", type=click.Path())
@click.option(
    "--output",
    "-o",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Folder for the annotated copies (PATH's layout is mirrored there).",
)
@click.option(
    "--rules", type=click.Path(dir_okay=False), help="TOML file of name rules, as for analyze."
)
@click.option("--jobs", "-j", type=int, help="Worker processes (default: the cores).")
@click.option("--cache-dir", type=click.Path(file_okay=False), help="Per-rank result cache.")
@click.option("--no-cache", is_flag=True, help="Do not read or write the cache.")
@click.option(
    "--memory-budget",
    type=float,
    default=8.0,
    show_default=True,
    metavar="GB",
    help="Largest decompressed trace file accepted.",
)
@click.option("--force", is_flag=True, help="Replace earlier annotated copies in OUT_DIR.")
@click.option(
    "--strict", is_flag=True, help="Fail (exit 3) on any bad rank file instead of warning."
)
@click.option("--quiet", "-q", is_flag=True, help="Only errors and warnings.")
def annotate(
    path: str,
    out_dir: str,
    rules: str | None,
    jobs: int | None,
    cache_dir: str | None,
    no_cache: bool,
    memory_budget: float,
    force: bool,
    strict: bool,
    quiet: bool,
) -> None:
    """Write a copy of each rank file under PATH with two added tracks for trace viewers.

    Open a copy in Perfetto (ui.perfetto.dev) or chrome://tracing: the process "tracescale
    attribution (rank R)" has a "categories" track (each instant of each step under the
    category it counts toward; waits for a late rank name the collective and the cause in their
    args) and a "steps" track (each step's breakdown in seconds). The copies still load in HTA
    and analyze exactly like the originals; the inputs are only read.
    """
    from tracescale.annotate import annotate as run_annotate
    from tracescale.cli.options import emit

    options: dict[str, object] = {"no_cache": no_cache}
    if cache_dir:
        options["cache_dir"] = cache_dir
    written, warnings = run_annotate(
        path,
        out_dir,
        rules=rules,
        jobs=jobs,
        force=force,
        memory_budget=int(memory_budget * 1e9),
        strict=strict,
        **options,
    )
    for w in warnings:
        click.echo(f"tracescale: warning: {clean(w)}", err=True)
    if quiet:
        return
    lines = [
        f"{clean(t.output)}: rank {t.rank} of {t.world_size}, "
        f"{plural(t.steps, 'step')}, {plural(t.slices, 'category slice')}"
        for t in written
    ]
    lines.append(f"{plural(len(written), 'annotated trace')} in {clean(out_dir)}")
    emit("\n".join(lines) + "\n", None, inputs=[], force=False)
