"""Communication that the traced ranks cannot explain: said, with its remedy, only where the
study traced fewer ranks than the job ran, communication is a quarter of the step or more,
and the replay finds little to gain removing its transfers (TraceLens's single-rank MI300
DDP ResNet: 64% communication, the first finding was a 1.04x host lever)."""

from __future__ import annotations

from typing import Any

import pytest

from tracescale.findings.unseen_ranks import unseen_ranks_finding


def _study(ranks: list[int], comm: float, gain: float | None) -> dict[str, Any]:
    levers = {} if gain is None else {"communication": {"speedup": gain}}
    return {
        "mode": "strong",
        "runs": [],
        "scaling": {"replay": {"levers": {"points": [{"world_size": 8, "levers": levers}]}}},
        "_run": {
            "world_size": 8,
            "kind": "gpu",
            "ranks": ranks,
            "step_time_s": {"mean": 0.0289},
            "breakdown_s": {"communication": comm, "compute": 0.0289 - comm},
        },
    }


def test_one_rank_of_eight_with_unexplained_communication_is_said() -> None:
    study = _study([0], 0.0185, 1.0036)
    ((rank, found),) = unseen_ranks_finding(study, [study["_run"]])
    assert found["text"] == (
        "Communication takes 18.5 ms per step (64%) at 8 GPUs, but removing its transfers buys "
        "little (replayed: 1.00x): the collectives mostly wait for ranks this study did not "
        "trace (1 of 8). Profile every rank to see which one is late and why."
    )
    assert found["kind"] == "context" and found["value"] == pytest.approx(0.0185 / 0.0289)
    assert rank == pytest.approx(1.0 + 0.1 * 0.0185 / 0.0289)


@pytest.mark.parametrize(
    ("ranks", "comm", "gain"),
    [
        (list(range(8)), 0.0185, 1.0036),  # every rank traced: the other findings speak
        ([0], 0.005, 1.0036),  # communication under a quarter of the step
        ([0], 0.0185, 1.5),  # the communication lever itself says what it buys
    ],
)
def test_not_said_otherwise(ranks: list[int], comm: float, gain: float) -> None:
    study = _study(ranks, comm, gain)
    assert unseen_ranks_finding(study, [study["_run"]]) == []
