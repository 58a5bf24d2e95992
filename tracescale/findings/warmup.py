"""A study's largest run in -> a finding when its profiled steps hold one-time set-up.

Why: the first steps of a process pay for CUDA's lazy initialization (the context, module and
kernel loading, the caching allocator's first ``cudaMalloc``s). Profiled inside the steps, one
such call can be most of the step, and every lever read from that step is then about set-up,
not training: HTA's execution-trace example spends 19.6 s of a 19.8 s step in one
``cudaDeviceGetStreamPriorityRange``, which the host lever called a 112x gain from "fewer,
larger or fused ops". The finding says what the time is and that steady-state steps are what
to profile; the levers of the category it fills are left out.
"""

from __future__ import annotations

import re
from typing import Any

from tracescale.classify.blocking import CAPTURE_NOTE
from tracescale.findings.common import Finding, mean_step, top_ops
from tracescale.report.fmt import secs

#: CUDA/HIP calls that initialize a context, load modules or query the device: paid once.
SETUP_CALL = re.compile(
    r"^(cu|cuda|hip)(Init|DeviceGetStreamPriorityRange|GetDeviceCount|GetDeviceProperties|"
    r"DeviceGetAttribute|SetDevice|StreamCreate\w*|EventCreate\w*|ModuleLoad\w*|"
    r"LibraryLoad\w*|GetFuncBySymbol|FuncGetAttributes|DevicePrimaryCtxRetain|CtxCreate\w*)$",
    re.IGNORECASE,
)
#: Share of the step from which one set-up call decides what the step measures.
SETUP_SHARE = 0.2


def setup_call(run: dict[str, Any]) -> tuple[str, str, float] | None:
    """(category, call, seconds per step) of the largest set-up call in ``run``'s top ops, when
    it takes at least :data:`SETUP_SHARE` of the step; else None."""
    step = mean_step(run)
    if step <= 0:
        return None
    best: tuple[str, str, float] | None = None
    for cat in ("host", "sync", "idle"):
        for e in top_ops(run, cat):
            seconds = float(e.get("seconds") or 0.0)
            setup = SETUP_CALL.search(str(e.get("name"))) and seconds >= SETUP_SHARE * step
            if setup and (best is None or seconds > best[2]):
                best = (cat, str(e["name"]), seconds)
    return best


def _capture_finding(run: dict[str, Any], unit: Any) -> list[tuple[float, Finding]]:
    """The run's steps capture CUDA graphs (classify's warning): its host time is capture."""
    note = next((w for w in run.get("warnings") or [] if CAPTURE_NOTE in str(w)), None)
    step = mean_step(run)
    host = float(dict(run.get("breakdown_s") or {}).get("host") or 0.0)
    if note is None or step <= 0 or host < SETUP_SHARE * step:
        return []
    text = (
        f"CUDA graph capture inside the profiled steps: host work takes {secs(host)} per step "
        f"({host / step:.0%}) at {unit.of(run.get('world_size'))} while graphs are captured "
        "and kernels compiled, paid once per process (vLLM's and torch.compile's warm-up). "
        "Profile steps that replay the captured graphs; the levers of this step would be "
        "about capture, not serving or training."
    )
    share = host / step
    return [(float("inf"), Finding(text=text, category="host", value=share, kind="setup"))]


def setup_finding(runs: list[dict[str, Any]], unit: Any) -> list[tuple[float, Finding]]:
    """The set-up finding of the largest run, scored above every lever (it says the levers
    measured set-up), or nothing."""
    last = runs[-1]
    found = setup_call(last)
    if found is None:
        return _capture_finding(last, unit)
    cat, call, seconds = found
    share = seconds / mean_step(last)
    text = (
        f"One-time set-up inside the profiled steps: `{call}` takes {secs(seconds)} per step "
        f"({share:.0%}) at {unit.of(last.get('world_size'))}, CUDA's lazy initialization "
        "(context, modules, device queries), paid once per process. Profile steady-state steps "
        "(torch.profiler.schedule with wait and warmup steps before the active ones); the "
        "levers of this step would be about set-up, not training."
    )
    return [(float("inf"), Finding(text=text, category=cat, value=share, kind="setup"))]
