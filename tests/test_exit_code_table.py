"""README's exit-code table is complete: every code the CLI can exit with is a row, every
expected failure class carries one of them, and the help epilog names the same set."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import tracescale
from tracescale import errors
from tracescale.cli.main import EPILOG, main

ROOT = Path(__file__).resolve().parents[1]


def _readme_codes() -> set[int]:
    text = (ROOT / "README.md").read_text()
    table = text.split("### Exit codes", 1)[1].split("\n\n", 2)[1]
    return {int(m) for m in re.findall(r"^\| (\d+) \|", table, re.M)}


def _declared_codes() -> set[int]:
    return {v for k, v in vars(errors).items() if k.startswith("EXIT_")}


def _all_error_classes() -> list[type[errors.TracescaleError]]:
    for info in pkgutil.walk_packages(tracescale.__path__, "tracescale."):
        try:
            importlib.import_module(info.name)
        except ImportError:  # an optional extra; its errors are imported where they live
            continue
    found: list[type[errors.TracescaleError]] = []
    todo: list[type[errors.TracescaleError]] = [errors.TracescaleError]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return found


def test_readme_table_lists_exactly_the_declared_codes() -> None:
    assert _readme_codes() == _declared_codes() == {0, 1, 2, 3, 4, 5, 6, 70, 130}


def test_every_error_class_exits_with_a_documented_code() -> None:
    classes = _all_error_classes()
    assert len(classes) > 6  # the walk found the errors of the subpackages too
    table = _readme_codes()
    for cls in classes:
        assert cls.exit_code in table, cls
    from tracescale.capture.sweep import ScriptFailedError, SweepTimeoutError, TorchMissingError

    for cls in (ScriptFailedError, SweepTimeoutError, TorchMissingError):
        assert cls.exit_code == errors.EXIT_SCRIPT_FAILED == 6


def test_help_epilog_names_every_code() -> None:
    named = {int(m) for m in re.findall(r"(?:^|; |: )(\d+) ", EPILOG.replace("\n", " "))}
    assert named == _declared_codes()


@pytest.mark.parametrize("command", ["report", "analyze", "inspect"])
def test_a_missing_input_is_exit_4_everywhere(tmp_path, capsys, command) -> None:
    missing = tmp_path / "nope.json"
    with pytest.raises(SystemExit) as exc:
        main([command, str(missing)])
    err = capsys.readouterr().err
    assert exc.value.code == 4 and err.count("\n") == 1
    assert err.startswith(f"tracescale: error: {missing}: no such file")
