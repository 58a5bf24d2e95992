"""The light first half of ``analyze``: options checked, studies found, the study cache asked.

Nothing here imports pandas, scipy or the classifier, so a repeat ``analyze`` whose document is
in the study-level cache (:mod:`tracescale.parallel.study_cache`) renders without them; a miss
hands what was found here to :mod:`tracescale.pipeline`, which does the work.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tracescale.classify.rules import load_rules
from tracescale.errors import InvalidTraceError, UsageError
from tracescale.ingest.discover import StudySpec, discover
from tracescale.ingest.sniff import DEFAULT_MEMORY_BUDGET

_STEPS_HELP = (
    "--steps takes ProfilerStep numbers as inspect shows them: 12: or #12: (from #12 on), "
    "10:14 (#10 to #13), #12 (that step alone); negative numbers count from the last step "
    "(:-1 drops the last)"
)


def _step_bound(text: str, spec: str) -> int | None:
    text = text.strip().removeprefix("#")
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"{_STEPS_HELP}; got {spec!r}") from None


def parse_steps(spec: str | None) -> slice | None:
    """``"12:"``/``"#12:"`` -> slice(12, None) of ProfilerStep numbers; ``"#12"`` -> that step.

    Bounds are step numbers (half-open, like a slice), not positions: a trace whose steps are
    #10..#14 keeps #12..#14 with ``12:``. Negative bounds count from each rank's last step. A
    bare number (``2``) is rejected: it could mean step #2 or the first two steps.
    """
    if spec is None or spec.strip() == "":
        return None
    spec = spec.strip()
    parts = spec.split(":")
    if len(parts) == 1:
        if not spec.startswith("#"):
            raise UsageError(
                f"--steps {spec} is ambiguous: write #{spec} for ProfilerStep#{spec} alone, "
                f"{spec}: for #{spec} onwards, or :{spec} for the steps before #{spec}"
            )
        n = _step_bound(spec, spec)
        if n is None or n < 0:
            raise UsageError(f"{_STEPS_HELP}; got {spec!r}")
        return slice(n, n + 1)
    if len(parts) != 2:
        raise UsageError(f"{_STEPS_HELP}; got {spec!r}")
    return slice(_step_bound(parts[0], spec), _step_bound(parts[1], spec))


def fail_on_rejected(specs: Sequence[StudySpec]) -> None:
    """--strict: a file left out at discovery fails the run before any work starts."""
    rejected = [r for spec in specs for r in spec.rejected]
    if rejected:
        path, why = rejected[0]
        more = f"; {len(rejected)} files rejected" if len(rejected) > 1 else ""
        raise InvalidTraceError(f"{why} (--strict{more})", path=path)


#: Map options that never change a result; any other (a test's worker, a progress callback
#: that must see every file) runs the analysis without the study-level cache.
_NEUTRAL_OPTIONS = frozenset({"cache_dir", "no_cache", "scheduler"})


@dataclass(frozen=True)
class Prepared:
    """What the light half found: the studies, the steps selection, and the study cache's say.

    ``key`` is None when the study cache is off for this run (``no_cache``, a file that cannot
    be versioned, an option outside the key); ``doc`` is the cached document on a hit.
    """

    specs: list[StudySpec]
    steps: slice | None
    key: dict[str, Any] | None = None
    doc: dict[str, Any] | None = None
    cache_dir: str | None = None


def prepare(
    path: str,
    *,
    mode: str = "auto",
    project: Sequence[int] | None = None,
    what_if: Mapping[str, float] | None = None,
    rules: str | None = None,
    steps: str | slice | None = None,
    assumptions: Mapping[str, str] | None = None,
    strict: bool = False,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    gpus_per_node: int | None = None,
    inter_node_bandwidth: float | None = None,
    inter_node_latency: float | None = None,
    replay: bool = True,
    progress: Callable[..., Any] | None = None,
    parallel_options: Mapping[str, Any] | None = None,
    study_cache: bool = True,
) -> Prepared:
    """Check the options, discover the studies, and look the document up in the study cache
    (the same options as :func:`tracescale.pipeline.analyze`)."""
    if mode not in ("auto", "strong", "weak"):
        raise UsageError(f"--mode must be auto, strong or weak, not {mode!r}")
    load_rules(rules)  # fail fast on a bad rules file, before any worker starts
    step_slice = parse_steps(steps) if isinstance(steps, str) or steps is None else steps
    specs = discover(path)
    if strict:
        fail_on_rejected(specs)
    parallel_options = parallel_options or {}
    if (
        not study_cache
        or parallel_options.get("no_cache")
        or progress is not None
        or not set(parallel_options) <= _NEUTRAL_OPTIONS
    ):
        return Prepared(specs, step_slice)
    from tracescale.parallel.study_cache import StudyCache, study_key

    options = {
        "mode": mode,
        "project": None if project is None else [int(n) for n in project],
        "what_if": None if what_if is None else {str(k): float(v) for k, v in what_if.items()},
        "assumptions": None if assumptions is None else dict(assumptions),
        "rules_file": rules,
        "steps": None if step_slice is None else [step_slice.start, step_slice.stop],
        "strict": strict,
        "topology": [gpus_per_node, inter_node_bandwidth, inter_node_latency],
        "replay": replay,
    }
    try:
        key = study_key(path, specs, options, rules, memory_budget)
    except (TypeError, ValueError):  # an option value JSON cannot hold: not cached
        key = None
    if key is None:
        return Prepared(specs, step_slice)
    cache_dir = parallel_options.get("cache_dir")
    return Prepared(specs, step_slice, key, StudyCache(cache_dir).get(key), cache_dir)


#: ``analyze``'s keyword arguments that :func:`prepare` takes as they are.
_ANALYSIS_OPTIONS = frozenset(
    [
        "mode",
        "project",
        "what_if",
        "rules",
        "steps",
        "assumptions",
        "strict",
        "memory_budget",
        "gpus_per_node",
        "inter_node_bandwidth",
        "inter_node_latency",
        "replay",
    ]
)
#: ``analyze``'s keyword arguments that change how, not what, it computes.
_HOW_OPTIONS = frozenset(["jobs", "show_progress", "progress", "use_study_cache", "prepared"])


def prepare_from(path: str, kwargs: Mapping[str, Any]) -> Prepared:
    """:func:`prepare` for ``analyze(path, **kwargs)``: the map's options sorted out here."""
    return prepare(
        path,
        **{k: v for k, v in kwargs.items() if k in _ANALYSIS_OPTIONS},
        progress=kwargs.get("progress"),
        parallel_options={
            k: v for k, v in kwargs.items() if k not in _ANALYSIS_OPTIONS | _HOW_OPTIONS
        },
        study_cache=bool(kwargs.get("use_study_cache", True)),
    )


def store_document(prepared: Prepared, doc: Mapping[str, Any]) -> None:
    """Keep ``doc`` in the study cache under ``prepared``'s key, unless a file changed while
    it was being analyzed (the key is taken again and must be the same)."""
    if prepared.key is None:
        return
    from tracescale.parallel.study_cache import StudyCache, study_key

    key = prepared.key
    try:
        again = study_key(
            key["path"],
            prepared.specs,
            key["options"],
            key["options"]["rules_file"],
            key["memory_budget"],
        )
    except (OSError, TypeError, ValueError):
        return
    if again == key:
        StudyCache(prepared.cache_dir).put(key, doc)
