"""Shared test helpers."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest


def require_module(name: str, reason: str) -> ModuleType:
    """Import an optional dependency, or skip: but fail when ``TRACESCALE_REQUIRE_ALL=1`` (CI).

    CI installs every extra, so a missing module there is a broken setup, not a reason to
    silently skip the tests that need it.
    """
    if os.environ.get("TRACESCALE_REQUIRE_ALL") == "1":
        try:
            return importlib.import_module(name)
        except ImportError as exc:
            pytest.fail(f"TRACESCALE_REQUIRE_ALL=1 but {name} is missing: {reason} ({exc})")
    return pytest.importorskip(name, reason=reason)
