"""Rules files: defaults load, user rules go first, bad files are usage errors."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from tracescale.classify.rules import Rule, classify_events, load_rules
from tracescale.errors import UsageError


def test_defaults_and_digest(tmp_path: Path) -> None:
    base = load_rules()
    assert base.host and base.device
    user = tmp_path / "r.toml"
    user.write_text("[[host]]\npattern = '^my_eval$'\ntarget = 'reduction'\n")
    mine = load_rules(str(user))
    assert mine.host[0].pattern.pattern == "^my_eval$"
    assert mine.host[1:] == base.host
    assert mine.digest != base.digest


@pytest.mark.parametrize(
    "text,match",
    [
        ("[[host]\n", "invalid rules TOML"),
        ("host = 3\n", "array of tables"),
        ("[[host]]\npattern = 'x'\n", "needs pattern and target"),
        ("[[host]]\npattern = 'x'\ntarget = 'memcpy'\n", "unknown host target"),
        ("[[device]]\npattern = 'x'\ntarget = 'dataloader'\n", "unknown device target"),
        ("[[host]]\npattern = '('\ntarget = 'sync'\n", "bad regex"),
    ],
)
def test_bad_rules_files(tmp_path: Path, text: str, match: str) -> None:
    user = tmp_path / "r.toml"
    user.write_text(text)
    with pytest.raises(UsageError, match=match):
        load_rules(str(user))


def test_missing_rules_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read rules file"):
        load_rules(str(tmp_path / "absent.toml"))


def test_step_names_are_one_name_to_the_rules_per_category() -> None:
    """A million ProfilerStep#N names were a million regex walks: the rules now see every
    plain step name of a category as the first one in the table; any other name is matched
    on its own (``ProfilerStep#2x`` is not a step name)."""
    strings = ("ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#2x", "cpu", "gpu")
    rules = (Rule(re.compile(r"#2"), None, "sync"), Rule(re.compile(r"#1$"), "gpu", "dataloader"))
    name = np.array([0, 1, 2, 0, 1], dtype=np.int32)
    cat = np.array([3, 3, 3, 4, 4], dtype=np.int32)
    got = classify_events(rules, ("dataloader", "sync"), strings, name, cat)
    assert got.tolist() == [-1, -1, 1, 0, 0]
