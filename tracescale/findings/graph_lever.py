"""The CUDA-graph lever: what one graph launch per step buys, said for what the trace shows.

Two different jobs get this lever. In one the launches hide under device work at the measured
N and only the replay at a larger N shows kernels shrinking below the launch rate. In the other
the device already waits for the host at the measured N: eager PyTorch spends most of the step
dispatching one op and one launch at a time (small-batch inference, a BERT or a ViT served
eagerly), and host overhead owns most of the step while the GPU sits starved. Saying "the
launches still hide under device work" there contradicts the breakdown printed below the
finding, so the measured host share picks the wording; the gain and the advice are the same.
"""

from __future__ import annotations

from typing import Any

from tracescale.findings.common import (
    MIN_GAIN,
    Finding,
    Target,
    cat_time,
    d,
    mean_step,
    names_clause,
    speedup_text,
)
from tracescale.report.fmt import label, num, secs, unit_of

#: Share of the measured step owned by host overhead from which the device is said to wait
#: for the host already (a quarter of the step is host time no kernel covers).
HOST_BOUND_SHARE = 0.25

_ADVICE = (
    'Capture the step with CUDA graphs or torch.compile(mode="reduce-overhead"), or fuse '
    "kernels for more work per launch."
)


def graph_gain(study: dict[str, Any], n: int) -> float | None:
    """What one CUDA graph launch per step buys at ``n``: the step replayed with its kernel
    launches captured (``replay.whatif.cuda_graph_gain``); None without a replay at ``n``."""
    graph = d(d(d(study.get("scaling")).get("replay")).get("cuda_graph"))
    for p in graph.get("points") or []:
        gain = num(p.get("speedup")) or 0.0
        if int(p.get("world_size", -1)) == n and gain > 0:
            return gain
    return None


def graph_lever(
    study: dict[str, Any], t: Target, last: dict[str, Any], measured_at: str
) -> list[tuple[float, Finding]]:
    """The CUDA-graph lever where host time is not owned by launch calls but the replay says a
    graph buys at least :data:`MIN_GAIN`: either the device already waits for the host's eager
    dispatch at the measured N (host overhead at least :data:`HOST_BOUND_SHARE` of the step),
    or the launches hide under device work there and the kernels shrink below the launch rate
    as N grows."""
    gain = graph_gain(study, t.world_size)
    if gain is None or gain < MIN_GAIN or t.step_s <= 0:
        return []
    unit = unit_of(study)
    where = f"at {unit.of(t.world_size)}" + (" (projected)" if t.projected else "")
    replayed = (
        "the step replayed with one CUDA graph launch per step instead of a launch per kernel "
        f"would be {speedup_text(gain, t.step_s, t.step_s / gain)} {where}"
    )
    host, step = cat_time(last, "host"), mean_step(last)
    share = host / step if step > 0 else 0.0
    if share >= HOST_BOUND_SHARE:
        text = (
            f"{label('host')} takes {secs(host)} per step ({share:.0%}) at {measured_at}"
            f"{names_clause(last, 'host')}: the {unit.name} waits while the host dispatches "
            f"each op and launches its kernels one at a time (eager mode). {replayed[0].upper()}"
            f"{replayed[1:]}. {_ADVICE}"
        )
    else:
        text = (
            f"Kernel launches: {replayed}; at {measured_at} the launches still hide under "
            f"device work, but the kernels shrink below the launch rate. {_ADVICE}"
        )
    return [(gain, Finding(text=text, category="host", value=gain, kind="lever"))]
