"""Shared test helpers.

Tests that simulate a study to analyze it pass ``compresslevel=1``: the rank files decode to the
same events at any gzip level, and the default level 6 only spends time (about a sixth of a
large simulation) on compression no test reads.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
from types import ModuleType
from typing import Any

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


def pytest_configure(config: pytest.Config) -> None:
    """Lay out reports for a pipe, whatever the shell or the runner says about a terminal.

    pytest-xdist's workers start with ``COLUMNS``/``LINES`` set (80 columns), and a developer's
    shell may export them: the terminal table would then wrap to that width in some runs and not
    in others. Tests that need a width set ``COLUMNS`` themselves (monkeypatch).
    """
    for var in ("COLUMNS", "LINES"):
        os.environ.pop(var, None)
    # Keep compiled modules between runs, whatever PYTHONDONTWRITEBYTECODE says: without them
    # every xdist worker rewrites the asserts of all test modules again (about 6 s of CPU each)
    # and every subprocess a test starts compiles the tracescale modules it imports. The
    # __pycache__ folders are git-ignored; only the test run writes them.
    sys.dont_write_bytecode = False
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    _keep_freed_memory()
    # The youngest generation is collected every 50,000 net allocations instead of every 700:
    # simulating and decoding traces allocates millions of short-lived tuples, dicts and lists
    # that reference counting frees anyway, and each collection also walks the young objects
    # that survive. Cyclic garbage is still collected, later; about 8% of the CPU of the
    # simulate-and-analyze modules (test_accuracy, test_tail_fit).
    gc.set_threshold(50_000, 20, 100)


#: glibc malloc settings for the test processes (see :func:`_keep_freed_memory`): blocks up to
#: 32 MB from the heap, and freed memory kept (up to 1 GB, grown 64 MB at a time).
MALLOC_TUNING = {
    "MALLOC_MMAP_THRESHOLD_": 32 * 1024**2,
    "MALLOC_TRIM_THRESHOLD_": 1024**3,
    "MALLOC_TOP_PAD_": 64 * 1024**2,
}


def _keep_freed_memory() -> None:
    """Let this process and every child it starts reuse the memory they free.

    By default glibc maps each block above a threshold afresh and unmaps it when freed, and
    hands the top of the heap back as soon as it is free. The suite decodes, simulates and
    replays many traces one after another: every new buffer the size of a trace was then
    faulted in page by page again (four million page faults in a minute of simulated studies:
    over a third of that minute's CPU, all of it in the kernel). Results do not change:
    only when memory goes back to the system. The environment reaches the xdist workers (they
    start after this hook) and every subprocess a test runs; ``mallopt`` covers this process.
    """
    for var, value in MALLOC_TUNING.items():
        os.environ.setdefault(var, str(value))
    if sys.platform != "linux":
        return
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc (musl): its malloc has none of these settings
        return
    # mallopt's parameter numbers: M_TRIM_THRESHOLD -1, M_TOP_PAD -2, M_MMAP_THRESHOLD -3
    for param, var in (
        (-3, "MALLOC_MMAP_THRESHOLD_"),
        (-1, "MALLOC_TRIM_THRESHOLD_"),
        (-2, "MALLOC_TOP_PAD_"),
    ):
        libc.mallopt(param, int(os.environ[var]))


#: Modules whose parametrized cases are independent of each other but share an expensive
#: per-case load (or none): spread case by case (the text in brackets; a test without one
#: alone), not as one module.
BY_CASE = {
    "tests/test_capture.py",
    "tests/test_classify_real.py",
    "tests/test_hta_agreement.py",
    "tests/test_independent_variants.py",
    "tests/test_ingest_fast.py",
    "tests/test_process_group_study.py",
    "tests/test_projection_patterns.py",
    "tests/test_serial_fraction_modern.py",
    "tests/test_serial_fraction_parts.py",
    "tests/test_simulate_modern_analyzer.py",
    "tests/test_study_cache.py",
    "tests/test_tutorial.py",
}

#: Tests of several modules that read one study of the session (the ``pipeline_study`` and
#: ``torch_pair`` fixtures): module -> {the test's name, or the end of it (its case) -> the
#: unit a worker takes whole}, so that one worker builds that study once for all of them.
SHARED_STUDY = {
    "tests/test_pipeline_parallel.py": {
        "test_pipeline_projection_meets_targets": "pipeline[1]",
        "test_bubble_part_is_the_truths_fill_and_drain": "pipeline[1]",
        "test_first_finding_is_the_bubble_with_its_lever": "pipeline[1]",
        "test_p2p_nodes_are_not_links_or_variability": "pipeline[1]",
        "test_interleaved_projection_meets_targets": "pipeline[2]",
        "test_interleaved_mesh_and_advice": "pipeline[2]",
    },
    "tests/test_pipeline_attribution.py": {"[1]": "pipeline[1]", "[2]": "pipeline[2]"},
    "tests/test_user_traces_et_steps.py": {
        "test_a_real_execution_trace_pairs_with_its_kineto_trace": "torch_pair",
    },
    "tests/test_et_dependencies.py": {
        "test_the_real_torch_pair_reads_its_dependencies": "torch_pair"
    },
    "tests/test_independent_variants.py": {
        "[hsdp/8-per-node]": "hsdp8",
        "test_hsdp_traces_name_the_mesh_as_device_mesh_does": "hsdp8",
    },
    "tests/test_serial_fraction_parts.py": {
        "test_amdahl_caps_follow_from_each_part": (
            "tests/test_serial_fraction_parts.py[launch_bound]"
        ),
        "test_the_report_prints_the_replayed_parts_and_not_the_closed_form": (
            "tests/test_serial_fraction_parts.py[launch_bound]"
        ),
    },
    "tests/test_serial_fraction_modern.py": {
        "[pipeline_4]": "pipeline[1]",
        "[pipeline_4_interleaved]": "pipeline[2]",
    },
}


#: Units (see :func:`_scope`) that take the longest, slowest first: handed out before the others
#: (pytest-xdist orders units by their count of tests), so that no worker starts one of them
#: while the other has nothing left to do.
SLOW_FIRST = [
    "rendered studies",
    "pipeline[2]",
    "pipeline[1]",
    "tests/test_annotate.py",
    "tests/test_accuracy.py",
    "tests/test_serial_fraction_parts.py[median_10ms]",
    "tests/test_serial_fraction_parts.py[median_4ms]",
    "tests/test_hta_interop.py",
    "tests/test_tutorial.py::test_tutorial_capture",
    "tests/test_tutorial.py::test_tutorial_commands_and_outputs",
    "tests/test_projection_patterns.py[launch_bound]",
    "tests/test_serial_fraction_modern.py[moe_events]",
]


#: Modules that render the same shipped and real studies (the ``analyzed_doc`` fixture): one
#: worker takes them all and analyzes each study once.
SHARED_MODULES = dict.fromkeys(
    (
        "tests/test_html_chromium.py",
        "tests/test_html_layout.py",
        "tests/test_notebook_display.py",
        "tests/test_report_terminal.py",
    ),
    "rendered studies",
)


def _scope(nodeid: str) -> str:
    """The unit of work a worker takes whole: a test module, one case of a BY_CASE module, or
    the tests that share a SHARED_STUDY or SHARED_MODULES' studies."""
    path, _, name = nodeid.partition("::")
    if path in SHARED_MODULES:
        return SHARED_MODULES[path]
    for key, unit in SHARED_STUDY.get(path, {}).items():
        if name == key or name.endswith(key):
            return unit
    if path in BY_CASE and nodeid.endswith("]"):
        return f"{path}[{nodeid[nodeid.index('[') + 1 : -1]}]"
    return path if path not in BY_CASE else nodeid


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With ``-n N`` and no ``--dist``: each worker takes whole modules (``--dist loadfile``),
    except that BY_CASE modules go case by case and SHARED_STUDY tests go together.

    A module- or session-scoped fixture (a simulated study, an analysis, HTA's load of a folder)
    is built by every worker that draws one of its tests; under plain ``load`` that is most
    modules twice. ``--dist loadgroup`` with ``xdist_group`` marks cannot do this here: with
    pytest 9 the group suffix pytest-xdist 3.8 writes into ``item._nodeid`` never reaches the
    node id, so every group is split as under ``load``. An explicit ``--dist`` is left alone.
    """
    if _dist_given(config) or config.getoption("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleOrCase(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _scope(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            for unit in reversed(SLOW_FIRST):  # the longest units start first
                if unit in self.workqueue:
                    self.workqueue.move_to_end(unit, last=False)
            super()._assign_work_unit(node)

    return ModuleOrCase(config, log)


def _dist_given(config: pytest.Config) -> bool:
    """Whether the command line chose pytest-xdist's distribution mode itself."""
    return any(a == "-d" or a.startswith("--dist") for a in config.invocation_params.args)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--artifacts-dir",
        "--screenshot-dir",
        dest="artifacts_dir",
        default=os.environ.get("TRACESCALE_ARTIFACTS") or None,
        help="Keep report screenshots and terminal captures here (default: pytest's tmp dirs).",
    )


@pytest.fixture
def artifacts_dir(request: pytest.FixtureRequest, tmp_path):
    """Where a test keeps what a reviewer should look at: --artifacts-dir, else its tmp dir."""
    from pathlib import Path

    chosen = request.config.getoption("artifacts_dir")
    if not chosen:
        return tmp_path
    out = Path(chosen)
    out.mkdir(parents=True, exist_ok=True)
    return out


@pytest.fixture
def shared_traces():
    """The real traces beside the checkout (../shared/traces), or skip where absent."""
    from pathlib import Path

    root = Path(__file__).parents[1].parent / "shared" / "traces"
    if not root.is_dir():
        pytest.skip(f"real traces not found at {root} (they sit beside the checkout in CI)")
    return root


@pytest.fixture
def write_trace(tmp_path):
    """Factory: write a tiny Kineto trace (events plus top-level keys) and return its path."""
    import gzip
    import json

    def write(events, name="trace.json", *, folder=None, gz=False, **top):
        folder = folder if folder is not None else tmp_path
        folder.mkdir(parents=True, exist_ok=True)
        doc = {**top, "traceEvents": events} if isinstance(events, list) else events
        data = json.dumps(doc).encode()
        path = folder / name
        path.write_bytes(gzip.compress(data) if gz else data)
        return path

    return write


@pytest.fixture(scope="session")
def analyzed_doc():
    """Function: a study directory's document (``analyze(path, jobs=1).to_dict()``), computed
    once per test process and shared by every module that renders the same shipped or real
    studies. Each call hands out its own deep copy, so a test that edits one edits no other's."""
    import copy
    from pathlib import Path

    from tracescale.pipeline import analyze

    docs: dict[str, dict] = {}

    def get(path) -> dict:
        key = str(Path(path).resolve())
        if key not in docs:
            docs[key] = analyze(key, jobs=1).to_dict()
        return copy.deepcopy(docs[key])

    return get


@pytest.fixture(scope="session")
def browser(tmp_path_factory):
    """One headless Chromium for the session's pages (tests/headless.py): the HTML modules
    load about a hundred pages, and starting the browser for each cost more than drawing them.
    Skips (or fails under ``TRACESCALE_REQUIRE_ALL=1``) where chromium is not installed."""
    from tests.headless import FLAGS, Browser, find_chromium

    chromium = Browser(find_chromium(), FLAGS, tmp_path_factory.mktemp("chromium") / "profile")
    yield chromium
    chromium.close()


@pytest.fixture(scope="session")
def pipeline_study(tmp_path_factory):
    """Function: tests/pipeline_studies.py's small pipeline-parallel study with ``virtual``
    model chunks per rank, built and analyzed once per test process for every module that
    reads it: (pattern, study entry, truth, the fitted ReplayStudy). Treat them as read-only."""
    from tests.pipeline_studies import build_and_analyze

    built: dict[int, tuple] = {}

    def get(virtual: int = 1) -> tuple:
        if virtual not in built:
            where = tmp_path_factory.mktemp(f"pipeline_v{virtual}")
            built[virtual] = build_and_analyze(where, virtual)
        return built[virtual]

    return get


@pytest.fixture(scope="session")
def torch_pair(tmp_path_factory):
    """A real Kineto trace and execution trace of one CPU training loop (torch, if present),
    recorded once per test process for every module that reads it (``SHARED_STUDY``)."""
    import importlib.util
    import subprocess
    import sys

    if importlib.util.find_spec("torch") is None:  # not imported here: the script records it
        pytest.skip("a real execution trace needs torch")
    out = tmp_path_factory.mktemp("torch_pair")
    script = f"""
import torch
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile
et = ExecutionTraceObserver().register_callback({str(out / "rank0_et.json")!r})
m = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
with profile(activities=[ProfilerActivity.CPU], execution_trace_observer=et) as p:
    for _ in range(3):
        m(torch.randn(4, 8)).sum().backward()
        opt.step()
        opt.zero_grad()
        p.step()
et.unregister_callback()
p.export_chrome_trace({str(out / "rank0_kineto.json")!r})
"""
    subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, timeout=120)
    return out
