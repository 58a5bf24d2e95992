"""Do the runs of a study look like one job? In: the per-rank results of each run; out: warnings.

A study fits one model to runs at several world sizes, which only means something when they run
the same program. Nothing in a Kineto trace names the job, so the check compares what the runs
do: the operator and range names their main threads run (``RankResult.range_totals``, every
range no rule claimed: ``aten::*`` ops, ``nn.Module`` and user ranges) and, as a model hint, the
message sizes of their collectives. Scaling out adds communication (claimed by rules, so not in
these names) but keeps the model's operators; a different model or a training run next to an
inference run shares few of them.

Two runs "look like different jobs" when their operator-name sets overlap by less than
:data:`MIN_NAME_JACCARD` (shared names over all names) and the names they share cover less
than :data:`MIN_TIME_COVERAGE` of either run's operator time. Measured on the shared real
traces: two ResNet-50 jobs with different data loaders share 82% of names (89% of time); DLRM
against ResNet-50, BERT-like or linear models shares 13-28% of names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tracescale.classify.rank import RankResult
from tracescale.groups import group_codes, group_sum
from tracescale.ingest.discover import StudySpec
from tracescale.table import table_of

#: Below this share of common operator names (Jaccard)...
MIN_NAME_JACCARD = 0.5
#: ...and below this share of operator time in common names, two runs are different jobs.
MIN_TIME_COVERAGE = 0.5
#: Runs with fewer distinct names than this carry too little evidence to compare.
MIN_NAMES = 5


@dataclass(frozen=True)
class JobSignature:
    """What one execution runs: seconds per operator/range name, and its collective sizes."""

    label: str
    op_seconds: dict[str, float]
    message_bytes: frozenset[int]


def job_signature(label: str, ranks: Sequence[RankResult]) -> JobSignature:
    """The signature of one execution from its ranks' results (all steps, all ranks)."""
    seconds: dict[str, float] = {}
    sizes: set[int] = set()
    for r in ranks:
        totals = table_of(r, "range_totals")
        if len(totals) and {"name", "seconds"} <= set(totals.columns):
            codes, (names,) = group_codes(totals.col("name"))
            sums = group_sum(codes, totals.col("seconds"), len(names))
            for name, sec in zip(names.tolist(), sums.tolist(), strict=True):
                seconds[str(name)] = seconds.get(str(name), 0.0) + float(sec)
        coll = table_of(r, "collectives")
        if len(coll) and "bytes" in coll.columns:
            sizes.update(int(b) for b in coll.col("bytes").tolist() if int(b) > 0)
    return JobSignature(label, seconds, frozenset(sizes))


def study_signatures(spec: StudySpec, results: Mapping[str, object]) -> list[JobSignature]:
    """One signature per execution (run folder) of a study, from its ranks' results
    (``results`` maps a rank file to its RankResult; failed files are left out)."""
    out = []
    for run in spec.runs:
        for group in run.groups:
            ranks = [r for f in group.files if isinstance(r := results.get(f.path), RankResult)]
            if ranks:
                out.append(job_signature(f"{group.folder} (world size {run.world_size})", ranks))
    return out


def _coverage(a: JobSignature, common: set[str]) -> float:
    total = sum(a.op_seconds.values())
    return sum(a.op_seconds[n] for n in common) / total if total > 0 else 0.0


def _top(sig: JobSignature, names: set[str], k: int = 3) -> str:
    ranked = sorted(names, key=lambda n: (-sig.op_seconds.get(n, 0.0), n))[:k]  # ties by name
    return ", ".join(ranked) + (f" (+{len(names) - k} more)" if len(names) > k else "")


def different_job(a: JobSignature, b: JobSignature) -> str | None:
    """The evidence that ``a`` and ``b`` are different jobs, or None when they look alike."""
    na, nb = set(a.op_seconds), set(b.op_seconds)
    if len(na) < MIN_NAMES and len(nb) < MIN_NAMES:
        return None
    common = na & nb
    jaccard = len(common) / len(na | nb)
    coverage = min(_coverage(a, common), _coverage(b, common))
    if jaccard >= MIN_NAME_JACCARD or coverage >= MIN_TIME_COVERAGE:
        return None
    text = (
        f"runs look like different jobs: {a.label} and {b.label} share {len(common)} of "
        f"{len(na | nb)} operator names ({jaccard:.0%}), covering {coverage:.0%} of the "
        f"operator time of the less similar one"
    )
    if na - nb:
        text += f"; only in {a.label}: {_top(a, na - nb)}"
    if nb - na:
        text += f"; only in {b.label}: {_top(b, nb - na)}"
    if a.message_bytes and b.message_bytes:
        shared = len(a.message_bytes & b.message_bytes)
        text += (
            f"; collective message sizes in common: {shared} of "
            f"{len(a.message_bytes | b.message_bytes)}"
        )
    return text


def check_same_job(signatures: Sequence[JobSignature]) -> list[str]:
    """One warning per execution that does not look like the first (the reference) one."""
    if len(signatures) < 2:
        return []
    ref = signatures[0]
    return [w for s in signatures[1:] if (w := different_job(ref, s)) is not None]
