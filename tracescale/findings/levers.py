"""Levers: per category and per flagged op, how much faster steps get if it is fixed.

A lever is evaluated where the user asked to scale to: the largest requested world size. Its
gain is the replay's (``scaling.replay.levers``, :mod:`tracescale.replay.whatif.levers`): the step
replayed with the category's nodes removed (data loading, host, sync, reduction, copies; for
communication its transfers), with every rank arriving as the typical one (variability), or
with one CUDA graph launch per step (launch-bound host time), over the step replayed as is.
So removing data loading also removes the waits other ranks had for a stalled loader, and
hiding a collective that nothing waits for buys nothing. Compute cannot be removed: its lever
is its part that does not shrink made parallel (scaling like ``1/N`` from the first run), and
an op's lever its share of its category; a document without the replay's levers (an old
one) falls back to the projection's per-category breakdown. A single run cannot be
projected without assumptions, so its levers are measured at its own N and the projection is
added with the assumption spelled out.
"""

from __future__ import annotations

import re
from typing import Any

from tracescale.findings.bubble import bubble_advice, virtual_chunks
from tracescale.findings.common import (
    MIN_GAIN,
    Finding,
    Target,
    basis_clause,
    cat_label,
    cat_time,
    d,
    mean_step,
    names_clause,
    speedup_text,
    target_of,
    top_ops,
)
from tracescale.findings.graph_lever import graph_gain, graph_lever
from tracescale.replay.whatif.levers import op_group
from tracescale.report.fmt import Unit, label, num, secs, unit_of
from tracescale.report.names import short_name

#: How each category would be fixed, said in the finding (compute has its own wording).
_HOW = {
    "dataloader": "taken off the critical path (DataLoader workers, prefetching)",
    "host": "removed (fewer, larger or fused ops)",
    "communication": "fully hidden under compute",
    "sync": "removed (no blocking host-device synchronization)",
    "reduction": "taken off the critical path (not done by one rank while the others wait)",
    "memcpy": "overlapped with compute (pinned memory, non_blocking copies)",
    "idle": "filled (the {unit} kept busy)",
}
_HOW_LAUNCH = (
    'cut (CUDA graphs or torch.compile(mode="reduce-overhead"), which replay the step\'s '
    "kernels without a launch call each; or fused kernels, more work per launch)"
)
#: Synchronization owned by a copy to or from the host (``.item()``, ``.cpu()``, ``.tolist()``
#: or the runtime's synchronous copy itself): its lever is the copy, not the sync.
_COPY_SYNC = re.compile(
    r"^aten::(item|_local_scalar_dense|copy_|_to_copy|to|tolist|cpu)$|Memcpy(?!Async)", re.I
)
_HOW_COPY = (
    "removed (a blocking copy: pinned memory and non_blocking=True copies, and no .item(), "
    ".cpu() or .tolist() inside the loop)"
)


#: A pipeline's point-to-point ops and kernels (NCCL SendRecv, c10d/nccl send and recv).
_P2P_OP = re.compile(r"SendRecv|nccl:(send|recv)|^c10d::(send|recv)|isend|irecv", re.I)


def _copy_bound(run: dict[str, Any]) -> bool:
    """Synchronization mostly issued by host copies (their ops own at least half of it)."""
    ops = top_ops(run, "sync")
    share = sum(num(e.get("share")) or 0.0 for e in ops if _COPY_SYNC.search(str(e["name"])))
    return share >= 0.5


#: Share of the step from which a blocking copy that buys nothing replayed is still said.
_COPY_WAIT_SHARE = 0.2


def _copy_wait_context(run: dict[str, Any], now: float, where: str) -> list[tuple[float, Finding]]:
    """A blocking copy holding much of the step whose replay without the wait is no shorter:
    what the device waits for is not in this trace (another rank, an earlier queue), so
    no gain is promised; the host is still held there, and the remedy is the same."""
    step = mean_step(run)
    share = now / step if step > 0 else 0.0
    if share < _COPY_WAIT_SHARE:
        return []
    text = (
        f"{cat_label(run, 'sync')} takes {secs(now)} per step ({share:.0%}) at {where}"
        f"{names_clause(run, 'sync')}: the host waits in blocking copies (pageable memory, "
        ".item(), .cpu()). Replayed without those waits the step is no shorter: the device "
        "waits as long for work this trace does not show (another rank, or its own queue). "
        "Pinned memory and non_blocking=True copies still free the host to run ahead."
    )
    # Ranked above the efficiency and optimum context (at most 1.02): a fifth or more of the
    # step held in a copy says more than where one run's assumed scaling bottoms out; below
    # every lever (at least MIN_GAIN).
    rank = 1.02 + 0.009 * share
    return [(rank, Finding(text=text, category="sync", value=share, kind="context"))]


def _trend(first: dict[str, Any], last: dict[str, Any], cat: str, mode: str, unit: Unit) -> str:
    """', and does not shrink with more GPUs' from the first and the last measured run."""
    if first is last:
        return ""
    t0, t1 = cat_time(first, cat), cat_time(last, cat)
    n0 = num(first.get("world_size")) or 1.0
    if t0 <= 0:
        return " (absent at the smallest N)" if t1 > 0 else ""
    if t1 > 1.3 * t0:
        return f"; it grows with more {unit.plural} (from {secs(t0)} at {unit.of(int(n0))})"
    if mode != "weak" and t1 >= 0.7 * t0:
        return f"; it does not shrink with more {unit.plural} ({secs(t0)} at {unit.of(int(n0))})"
    return ""


def _parallel_part(first: dict[str, Any], cat: str, n: int, mode: str) -> float:
    """The category's time at ``n`` if it were perfectly parallel from the first run on."""
    t0 = cat_time(first, cat)
    if mode == "weak":
        return t0
    n0 = num(first.get("world_size")) or 1.0
    return t0 * n0 / max(n, 1)


def _overlap_clause(last: dict[str, Any]) -> str:
    exposed = cat_time(last, "communication")
    hidden = num(last.get("overlapped_communication_s")) or 0.0
    if exposed + hidden <= 0:
        return ""
    return f"; {hidden / (hidden + exposed):.0%} of communication is already overlapped"


def _assumed_clause(study: dict[str, Any], cat: str, first: dict[str, Any]) -> str:
    """For one run: the projected gain, stated as resting on the default assumption."""
    t = target_of(study, first)
    if not t.projected or t.step_s <= 0:
        return ""
    part = t.hideable_s() if cat == "communication" else t.breakdown.get(cat, 0.0)
    if part <= 0 or t.step_s - part <= 0:
        return ""
    g = t.step_s / (t.step_s - part)
    return (
        f" If the parallel part scales as 1/N (an assumption: one run cannot show it), "
        f"at {unit_of(study).of(t.world_size)} it would be {g:.2f}x."
    )


def category_levers(
    study: dict[str, Any], runs: list[dict[str, Any]], mode: str
) -> list[tuple[float, Finding]]:
    """One finding per category whose fix buys at least :data:`MIN_GAIN`, scored by gain."""
    first, last = runs[0], runs[-1]
    single = len(runs) == 1 or bool(d(study.get("scaling")).get("assumed"))
    t: Target = target_of(study, last)
    if single:
        bd = {c: cat_time(last, c) for c in d(last.get("breakdown_s"))}
        t = Target(int(num(last.get("world_size")) or 0), mean_step(last), bd, False)
    if t.step_s <= 0:
        return []
    n_last = last.get("world_size")
    unit = unit_of(study)
    count = unit.of
    out = []
    for cat in d(last.get("breakdown_s")):
        now = cat_time(last, cat)
        there = t.breakdown.get(cat, 0.0)
        how_launch = cat == "host" and cat_label(last, cat).startswith("Host launch")
        if cat == "host" and not how_launch and (graph_gain(study, t.world_size) or 0) >= MIN_GAIN:
            continue  # launches that hide at the measured N: the CUDA-graph lever says it
        if cat == "compute":
            fixed = _parallel_part(first, cat, t.world_size, mode) if not single else there
            how = "its part that does not shrink were parallel"
        elif cat == "communication":
            fixed = there - t.hideable_s()
            how = "it were " + _HOW[cat]
            if fixed > 1e-12:
                how += f" (at most the {secs(t.hideable_s())} of compute there"
                how += "; waiting for the slowest rank is not hidden)" if t.variability_s else ")"
        else:
            fixed = 0.0
            how_cat = _HOW_LAUNCH if cat_label(last, cat).startswith("Host launch") else None
            if cat == "sync" and _copy_bound(last):
                how_cat = _HOW_COPY
            how = f"it were {how_cat or _HOW.get(cat, 'removed').format(unit=unit.name)}"
        after = t.step_s - there + min(fixed, there)
        replayed = graph_gain(study, t.world_size) if how_launch else None
        removed = replayed_gain(study, t.world_size, cat)
        if replayed is not None:  # the step replayed with one graph launch: what it buys
            after = t.step_s / replayed
        elif removed is not None:  # the step replayed without the category
            if removed <= 1.0:
                continue
            after = t.step_s / removed
            if cat == "communication":
                how = (
                    "its transfers took no time (hidden under compute, or cheaper: bucket "
                    "size, compression, a faster link)"
                )
        elif after <= 0 or there <= fixed:
            continue
        gain = t.step_s / after
        if gain < MIN_GAIN:
            if cat == "sync" and _copy_bound(last):
                out += _copy_wait_context(last, now, count(n_last))
            continue
        share = now / mean_step(last) if mean_step(last) > 0 else 0.0
        name = cat_label(last, cat)
        verb = "take" if name.endswith("copies") else "takes"
        text = f"{name} {verb} {secs(now)} per step ({share:.0%}) at {count(n_last)}"
        text += names_clause(last, cat) + _trend(first, last, cat, mode, unit)
        if cat == "communication":
            text += _overlap_clause(last)
        where = f"at {count(t.world_size)}" + (" (projected)" if t.projected else " (measured)")
        if replayed is not None:
            how += " (replayed: one CUDA graph launch per step instead of a launch per kernel)"
        elif removed is not None:
            how += " (replayed" + (
                "; waiting for the slowest rank stays)" if cat == "communication" else ")"
            )
        text += f". If {how}, steps would be {speedup_text(gain, t.step_s, after)} {where}."
        if single and cat != "compute":
            text += _assumed_clause(study, cat, first)
        out.append((gain, Finding(text=text, category=cat, value=gain, kind="lever")))
    if not any(f["category"] == "host" for _, f in out):
        out += graph_lever(study, t, last, count(n_last))
    return out


def _replayed_levers(study: dict[str, Any], n: int) -> dict[str, Any] | None:
    """The replay's lever gains at ``n`` (``replay.levers``), None where it has none there."""
    levers = d(d(d(study.get("scaling")).get("replay")).get("levers"))
    for p in levers.get("points") or []:
        if isinstance(p, dict) and int(p.get("world_size", -1)) == n:
            return d(p.get("levers"))
    return None


def replayed_gain(study: dict[str, Any], n: int, lever: str) -> float | None:
    """Speedup the replay gives removing ``lever`` (a category, or ``arrival``) at ``n``: 1.0
    where it replayed ``n`` and found no gain, None where it did not replay ``n``."""
    levers = _replayed_levers(study, n)
    if levers is None:
        return None
    return num(d(levers.get(lever)).get("speedup")) or 1.0


def variability_lever(
    study: dict[str, Any], runs: list[dict[str, Any]]
) -> list[tuple[float, Finding]]:
    """Waiting for the slowest of N ranks (rank-to-rank variability): its own lever, not
    communication's, since no network or overlap fixes another rank's late arrival."""
    t = target_of(study, runs[-1])
    var = t.variability_s
    if not t.projected or var <= 0 or t.step_s - var <= 0:
        return []
    after = t.step_s - var
    replayed = replayed_gain(study, t.world_size, "arrival")
    if replayed is not None:  # the step replayed with every rank arriving as the typical one
        after = t.step_s / replayed
    gain = t.step_s / after
    if gain < MIN_GAIN:
        return []
    text = (
        f"Rank-to-rank variability: at {unit_of(study).of(t.world_size)} (projected) each step "
        f"waits "
        f"{secs(var)} for the slowest rank ({var / t.step_s:.0%} of the step, counted in "
        "communication). If every rank arrived as the typical one does (steadier data "
        f"loading and per-rank work), steps would be {speedup_text(gain, t.step_s, after)}"
    )
    text += " (replayed)." if replayed is not None else "."
    return [(gain, Finding(text=text, category="communication", value=gain, kind="lever"))]


def bubble_lever(study: dict[str, Any], runs: list[dict[str, Any]]) -> list[tuple[float, Finding]]:
    """A pipeline's fill and drain (the serial fraction's pipeline bubble): what the step
    replayed without them buys, and the levers that shrink them."""
    t = target_of(study, runs[-1])
    gain = replayed_gain(study, t.world_size, "pipeline_bubble")
    if gain is None or gain < MIN_GAIN or t.step_s <= 0:
        return []
    sf = d(d(study.get("scaling")).get("serial_fraction"))
    share = num(d(sf.get("by_category")).get("pipeline_bubble")) or 0.0
    unit = unit_of(study)
    where = f"at {unit.of(t.world_size)}" + (" (projected)" if t.projected else "")
    text = (
        "Pipeline bubble: each pipeline stage waits for its neighbours while the pipeline "
        f"fills and drains ({share:.1%} of T(1) that does not shrink with more {unit.plural}, "
        "and it grows as a share while each replica runs fewer microbatches). Without the fill "
        f"and drain, steps would be {speedup_text(gain, t.step_s, t.step_s / gain)} {where} "
        "(replayed). " + bubble_advice(virtual_chunks(study))
    )
    return [(gain, Finding(text=text, category="communication", value=gain, kind="lever"))]


#: Top ops replayed without them per study (the largest non-shrinking parts first).
MAX_REPLAYED_OPS = 4


def op_candidates(last: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The largest run's top ops that an op finding may name: flagged by their law (not
    shrinking; growing, in weak scaling), not their whole category, not collectives (the
    communication lever speaks for those) nor a pipeline's send/recv (the bubble's finding
    does), largest time first. The replay removes each (``replay.levers`` ``ops``)."""
    out = []
    for cat in d(last.get("top_ops")):
        if cat == "communication":
            continue
        for e in top_ops(last, cat):
            law = d(e.get("law"))
            share = num(e.get("share")) or 0.0
            if not law.get("flagged") or share >= 0.9 or _P2P_OP.search(str(e["name"])):
                continue
            out.append((cat, e))
    out.sort(key=lambda ce: -(num(ce[1].get("seconds")) or 0.0))
    return out[:MAX_REPLAYED_OPS]


def _replayed_op(study: dict[str, Any], n: int, group: str) -> float | None:
    """The replay's speedup at ``n`` without the op's law group, None where not replayed."""
    levers = d(d(d(study.get("scaling")).get("replay")).get("levers"))
    for p in levers.get("points") or []:
        if isinstance(p, dict) and int(p.get("world_size", -1)) == n:
            return num(d(d(p.get("ops")).get(group)).get("speedup"))
    return None


#: Kernels of the optimizer step (PyTorch's foreach/fused optimizers, Apex, DeepSpeed).
_OPTIMIZER_KERNEL = re.compile(r"multi_tensor_apply|foreach|fused_?adam|adam|lamb|sgd", re.I)


def _op_advice(category: str, name: str) -> str:
    """What people do about an op that does not shrink, by what it is."""
    if category == "compute" and _OPTIMIZER_KERNEL.search(name):
        return (
            " Every rank runs the whole optimizer step: shard it (ZeRO-1/2, FSDP) so each rank "
            "updates its own part, or use a fused optimizer."
        )
    if category == "compute":
        return " Shard it across the ranks, or skip work that every rank repeats."
    return ""


def op_levers(
    study: dict[str, Any], runs: list[dict[str, Any]], mode: str, limit: int = 2
) -> list[tuple[float, Finding]]:
    """Top ops flagged as not shrinking (growing, in weak scaling): what removing each buys,
    replayed (the step without the op's nodes at the target N)."""
    if len(runs) < 2:
        return []
    last = runs[-1]
    t = target_of(study, last)
    if t.step_s <= 0:
        return []
    unit = unit_of(study)
    count = unit.of
    found = []
    for cat, e in op_candidates(last):
        law = d(e.get("law"))
        share = num(e.get("share")) or 0.0
        gain = _replayed_op(study, t.world_size, op_group(cat, str(e["name"])))
        if gain is None or gain < MIN_GAIN:
            continue
        after = t.step_s / gain
        verb = "grows" if str(law.get("form", "")).startswith("grows") else "does not shrink"
        text = (
            f"`{short_name(str(e['name']))}` ({label(cat).lower()}) {verb} with more "
            f"{unit.plural} ({law.get('form')}): {secs(e.get('seconds'))} per step at "
            f"{count(last.get('world_size'))}, {share:.0%} of "
            f"{basis_clause(last, cat, lead='the ') or label(cat).lower()}. "
            f"Without it, steps would be {speedup_text(gain, t.step_s, after)} "
            f"at {count(t.world_size)} (projected; replayed)."
            f"{_op_advice(cat, str(e['name']))}"
        )
        found.append((gain, Finding(text=text, category=cat, value=gain, kind="op")))
    found.sort(key=lambda sf: -sf[0])
    return found[:limit]
