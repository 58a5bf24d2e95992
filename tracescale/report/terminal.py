"""What the terminal asks for: its width and whether it wants colour.

Kept apart from the table renderer (which loads rich) so the CLI can settle the layout of
``--format json``/``html``/``markdown`` output, or of a file, without importing it.
"""

from __future__ import annotations

import os
import sys
from typing import TextIO

DEFAULT_WIDTH = 120  # files, pipes and notebooks: no terminal to ask
MIN_WIDTH = 30


def terminal_width(stream: TextIO | None = None) -> int:
    """The width to lay out for: $COLUMNS, else the terminal's, else :data:`DEFAULT_WIDTH`."""
    env = os.environ.get("COLUMNS", "")
    if env.isdigit() and int(env) > 0:
        return max(int(env), MIN_WIDTH)
    stream = stream if stream is not None else sys.stdout
    try:
        if stream.isatty():
            return max(os.get_terminal_size(stream.fileno()).columns, MIN_WIDTH)
    except (OSError, ValueError, AttributeError):
        pass
    return DEFAULT_WIDTH


def wants_color(stream: TextIO | None = None) -> bool:
    """Colour only on a terminal, never with $NO_COLOR (https://no-color.org) or TERM=dumb."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    if os.environ.get("TERM") == "dumb":
        return False
    stream = stream if stream is not None else sys.stdout
    try:
        return bool(stream.isatty())
    except (ValueError, AttributeError):
        return False
