"""The README shows real output (its demo block is what `tracescale analyze` prints today), stays
a front page a newcomer reads to the end, and every link in it and in docs/ resolves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracescale.cli.main import cli

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def demo_output() -> list[str]:
    res = CliRunner().invoke(
        cli,
        ["analyze", str(ROOT / "sample_traces" / "sim_gpu_strong"), "-j1", "--no-cache"],
        env={"COLUMNS": None, "FORCE_COLOR": None},  # what a pipe gets, as pasted
    )
    assert res.exit_code == 0, res.output
    return [line.rstrip() for line in res.output.splitlines()]


@pytest.mark.parametrize(
    ("doc", "heading"),
    [
        ("README.md", "## One analysis, read line by line"),
        ("docs/report.md", "# Reading the report"),
    ],
)
def test_demo_output_shown_is_real(demo_output: list[str], doc: str, heading: str) -> None:
    text = (ROOT / doc).read_text()
    block = re.search(re.escape(heading) + r".*?```\n(.*?)```", text, re.S)
    assert block is not None
    shown = [line for line in block.group(1).splitlines() if line.strip() and line != "..."]
    assert len(shown) > 20
    actual = demo_output
    for line in shown:
        if line.startswith("Study: "):
            continue  # the path differs by where the repository is
        assert line.rstrip() in actual, f"README line not in today's output: {line!r}"


def test_readme_names_the_two_setup_commands_and_exit_codes() -> None:
    text = (ROOT / "README.md").read_text()
    assert "make demo" in text and "make test" in text
    for code in ("| 0 |", "| 1 |", "| 2 |", "| 3 |", "| 4 |"):
        assert code in text


def test_readme_is_a_front_page() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 250, f"README has {len(lines)} lines: move reference parts to docs/"


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    out = set()
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


def test_every_relative_link_in_the_docs_resolves() -> None:
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    checked = 0
    for doc in docs:
        text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)  # links in code are not links
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # an absolute URL: not checked offline
            file_part, _, anchor = target.partition("#")
            dest = (doc.parent / file_part).resolve() if file_part else doc
            assert dest.exists(), f"{doc.name}: link to {target} does not resolve"
            if anchor and dest.suffix == ".md":
                assert anchor in _anchors(dest), f"{doc.name}: no heading #{anchor} in {dest.name}"
            checked += 1
    assert checked >= 12
