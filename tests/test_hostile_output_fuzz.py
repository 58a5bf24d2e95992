"""The output-side hypothesis properties (``hostile_output_cases.py``) under a memory cap.

They run in a child limited to 3 GB of address space, so a renderer or the compare bootstrap
allocating in proportion to a hostile number fails this test with a MemoryError instead of
swapping the machine; the child also fails on any warning or traceback it prints.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CAP_BYTES = 3 * 1024**3


def _cap() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CAP_BYTES, CAP_BYTES))


def test_hostile_saved_studies_hold_under_the_memory_cap() -> None:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    env.setdefault("HOSTILE_EXAMPLES", "20")
    done = subprocess.run(
        [sys.executable, str(HERE / "hostile_output_cases.py")],
        preexec_fn=_cap,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=str(HERE.parent),
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.strip() == "hostile output properties held"


def test_the_cap_is_real() -> None:
    """The same child setup refuses a 4 GB allocation: the cap, not luck, bounds the cases."""
    done = subprocess.run(
        [sys.executable, "-c", "bytearray(4 * 1024**3)"],
        preexec_fn=_cap,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and "MemoryError" in done.stderr
