"""Settings every command shares, so `-h` works alike in the group and in each command."""

from __future__ import annotations

from typing import Any

HELP_OPTIONS = ("-h", "--help")
CONTEXT: dict[str, Any] = {"help_option_names": list(HELP_OPTIONS)}
