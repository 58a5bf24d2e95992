"""The CLI reference (docs/cli.md) generated from click's own help, so it cannot drift.

``python -m tracescale.cli.reference > docs/cli.md``; a test checks the file is current.
"""

from __future__ import annotations

import click

from tracescale.cli.main import cli


def _help(command: click.Command, name: str, parent: click.Context | None) -> str:
    # make_context applies the group's context_settings (-h/--help), as the real CLI does.
    ctx = command.make_context(name, [], parent=parent, resilient_parsing=True)
    ctx.terminal_width = 100
    with ctx:
        return command.get_help(ctx)


def cli_reference() -> str:
    """Markdown with ``--help`` of the group and of every subcommand."""
    root = cli.make_context("tracescale", [], resilient_parsing=True)
    parts = [
        "# tracescale command-line reference",
        "",
        "Generated from the commands' own `--help` by `python -m tracescale.cli.reference`.",
        "",
        "```",
        _help(cli, "tracescale", None),
        "```",
    ]
    for name in cli.list_commands(root):
        command = cli.get_command(root, name)
        if command is None:
            continue
        parts += ["", f"## tracescale {name}", "", "```", _help(command, name, root), "```"]
    return "\n".join(parts) + "\n"


if __name__ == "__main__":
    click.echo(cli_reference(), nl=False)
