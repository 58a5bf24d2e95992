"""tracescale.capture and ``tracescale sweep``: command building, errors, and a real CPU sweep."""

from __future__ import annotations

import gzip
import json
import os
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import require_module

from tracescale.capture import profiler as profiler_mod
from tracescale.capture import sweep as sweep_mod
from tracescale.capture.profiler import OUT_ENV, Capture, world_out_dir
from tracescale.capture.sweep import (
    ScriptFailedError,
    SweepTimeoutError,
    TorchMissingError,
    build_command,
    parse_nproc,
    run_sweep,
    sweep_env,
)
from tracescale.cli import sweep as cli_sweep
from tracescale.errors import TracescaleError, UsageError

TORCH_REASON = "torch is the 'capture' extra: pip install torch==2.13.0 to run capture tests"

TINY_DDP = textwrap.dedent(
    """
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    from tracescale.capture import Capture

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(nn.Linear(8, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with Capture(wait=0, warmup=1, active=2) as cap:
        for _ in range(cap.steps_needed):
            opt.zero_grad()
            loss = model(torch.randn(4, 8)).pow(2).mean()
            loss.backward()
            opt.step()
            loss.item()
            cap.step()
    dist.destroy_process_group()
    """
)


@pytest.fixture
def torch():
    return require_module("torch", TORCH_REASON)


@pytest.fixture
def fake_torchrun(monkeypatch):
    """Replace torchrun by a plain Python snippet, so error paths run without torch."""

    def install(code: str) -> None:
        monkeypatch.setattr(sweep_mod, "_check_torch", lambda python: None)
        monkeypatch.setattr(
            sweep_mod,
            "build_command",
            lambda n, script, args=(), python=None: [sys.executable, "-c", code],
        )

    return install


def _script(tmp_path: Path, text: str = "pass\n") -> Path:
    path = tmp_path / "train.py"
    path.write_text(text)
    return path


def _load(path: Path) -> dict:
    with gzip.open(path) as fh:
        return json.load(fh)


# ---- command building -------------------------------------------------------------------


def test_parse_nproc():
    assert parse_nproc("1,2,4") == (1, 2, 4)
    assert parse_nproc(" 4, 1 ,") == (4, 1)
    for bad in ("", "0", "1,x", "2,2", "-1"):
        with pytest.raises(UsageError, match="--nproc"):
            parse_nproc(bad)


def test_build_command_is_torchrun_standalone():
    cmd = build_command(4, "train.py", ["--steps", "3"], python="/py")
    assert cmd == [
        "/py",
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=4",
        "train.py",
        "--steps",
        "3",
    ]
    assert build_command(1, "t.py")[0] == sys.executable


def test_sweep_env(tmp_path):
    env = sweep_env(tmp_path / "out", {"PYTHONPATH": "/x", "OMP_NUM_THREADS": "8"})
    assert env[OUT_ENV] == str((tmp_path / "out").resolve())
    assert env["OMP_NUM_THREADS"] == "1"
    paths = env["PYTHONPATH"].split(os.pathsep)
    assert paths[-1] == "/x"
    assert (Path(paths[0]) / "tracescale" / "capture").is_dir()


def test_cli_parses_script_args(tmp_path, monkeypatch):
    seen = {}

    def fake_run_sweep(script, args, **kw):
        seen.update(script=script, args=args, **kw)
        return []

    monkeypatch.setattr(cli_sweep, "run_sweep", fake_run_sweep)
    argv = ["--nproc", "1,2", "--out", str(tmp_path), "--timeout", "30"]
    result = CliRunner().invoke(cli_sweep.sweep, [*argv, "--", "t.py", "--steps", "3", "-x"])
    assert result.exit_code == 0, result.output
    assert seen["script"] == "t.py"
    assert seen["args"] == ("--steps", "3", "-x")
    assert seen["nproc"] == (1, 2)
    assert seen["timeout"] == 30.0
    assert seen["out"] == str(tmp_path)


# ---- errors -------------------------------------------------------------------------------


def test_missing_script_is_usage_error(tmp_path):
    with pytest.raises(UsageError, match="not found"):
        run_sweep(tmp_path / "nope.py", nproc=[1], out=tmp_path)


def test_torch_missing(tmp_path, monkeypatch):
    real = sweep_mod.importlib.util.find_spec
    monkeypatch.setattr(
        sweep_mod.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "torch" else real(name, *a),
    )
    with pytest.raises(TorchMissingError, match="PyTorch"):
        run_sweep(_script(tmp_path), nproc=[1], out=tmp_path / "out")


def test_failing_script_gives_one_line_error(tmp_path, fake_torchrun):
    fake_torchrun("import sys; print('loading'); raise ValueError('bad batch size 3')")
    with pytest.raises(ScriptFailedError) as info:
        run_sweep(_script(tmp_path), nproc=[2], out=tmp_path / "out")
    message = str(info.value)
    assert "\n" not in message
    assert "nproc=2" in message and "exit code 1" in message
    assert "ValueError: bad batch size 3" in message
    assert info.value.nproc == 2 and "loading" in info.value.output


def test_script_without_traces_is_an_error(tmp_path, fake_torchrun):
    fake_torchrun("pass")
    with pytest.raises(ScriptFailedError, match=r"wrote 0 trace\(s\).*expected 1"):
        run_sweep(_script(tmp_path), nproc=[1], out=tmp_path / "out")


def test_timeout_kills_the_run(tmp_path, fake_torchrun):
    fake_torchrun("import time; time.sleep(60)")
    with pytest.raises(SweepTimeoutError, match="timeout"):
        run_sweep(_script(tmp_path), nproc=[1], out=tmp_path / "out", timeout=0.5)


def test_refuses_to_mix_with_old_traces(tmp_path, fake_torchrun):
    fake_torchrun("pass")
    old = tmp_path / "out" / "ws1" / "host_1.2.pt.trace.json.gz"
    old.parent.mkdir(parents=True)
    old.write_bytes(b"")
    with pytest.raises(UsageError, match="--overwrite"):
        run_sweep(_script(tmp_path), nproc=[1], out=tmp_path / "out")
    with pytest.raises(ScriptFailedError, match="wrote 0"):
        run_sweep(_script(tmp_path), nproc=[1], out=tmp_path / "out", overwrite=True)
    assert not old.exists()


def test_cli_main_prints_one_line_and_exit_code(tmp_path, fake_torchrun, capsys):
    fake_torchrun("raise SystemExit(3)")
    code = cli_sweep.main(["--nproc", "1", "--out", str(tmp_path / "o"), str(_script(tmp_path))])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == ScriptFailedError.exit_code
    assert err[-1].startswith("tracescale: error: train.py failed at nproc=1 (exit code 3)")


def test_sweep_errors_are_tracescale_errors():
    for cls in (ScriptFailedError, SweepTimeoutError, TorchMissingError):
        assert issubclass(cls, TracescaleError)


# ---- capture helper -----------------------------------------------------------------------


def test_world_out_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(OUT_ENV, str(tmp_path))
    assert world_out_dir(None, 4) == tmp_path / "ws4"
    assert world_out_dir(tmp_path / "x", 2) == tmp_path / "x" / "ws2"
    monkeypatch.delenv(OUT_ENV)
    with pytest.raises(UsageError, match=OUT_ENV):
        world_out_dir(None, 1)


def test_capture_validates_schedule():
    with pytest.raises(UsageError, match="active"):
        Capture("x", active=0)
    assert Capture("x", wait=1, warmup=2, active=3, skip_first=1).steps_needed == 7
    with pytest.raises(UsageError, match="outside"):
        Capture("x").step()


def test_capture_without_torch_is_usage_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` raise ImportError
    with pytest.raises(UsageError, match="capture"), Capture(tmp_path):
        pass
    assert profiler_mod.OUT_ENV == OUT_ENV


def test_capture_single_process(tmp_path, torch, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    x = torch.randn(16, 16)
    with Capture(tmp_path, wait=0, warmup=1, active=2) as cap:
        for _ in range(cap.steps_needed):
            (x @ x).sum().item()
            cap.step()
    files = list((tmp_path / "ws1").glob("*.pt.trace.json.gz"))
    assert len(files) == 1
    names = {e.get("name") for e in _load(files[0])["traceEvents"]}
    assert {"ProfilerStep#1", "ProfilerStep#2", "aten::mm"} <= names


# ---- the real thing: torchrun + gloo on CPU -------------------------------------------------


def test_sweep_real_gloo_ddp(tmp_path, torch):
    script = _script(tmp_path, TINY_DDP)
    out = tmp_path / "study"
    result = CliRunner().invoke(
        cli_sweep.sweep, ["--nproc", "1,2", "--out", str(out), "--timeout", "180", str(script)]
    )
    assert result.exit_code == 0, (result.output, result.exception)
    for n in (1, 2):
        files = sorted((out / f"ws{n}").glob("*.pt.trace.json.gz"))
        assert len(files) == n, files
        ranks = set()
        for f in files:
            doc = _load(f)
            info = doc["distributedInfo"]
            assert info["world_size"] == n and info["backend"] == "gloo"
            ranks.add(info["rank"])
            names = {e.get("name") for e in doc["traceEvents"]}
            assert names & {"gloo:all_reduce", "c10d::allreduce_"}, f
            steps = {s for s in names if isinstance(s, str) and s.startswith("ProfilerStep#")}
            assert len(steps) == 2, steps
        assert ranks == set(range(n))
    # the real gloo study is projected by the replay, which gives back its measured steps
    from tracescale.api import analyze

    entry = analyze(out, jobs=1, no_cache=True).to_dict()["studies"][0]
    assert entry["scaling"]["projections_source"] == "replay"
    for run in entry["runs"]:
        assert run["replay_error"] <= 0.02, (run["world_size"], run["replay_error"])


def test_error_line_skips_torchrun_report():
    output = textwrap.dedent(
        """\
        [rank1]: Traceback (most recent call last):
        [rank1]:   File "train.py", line 3, in <module>
        [rank1]: RuntimeError: shapes do not match
        E1130 11:51:41.374000 23764 torch/distributed/elastic/multiprocessing/api.py:1002] failed
        Traceback (most recent call last):
        torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
        ============================================================
          traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
        """
    )
    assert sweep_mod._last_error_line(output) == "RuntimeError: shapes do not match"
    assert (
        sweep_mod._last_error_line("step 3 done\nE1130 x distributed/elastic/y\n") == "step 3 done"
    )
    assert "show-output" in sweep_mod._last_error_line("")
