"""Pattern specs: which bases and modifiers exist, which combine, and what a name means.

Why a module of its own: the spec is read by every part of the pattern simulator (the step
programs, the sharded, expert and pipeline programs, the study runner and its truth extras) and
by the CLI, while it depends on nothing of theirs; kept apart, those modules can all import it
without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass

#: base parallelism (one of them) and modifiers that combine with any base
BASES = ("ddp", "fsdp", "tp", "pp", "moe", "zero2", "hsdp")
MODIFIERS = ("grad_accum", "multinode", "launch_bound", "heavy_tail", "comm_types", "cuda_graph",
             "act_ckpt")  # fmt: skip
#: base -> modifiers it refuses, and why (one line each)
REFUSED: dict[str, dict[str, str]] = {
    "pp": {"cuda_graph": "a graph per stage pass is not modelled",
           "comm_types": "its world Broadcast/AllReduce would cross the pipeline's stages",
           "launch_bound": "~2000 kernels per microbatch pass make traces of gigabytes"},
    "moe": {"cuda_graph": "data-dependent expert loads cannot be captured in one graph"},
    "zero2": {"cuda_graph": "the graph engine has no sharded optimizer step"},
    "hsdp": {"cuda_graph": "the graph engine runs collectives over the world only"},
}  # fmt: skip
PATTERNS = BASES + MODIFIERS
#: what a modifier sets unless the user's --set says otherwise (launch_bound: ~2000 kernels)
PRESETS: dict[str, dict[str, float | int]] = {
    "launch_bound": {"layers": 286, "launch_overhead": 6e-6, "fwd_time": 0.008, "bwd_time": 0.016},
    "multinode": {"inter_bandwidth": 50e9 / 6, "inter_alpha": 30e-6},
    "cuda_graph": {"layers": 64},  # 448 graph nodes: their device gaps are a serial term
    # pp: 2 layers per stage, a microbatch's pass long against its 4 MiB transfer
    "pp": {"layers": 2, "fwd_time": 0.16, "bwd_time": 0.32, "act_bytes": 4_194_304},
}


@dataclass(frozen=True)
class PatternSpec:
    """A base parallelism plus modifiers, e.g. ``fsdp`` or ``ddp+heavy_tail+multinode``."""

    base: str
    modifiers: frozenset[str]

    @property
    def name(self) -> str:
        return "+".join([self.base, *sorted(self.modifiers)])

    def has(self, modifier: str) -> bool:
        return modifier in self.modifiers

    def cycle(self, accum_steps: int) -> int:
        """ProfilerSteps after which every rank is back in step (one optimizer step)."""
        return accum_steps if self.has("grad_accum") else 1


def parse_pattern(text: str) -> PatternSpec:
    """``fsdp``, ``heavy_tail``, ``fsdp,multinode`` ... (a modifier alone means DDP + it)."""
    parts = [t.strip().lower() for t in text.replace("+", ",").split(",") if t.strip()]
    bases = [t for t in parts if t in BASES]
    unknown = [t for t in parts if t not in PATTERNS]
    if unknown or len(bases) > 1 or not parts:
        raise ValueError(
            f"--pattern {text!r}: expected one of {', '.join(BASES)} and any of "
            f"{', '.join(MODIFIERS)} joined by ',' (e.g. fsdp,multinode)"
        )
    spec = PatternSpec(bases[0] if bases else "ddp", frozenset(t for t in parts if t in MODIFIERS))
    for modifier in sorted(spec.modifiers):
        why = REFUSED.get(spec.base, {}).get(modifier)
        if why is None and modifier == "cuda_graph" and spec.has("act_ckpt"):
            why = "a recomputed forward inside the graph is not modelled"
        if why:
            raise ValueError(f"--pattern {text!r}: {spec.base} does not combine with {modifier} "
                             f"({why})")  # fmt: skip
    return spec
