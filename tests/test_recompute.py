"""Activation recomputation named in the top ops: forward work run again inside backward, as
reentrant checkpointing (``CheckpointFunctionBackward``) and non-reentrant checkpointing (a
forward op inside a backward node) leave it in a trace, and its finding."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.minitrace import MiniTrace
from tracescale.api import analyze
from tracescale.categories import RECOMPUTE_PREFIX

NODE = "autograd::engine::evaluate_function: "


def _compute(where: Path) -> dict[str, float]:
    run = analyze(where, jobs=1, no_cache=True).to_dict()["studies"][0]["runs"][0]
    return {e["name"]: round(e["seconds"] * 1e6, 3) for e in run["top_ops"]["compute"]}


def _reentrant() -> MiniTrace:
    """Forward (K_fwd), then the checkpoint's backward: the segment's forward again (K_again),
    then the segment's own backward nested in it (K_bwd), all exact microseconds."""
    t = MiniTrace().step(1, 0, 1000)
    t.host("aten::linear", 10, 100).kernel("K_fwd", 20, 100, launch=20)
    t.host(NODE + "CheckpointFunctionBackward", 300, 600)
    t.host("CheckpointFunctionBackward", 310, 580)
    t.host("aten::linear", 320, 100).kernel("K_again", 330, 150, launch=330)
    t.host(NODE + "AddmmBackward0", 500, 300).host("aten::mm", 510, 200)
    t.kernel("K_bwd", 520, 250, launch=520)
    return t


def test_reentrant_checkpointing_names_the_forward_run_again(tmp_path: Path) -> None:
    _reentrant().write(tmp_path / "r" / "rank0.json")
    got = _compute(tmp_path / "r")
    assert got == {"K_fwd": 100.0, RECOMPUTE_PREFIX + "K_again": 150.0, "K_bwd": 250.0}


def test_a_forward_op_inside_a_backward_node_is_recomputation(tmp_path: Path) -> None:
    t = MiniTrace().step(1, 0, 1000)
    t.host("aten::linear", 10, 100).kernel("K_fwd", 20, 100, launch=20)
    t.host(NODE + "AddmmBackward0", 300, 600)
    t.host("aten::linear", 310, 100).kernel("K_again", 320, 150, launch=320)  # unpack hook
    t.host("aten::mm", 500, 200).kernel("K_bwd", 510, 250, launch=510)  # the formula's own
    t.write(tmp_path / "n" / "rank0.json")
    got = _compute(tmp_path / "n")
    assert got == {"K_fwd": 100.0, RECOMPUTE_PREFIX + "K_again": 150.0, "K_bwd": 250.0}


def test_without_checkpointing_nothing_is_recomputation(tmp_path: Path) -> None:
    t = MiniTrace().step(1, 0, 1000)
    t.host("aten::linear", 10, 100).kernel("K_fwd", 20, 100, launch=20)
    t.host(NODE + "AddmmBackward0", 300, 600).host("aten::mm", 310, 200)
    t.kernel("K_bwd", 320, 250, launch=320)
    t.write(tmp_path / "p" / "rank0.json")
    assert _compute(tmp_path / "p") == {"K_fwd": 100.0, "K_bwd": 250.0}


@pytest.fixture(scope="module")
def torch_checkpointed(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, Path]:
    """Real CPU traces of a checkpointed MLP, reentrant and not (torch, if present)."""
    pytest.importorskip("torch", reason="real checkpointed traces need torch")
    out = tmp_path_factory.mktemp("ckpt")
    script = f"""
import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils.checkpoint import checkpoint
torch.manual_seed(0)
seg = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256))
head = torch.nn.Linear(256, 8)
for reentrant in (True, False):
    with profile(activities=[ProfilerActivity.CPU]) as p:
        for _ in range(3):
            x = torch.randn(64, 256, requires_grad=True)
            head(checkpoint(seg, x, use_reentrant=reentrant)).sum().backward()
            p.step()
    p.export_chrome_trace(f"{out}/r{{int(reentrant)}}/rank0.json")
"""
    for r in (0, 1):
        (out / f"r{r}").mkdir()
    subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, timeout=120)
    return {True: out / "r1", False: out / "r0"}


@pytest.mark.parametrize("reentrant", [True, False])
def test_real_checkpointed_traces_name_and_find_the_recomputation(
    torch_checkpointed: dict[bool, Path], reentrant: bool
) -> None:
    study: dict[str, Any] = analyze(torch_checkpointed[reentrant], jobs=1, no_cache=True).to_dict()[
        "studies"
    ][0]
    names = [e["name"] for e in study["runs"][0]["top_ops"]["compute"]]
    again = [n for n in names if n.startswith(RECOMPUTE_PREFIX)]
    # the segment's two Linear layers run again: their addmm is recomputation; the backward
    # formulas' mm never is
    assert RECOMPUTE_PREFIX + "aten::addmm" in again
    assert not any(n.endswith("aten::mm") for n in again)
    run = study["runs"][0]
    listed = sum(e["seconds"] for e in run["top_ops"]["compute"] if e["name"] in again)
    assert run["recompute_s"] >= listed > 0  # all of it, the names past the kept ones too
    # the finding exactly where recomputation is 5% of the step (CPU timings vary run to run)
    share = run["recompute_s"] / run["step_time_s"]["mean"]
    found = [f for f in study["findings"] if f["text"].startswith("Activation recomputation")]
    assert [f["value"] for f in found] == ([pytest.approx(share)] if share >= 0.05 else [])
    assert all(f["kind"] == "context" for f in found)
    json.dumps(study)  # the document stays serializable


def test_the_finding_says_the_recomputed_share_from_five_percent() -> None:
    from tracescale.findings.recompute import recompute_finding

    def run(recompute_s: float) -> dict[str, Any]:
        return {"world_size": 8, "step_time_s": {"mean": 0.1}, "recompute_s": recompute_s}

    assert recompute_finding([run(0.0049)]) == []
    ((rank, found),) = recompute_finding([run(0.02)])
    assert rank == pytest.approx(1.02) and found["value"] == pytest.approx(0.2)
    assert found["text"].startswith(
        "Activation recomputation: 20.0 ms per step (20% of the step) runs forward work again"
    )
