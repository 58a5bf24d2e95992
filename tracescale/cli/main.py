"""The ``tracescale`` command group and the one place errors become exit codes.

Subcommands live in their own modules and are registered here. Any :class:`TracescaleError`
becomes ``tracescale: error: FILE: what is wrong`` on stderr and its exit code; ``--debug``
shows the traceback instead. Global options (``--debug``) are accepted before or after the
subcommand, because error messages tell the user to "rerun with --debug" and they add it last.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any

import click

from tracescale import __version__
from tracescale.cli.settings import HELP_OPTIONS
from tracescale.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_USAGE, TracescaleError
from tracescale.text import clean

_SUBCOMMANDS = {
    "inspect": "tracescale.cli.inspect",
    "analyze": "tracescale.cli.analyze",
    "report": "tracescale.cli.report",
    "compare": "tracescale.cli.compare",
    "simulate": "tracescale.cli.simulate",
    "sweep": "tracescale.cli.sweep",
    "annotate": "tracescale.cli.annotate",
}

#: Each subcommand's one-line summary, so ``tracescale --help`` lists them without importing
#: them (and pandas, scipy, numba behind them); a test holds these equal to the commands' own.
SUMMARIES = {
    "inspect": "What the traces under PATH contain: ranks, steps, GPUs, collectives, warnings.",
    "analyze": "Where each step's time goes and how far the job scales, for the traces under PATH.",
    "report": "Render a document saved with `analyze` or `compare` `--format json -o doc.json`.",
    "compare": "Compare BEFORE and AFTER (trace folders or saved study JSON), run by run.",
    "simulate": "Write PyTorch Profiler (Kineto) traces of a simulated data-parallel training job"
    " at several GPU counts, one .pt.trace.json.gz per rank in OUT/ws{N}/, plus OUT/truth.json"
    " with the exact time per category per step, the serial fraction and the true speedup at"
    " any N.",
    "sweep": "Profile SCRIPT under torchrun at each --nproc count into OUT/ws{N}/.",
    "annotate": "Write a copy of each rank file under PATH with two added tracks for trace"
    " viewers.",
}

EPILOG = """Exit codes: 0 ok; 1 regression found by compare --fail-on-regression;
2 usage error; 3 invalid input; 4 nothing to read (missing path, no traces); 5 output not
written (missing folder, full disk, read-only, permission); 6 sweep: the training script
failed; 70 internal error (a bug); 130 interrupted."""


def _short_help(summary: str, limit: int) -> str:
    """The summary cut as click cuts a command's help for the command list."""
    return click.Command(None, help=summary).get_short_help_str(limit)


class _LazyGroup(click.Group):
    """Imports a subcommand's module only when it runs, so `tracescale --help` stays fast."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list from :data:`SUMMARIES`: listing imports no subcommand."""
        names = sorted(
            name
            for name in _SUBCOMMANDS
            if importlib.util.find_spec(_SUBCOMMANDS[name]) is not None
        )
        if not names:
            return
        limit = formatter.width - 6 - max(len(n) for n in names)
        rows = [(n, _short_help(SUMMARIES.get(n, ""), limit)) for n in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(name for name in _SUBCOMMANDS if self.get_command(ctx, name) is not None)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module_name = _SUBCOMMANDS.get(cmd_name)
        if module_name is None:
            return None
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                return None
            raise
        command = getattr(module, cmd_name, None)
        if not isinstance(command, click.Command):
            return None
        # Same -h/--help everywhere, also when a module's command runs on its own.
        command.context_settings.setdefault("help_option_names", list(HELP_OPTIONS))
        if not any(p.name == "debug" for p in command.params):
            command.params.append(_debug_option())
        return command


def _set_debug(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.find_root().ensure_object(dict)["debug"] = True


def _debug_option() -> click.Option:
    """The group's --debug, repeated on each subcommand (it only sets the root's flag)."""
    return click.Option(
        ["--debug"],
        is_flag=True,
        expose_value=False,
        callback=_set_debug,
        help="Show tracebacks instead of one-line errors (also before the subcommand).",
    )


def _wants_debug(argv: list[str]) -> bool:
    """--debug anywhere before a ``--`` (what follows it belongs to a training script)."""
    head = argv[: argv.index("--")] if "--" in argv else argv
    return "--debug" in head


@click.group(
    cls=_LazyGroup, epilog=EPILOG, context_settings={"help_option_names": list(HELP_OPTIONS)}
)
@click.version_option(__version__, prog_name="tracescale")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Where each training step's time goes, and how far the job scales.

    Reads PyTorch Profiler (Kineto) traces taken at several GPU counts.
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


def usage_line(exc: click.UsageError) -> str:
    """A usage error as one line like every other error, pointing at the command's --help
    (click's own four-line block would break the one-line-per-error rule)."""
    where = exc.ctx.command_path if exc.ctx is not None else "tracescale"
    return f"tracescale: error: {clean(exc.format_message())} (see '{where} --help')"


def main(argv: list[str] | None = None) -> Any:
    """Console entry point: run the group, turning expected failures into exit codes."""
    debug = _wants_debug(list(argv if argv is not None else sys.argv[1:]))
    try:
        return cli.main(args=argv, prog_name="tracescale", standalone_mode=False)
    except TracescaleError as exc:
        if debug:
            raise
        click.echo(f"tracescale: error: {clean(exc)}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("tracescale: interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except click.exceptions.NoArgsIsHelpError as exc:
        exc.show()  # a bare `tracescale` or `tracescale COMMAND`: the help, as asked
        sys.exit(EXIT_USAGE)
    except click.UsageError as exc:
        click.echo(usage_line(exc), err=True)
        sys.exit(EXIT_USAGE)
    except click.ClickException as exc:
        click.echo(f"tracescale: error: {clean(exc.format_message())}", err=True)
        sys.exit(EXIT_USAGE if exc.exit_code == 2 else exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("tracescale: interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except Exception as exc:  # a bug: still one line unless --debug
        if debug:
            raise
        click.echo(
            f"tracescale: internal error: {type(exc).__name__}: {clean(exc)} (rerun with --debug)",
            err=True,
        )
        sys.exit(EXIT_INTERNAL)
