"""The CLI reference (docs/cli.md) generated from click's own help, so it cannot drift.

``python -m tracescale.cli.reference > docs/cli.md``; a test checks the file is current.
"""

from __future__ import annotations

import click

from tracescale.cli.main import cli


def _help(command: click.Command, name: str, parent: click.Context | None) -> str:
    with click.Context(command, info_name=name, parent=parent, terminal_width=100) as ctx:
        return command.get_help(ctx)


def cli_reference() -> str:
    """Markdown with ``--help`` of the group and of every subcommand."""
    root = click.Context(cli, info_name="tracescale", terminal_width=100)
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
