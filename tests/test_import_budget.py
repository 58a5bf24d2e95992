"""A cold `analyze` imports what it uses: never pandas (frames are built only when a caller asks
for one), and scipy only where a fit needs it (none of the studies below does).

Each analyze runs in a fresh interpreter, and the modules it ends up holding are read there; the
typed results' documented frames must still come back as pandas frames when asked for.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
DLRM = Path("/work/shared/traces/external/param_dlrm_8rank")


def _modules_after_analyze(study: Path, tmp_path: Path) -> set[str]:
    args = ["analyze", str(study), "--no-cache", "-q", "-j", "1", "-f", "json"]
    args += ["-o", str(tmp_path / "out.json")]
    code = (
        "import sys, json\n"
        "from tracescale.cli.main import main\n"
        "try:\n"
        f"    main({args!r})\n"
        "except SystemExit as exc:\n"
        "    assert not exc.code, exc.code\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert (tmp_path / "out.json").stat().st_size > 0
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize(
    "study",
    [
        ROOT / "sample_traces" / "sim_gpu_strong",
        ROOT / "sample_traces" / "ddp_cpu_strong",
        pytest.param(
            DLRM, marks=pytest.mark.skipif(not DLRM.is_dir(), reason="no shared DLRM traces")
        ),
    ],
    ids=lambda p: p.name,
)
def test_cold_analyze_imports_neither_pandas_nor_scipy(study: Path, tmp_path: Path) -> None:
    held = _modules_after_analyze(study, tmp_path)
    assert "pandas" not in held
    assert "scipy" not in held


def test_typed_results_still_give_pandas_frames() -> None:
    import pandas as pd

    import tracescale

    study = tracescale.analyze(str(ROOT / "sample_traces" / "sim_gpu_strong"), jobs=1)
    run = study.runs_by_study[0][-1]
    assert isinstance(run.steps, pd.DataFrame)
    assert isinstance(run.collectives, pd.DataFrame)
    assert isinstance(run.ops, pd.DataFrame)
    assert list(run.steps.columns[:4]) == ["rank", "step", "start", "duration"]
    means = run.mean_breakdown()
    assert means["compute"] == pytest.approx(float(run.steps["compute"].mean()))
