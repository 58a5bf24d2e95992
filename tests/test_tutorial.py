"""docs/tutorial.md is real: every command in it runs, and the output pasted under it matches.

The tutorial's ``console`` blocks hold ``$ tracescale ...`` commands followed by (excerpts of)
their output; ``…`` marks left-out lines. Each command runs here through click's CliRunner in a
temporary folder (so ``study/strong`` is ``tmp_path/study/strong``), and every pasted output
line must appear in the fresh output: same text with numbers masked, and the same numbers
within 1% (the simulator is seeded, so they agree to the printed digits on any machine).

A block preceded by ``<!-- tutorial: machine-dependent -->`` (a real capture whose timings
differ per machine) is checked for its text only; one preceded by ``<!-- tutorial: needs
torch -->`` runs only where torch is installed (required in CI).
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from click.testing import CliRunner
from conftest import require_module

REPO = Path(__file__).resolve().parents[1]
TUTORIAL = REPO / "docs" / "tutorial.md"
ELLIPSIS = "…"
REL_TOL = 0.01
#: The pasted output is what a pipe gets (the default width, no colour), whatever the shell that
#: runs the tests exports.
AS_A_PIPE = {"COLUMNS": None, "FORCE_COLOR": None}
_NUM = re.compile(r"[-+±]?\d+(?:\.\d+)?(?:e[-+]?\d+)?", re.I)
_BLOCK = re.compile(r"(?:<!-- tutorial: ([^>]*?) -->\s*\n)?```console\n(.*?)```", re.S)


@dataclass
class Command:
    line: str
    output: list[str] = field(default_factory=list)


@dataclass
class Block:
    flags: set[str]
    commands: list[Command]
    index: int


def parse_tutorial(text: str) -> list[Block]:
    """The console blocks: their flags and their commands with the pasted output lines."""
    blocks = []
    for k, m in enumerate(_BLOCK.finditer(text)):
        flags = {f.strip() for f in (m.group(1) or "").split(",") if f.strip()}
        cmds: list[Command] = []
        for line in m.group(2).splitlines():
            if line.startswith("$ "):
                cmds.append(Command(line[2:].strip()))
            elif cmds:
                cmds[-1].output.append(line)
            elif line.strip():
                raise AssertionError(f"block {k}: output before any command: {line!r}")
        blocks.append(Block(flags, cmds, k))
    return blocks


def run_command(line: str, cwd: Path) -> tuple[int, str]:
    """Run one ``tracescale ...`` line in ``cwd``; ``examples/`` resolves to the repository's."""
    from tracescale.cli.main import cli

    argv = shlex.split(line)
    assert argv and argv[0] == "tracescale", f"the tutorial runs tracescale only: {line!r}"
    args = [str(REPO / a) if a.startswith("examples/") else a for a in argv[1:]]
    old = Path.cwd()
    os.chdir(cwd)
    try:
        res = CliRunner().invoke(cli, args, catch_exceptions=False, env=AS_A_PIPE)
    finally:
        os.chdir(old)
    return res.exit_code, res.output


def _skeleton(line: str) -> str:
    return " ".join(_NUM.sub("#", line).split())


def _numbers(line: str) -> list[float]:
    return [float(x.replace("±", "")) for x in _NUM.findall(line)]


def _close(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(
        abs(x - y) <= REL_TOL * max(abs(x), abs(y)) + 1e-9 for x, y in zip(a, b, strict=True)
    )


def mismatches(pasted: list[str], fresh: str, *, numbers: bool) -> list[str]:
    """Pasted lines with no fresh line of the same text (and, with ``numbers``, values)."""
    by_skeleton: dict[str, list[list[float]]] = {}
    for line in fresh.splitlines():
        by_skeleton.setdefault(_skeleton(line), []).append(_numbers(line))
    bad = []
    for line in pasted:
        if not line.strip() or line.strip() == ELLIPSIS:
            continue
        candidates = by_skeleton.get(_skeleton(line))
        if candidates is None:
            bad.append(f"text not in the output: {line!r}")
        elif numbers and not any(_close(_numbers(line), c) for c in candidates):
            bad.append(f"numbers differ: {line!r} (fresh: {candidates[:3]})")
    return bad


def test_tutorial_parses_and_uses_only_real_commands() -> None:
    blocks = parse_tutorial(TUTORIAL.read_text(encoding="utf-8"))
    commands = [c.line for b in blocks for c in b.commands]
    for needed in ("simulate", "analyze", "compare", "sweep", "--what-if dataloader=0", "--set"):
        assert any(needed in c for c in commands), needed
    assert any("--mode weak" in c for c in commands)
    for b in blocks:
        assert b.flags <= {"machine-dependent", "needs torch"}, b.flags


def test_tutorial_commands_and_outputs(tmp_path: Path) -> None:
    blocks = parse_tutorial(TUTORIAL.read_text(encoding="utf-8"))
    problems: list[str] = []
    for block in blocks:
        if "needs torch" in block.flags:
            continue  # test_tutorial_capture
        for cmd in block.commands:
            code, out = run_command(cmd.line, tmp_path)
            assert code == 0, f"{cmd.line!r} exited {code}:\n{out}"
            numbers = "machine-dependent" not in block.flags
            problems += [f"$ {cmd.line}: {p}" for p in mismatches(cmd.output, out, numbers=numbers)]
    assert not problems, "\n".join(problems)


def test_tutorial_key_numbers_are_quoted_consistently() -> None:
    """The prose quotes the tables: serial fractions and speedups that appear in the text."""
    text = TUTORIAL.read_text(encoding="utf-8")
    blocks = "\n".join(c for b in parse_tutorial(text) for cmd in b.commands for c in cmd.output)
    quoted = re.findall(r"\*\*(\d+(?:\.\d+)?(?:x|%))\*\*", text)
    assert len(quoted) >= 6, quoted
    for q in quoted:
        assert q in blocks, f"**{q}** in the prose is not in any pasted output"


def test_tutorial_capture(tmp_path: Path) -> None:
    """The `tracescale sweep` section: a real torchrun capture (slow; needs torch)."""
    require_module("torch", "the sweep section of the tutorial runs a real DDP capture")
    blocks = [b for b in parse_tutorial(TUTORIAL.read_text(encoding="utf-8"))]
    torch_blocks = [b for b in blocks if "needs torch" in b.flags]
    assert torch_blocks
    problems: list[str] = []
    for block in torch_blocks:
        for cmd in block.commands:
            code, out = run_command(cmd.line, tmp_path)
            assert code == 0, f"{cmd.line!r} exited {code}:\n{out}"
            problems += [f"$ {cmd.line}: {p}" for p in mismatches(cmd.output, out, numbers=False)]
    assert not problems, "\n".join(problems)


def test_checker_catches_wrong_numbers_and_text() -> None:
    fresh = " 8     36.2 ms     4.68x        58.5%        0.101\nTotal 9.4% (90% CI [9.4%, 9.5%])"
    assert not mismatches([" 8  36.2 ms  4.68x  58.5%  0.101", "…"], fresh, numbers=True)
    assert mismatches([" 8  36.2 ms  4.90x  58.5%  0.101"], fresh, numbers=True)
    assert not mismatches([" 8  36.9 ms  4.90x  58.5%  0.101"], fresh, numbers=False)
    assert mismatches(["Total 9.4% (made up)"], fresh, numbers=False)
