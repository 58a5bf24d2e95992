"""A notebook-style script without a ``__main__`` guard still works with jobs > 1."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

STUDY = Path(__file__).resolve().parents[1] / "sample_traces" / "sim_gpu_strong"


def test_unguarded_script_runs_once(tmp_path: Path) -> None:
    script = tmp_path / "notebook_style.py"
    script.write_text(
        "import tracescale\n"
        f"study = tracescale.analyze({str(STUDY)!r}, jobs=2, no_cache=True)\n"
        "print('runs', len(study.runs))\n"
    )
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, check=False
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.count("runs 4") == 1
