"""docs/ci.md's workflow, run: its Compare step, taken from the page (not copied here), on the
shipped sample studies, under ``bash -e`` as GitHub Actions runs a ``run:`` block.

The profiling steps need torchrun and the user's script (``tracescale sweep`` is exercised by
the capture tests); the checkout/upload steps are GitHub actions. The workflow's structure
(trigger, checkouts, upload with ``if: always()``) is checked here too.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import require_module

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_traces"


def _workflow() -> dict[str, Any]:
    yaml = require_module("yaml", "reading the workflow needs PyYAML (installed with dask)")
    text = (ROOT / "docs" / "ci.md").read_text()
    block = re.search(r"```yaml\n(.*?)```", text, re.S)
    assert block, "docs/ci.md has a yaml workflow"
    wf: dict[str, Any] = yaml.safe_load(block.group(1))
    return wf


def _steps() -> list[dict[str, Any]]:
    jobs = _workflow()["jobs"]
    assert len(jobs) == 1
    steps: list[dict[str, Any]] = next(iter(jobs.values()))["steps"]
    return steps


def test_the_workflow_is_complete() -> None:
    wf = _workflow()
    assert "pull_request" in wf.get(True, wf.get("on", {}))  # YAML 1.1 reads `on` as True
    steps = _steps()
    uses = [s.get("uses", "") for s in steps]
    assert sum(u.startswith("actions/checkout@") for u in uses) == 2
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["if"] == "always()" and upload["with"]["path"] == "tracescale-report/"
    runs = " ".join(s.get("run", "") for s in steps)
    assert runs.count("tracescale sweep") == 2
    assert "tracescale compare baseline/ candidate/ --fail-on-regression 5 --format markdown" in (
        runs.replace("\\\n", " ")
    )


def _run_compare_step(work: Path, baseline: Path, candidate: Path, cache: Path) -> tuple[int, str]:
    step = next(s for s in _steps() if s.get("id") == "compare")
    work.mkdir()
    (work / "baseline").symlink_to(baseline)
    (work / "candidate").symlink_to(candidate)
    bindir = work / "bin"
    bindir.mkdir()
    shim = bindir / "tracescale"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m tracescale "$@"\n')
    shim.chmod(0o755)
    summary = work / "summary.md"
    summary.write_text("previous step's summary\n")
    env = {
        **os.environ,
        "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(ROOT),
        "XDG_CACHE_HOME": str(cache),
        "GITHUB_STEP_SUMMARY": str(summary),
    }
    res = subprocess.run(
        ["bash", "-e", "-c", step["run"]],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert res.returncode in (0, 1), res.stderr[-3000:]
    report = work / "tracescale-report"
    for name in ("candidate.html", "compare.html"):
        html = (report / name).read_text()
        assert html.lstrip().lower().startswith("<!doctype html")
        assert not re.search(r"https?:", html), f"{name} is offline"
    md = (report / "compare.md").read_text()
    text = summary.read_text()
    assert text == "previous step's summary\n" + md, "the Markdown is appended to the summary"
    return res.returncode, md


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ci-cache")


def test_recipe_passes_when_nothing_changed(tmp_path: Path, cache: Path) -> None:
    study = SAMPLES / "ddp_cpu_strong"
    code, md = _run_compare_step(tmp_path / "w", study, study, cache)
    assert code == 0
    assert "- Overall: unchanged" in md
    assert "Regression gate (>5.0% slower, significant): passed, exit code 0" in md


def test_recipe_fails_on_a_regression_and_still_writes_the_summary(
    tmp_path: Path, cache: Path
) -> None:
    # The weak-scaling study does more work per rank: a slower "pull request".
    code, md = _run_compare_step(
        tmp_path / "w", SAMPLES / "ddp_cpu_strong", SAMPLES / "ddp_cpu_weak", cache
    )
    assert code == 1
    assert "- Overall: regressed" in md and "FAILED, exit code 1" in md
    assert "| N | Before | After | Change | 90% interval |" in md
    # The verdict quoted in docs/ci.md and the README is this run's real output.
    for doc in (ROOT / "docs" / "ci.md", ROOT / "README.md"):
        quoted = re.search(r"```\n### Verdict\n(.*?)```", doc.read_text(), re.S)
        assert quoted, doc
        shown = [ln for ln in quoted.group(1).splitlines() if ln.strip()]
        assert shown and all(ln in md.splitlines() for ln in shown), (doc, shown)
