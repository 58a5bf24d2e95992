"""Before/after comparison of two analyze documents: matched runs, bootstrap intervals, verdicts.

Pure functions over plain dicts (the JSON contract), so ``compare`` works the same on fresh
traces and on saved studies. Significance comes from a bootstrap over the per-step times each
run carries (``step_times_s``): a change counts only when its 90% interval excludes zero.

A run whose step time is NaN, missing or zero on either side (a damaged or hand-edited
study), or whose step times hold a NaN or infinity, is ``not comparable``: it is never
"unchanged", and with a gate set the gate fails with exit 3 (the input cannot be gated), not 1
(which claims a measured regression). A CI gate must never pass on no data.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tracescale.comparison.ops import biggest_op_change, op_changes
from tracescale.errors import EXIT_INVALID_TRACE, EXIT_OK, EXIT_REGRESSION, UsageError
from tracescale.report.fmt import label, num
from tracescale.report.names import short_name

#: Changes smaller than this (in %) are "unchanged" even when significant: noise floor for CI.
MIN_CHANGE_PCT = 1.0
BOOTSTRAP_SAMPLES = 2000
CONFIDENCE = 0.90
#: How runs are paired: by equal world size, or (``any``) in world-size order whatever N is.
MATCHES = ("size", "any")


def _d(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def _l(x: Any) -> list[Any]:
    return x if isinstance(x, list) else []


def _studies(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in _l(doc.get("studies")) if isinstance(s, dict)]


def _runs_by_n(study: dict[str, Any]) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for r in _l(study.get("runs")):
        n = num(_d(r).get("world_size"))
        if n is not None:
            out[int(n)] = r
    return out


def bootstrap_change_pct(
    before: list[float], after: list[float], *, seed: int = 0, samples: int = BOOTSTRAP_SAMPLES
) -> tuple[float, float] | None:
    """90% interval of the change of the mean step time in %, resampling steps on both sides
    (in ``MAX_RESAMPLED`` blocks of consecutive steps where a side has more steps)."""
    from tracescale.scaling.blocks import resampled_means  # not scaling/__init__'s imports

    b, a = np.asarray(before, dtype=float), np.asarray(after, dtype=float)
    if b.size < 2 or a.size < 2 or not (np.all(np.isfinite(b)) and np.all(np.isfinite(a))):
        return None
    rng = np.random.default_rng(seed)
    mb = resampled_means(b, rng, samples)
    ma = resampled_means(a, rng, samples)
    change = (ma / mb - 1.0) * 100.0
    tail = (1.0 - CONFIDENCE) / 2.0 * 100.0
    lo, hi = np.percentile(change, [tail, 100.0 - tail])
    return float(lo), float(hi)


def _spread_significant(rb: dict[str, Any], ra: dict[str, Any]) -> bool:
    """Without per-step times: significant when each mean lies outside the other's p10-p90."""
    sb, sa = _d(rb.get("step_time_s")), _d(ra.get("step_time_s"))
    mb, ma = num(sb.get("mean")), num(sa.get("mean"))
    lo_b, hi_b, lo_a, hi_a = (num(s.get(k)) for s in (sb, sa) for k in ("p10", "p90"))
    if None in (mb, ma, lo_b, hi_b, lo_a, hi_a):
        return False
    assert mb is not None and ma is not None
    assert lo_b is not None and hi_b is not None and lo_a is not None and hi_a is not None
    return not (lo_b <= ma <= hi_b) and not (lo_a <= mb <= hi_a)


#: The verdict of a run that has no step time to compare on one side.
NOT_COMPARABLE = "not comparable"
#: A step time outside [1 ns, 10^6 s] is no measurement (the trace clock's resolution; no
#: profiled step lasts 11 days): a damaged or hand-edited study, and no ratio of it is finite.
STEP_RANGE_S = (1e-9, 1e6)


def _step(value: Any) -> bool:
    v = num(value)
    return v is not None and STEP_RANGE_S[0] <= v <= STEP_RANGE_S[1]


def no_data(run: dict[str, Any]) -> str | None:
    """Why ``run`` has no step time to compare (None when it has one): the gate's input."""
    st = run.get("step_time_s")
    if not isinstance(st, dict) or "mean" not in st:
        return "no step time"
    if not _step(st.get("mean")):
        return f"step time {st.get('mean')!r}"
    times = run.get("step_times_s")
    if isinstance(times, list) and not all(_step(x) for x in times):
        bad = sum(not _step(x) for x in times)
        return f"{bad} of {len(times)} step times NaN, infinite or outside 1 ns to 1,000,000 s"
    return None


def _verdict(change_pct: float | None, significant: bool) -> str:
    if change_pct is None or not significant or abs(change_pct) < MIN_CHANGE_PCT:
        return "unchanged"
    return "regressed" if change_pct > 0 else "improved"


def compare_runs(
    rb: dict[str, Any], ra: dict[str, Any], *, study: int = 0, seed: int = 0
) -> dict[str, Any]:
    """One matched world size: step time change, its interval, per-category deltas, verdict
    (:data:`NOT_COMPARABLE`, with ``not_comparable`` saying why, when a side has no data)."""
    sides = (("before", no_data(rb)), ("after", no_data(ra)))
    problems = [f"{side}: {why}" for side, why in sides if why]
    mb = num(_d(rb.get("step_time_s")).get("mean"))
    ma = num(_d(ra.get("step_time_s")).get("mean"))
    change = (ma / mb - 1.0) * 100.0 if mb and ma is not None and not problems else None
    tb = [float(x) for x in _l(rb.get("step_times_s")) if num(x) is not None]
    ta = [float(x) for x in _l(ra.get("step_times_s")) if num(x) is not None]
    ci = None if problems else bootstrap_change_pct(tb, ta, seed=seed)
    if problems:
        significant, method = False, NOT_COMPARABLE
    elif ci is not None:
        significant = bool(ci[0] > 0 or ci[1] < 0)
        from tracescale.scaling.blocks import MAX_RESAMPLED

        blocked = max(len(tb), len(ta)) > MAX_RESAMPLED
        method = (
            f"bootstrap over {MAX_RESAMPLED:,} blocks of steps"
            if blocked
            else "bootstrap over steps"
        )
    else:
        significant, method = _spread_significant(rb, ra), "p10-p90 overlap (no per-step times)"
    bb, ba = _d(rb.get("breakdown_s")), _d(ra.get("breakdown_s"))
    cats = list(dict.fromkeys([*bb, *ba]))
    delta = {c: (num(ba.get(c)) or 0.0) - (num(bb.get(c)) or 0.0) for c in cats}
    main = max(delta, key=lambda c: abs(delta[c])) if delta else None
    return {
        "study": study,
        "world_size": ra.get("world_size"),
        "world_size_before": rb.get("world_size"),
        "step_time_s": {
            "before": mb,
            "after": ma,
            "change_pct": change,
            "ci90": list(ci) if ci is not None else None,
            "significant": significant,
            "method": method,
        },
        "breakdown_s": {"before": bb, "after": ba},
        "breakdown_delta_s": delta,
        "main_change": {"category": main, "delta_s": delta[main]} if main else None,
        "op_changes": op_changes(rb, ra),
        "verdict": NOT_COMPARABLE if problems else _verdict(change, significant),
        **({"not_comparable": "; ".join(problems)} if problems else {}),
    }


def _pair_studies(
    before: list[dict[str, Any]], after: list[dict[str, Any]], warnings: list[str]
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Studies paired by identical path when every path matches, else by order (said so)."""
    if len(before) == 1 and len(after) == 1:
        return [(before[0], after[0])]
    paths_b = [s.get("path") for s in before]
    by_path = {s.get("path"): s for s in after}
    if len(before) == len(after) and set(paths_b) == set(by_path) and len(by_path) == len(after):
        warnings.append(f"{len(before)} studies on each side, matched by path")
        return [(s, by_path[s.get("path")]) for s in before]
    k = min(len(before), len(after))
    warnings.append(
        f"studies matched by order ({len(before)} before, {len(after)} after; "
        f"{k} compared): "
        + "; ".join(
            f"{b.get('path')} vs {a.get('path')}" for b, a in zip(before, after, strict=False)
        )
    )
    return list(zip(before[:k], after[:k], strict=True))


def _assumed(study: dict[str, Any]) -> bool:
    """Scaling of a side with one run rests on the 1/N assumption, not on a measured fit."""
    return bool(_d(study.get("scaling")).get("assumed")) or len(_runs_by_n(study)) < 2


def _study_summary(sb: dict[str, Any], sa: dict[str, Any], unmatched: list[Any]) -> dict[str, Any]:
    """Serial fraction, Amdahl ceiling and projected speedup before and after.

    Each side says whether its figures are assumed (one run) and over which world size its
    speedups are taken: speedups over different baselines are not comparable, so the projected
    step times travel with them.
    """
    cb, ca = _d(sb.get("scaling")), _d(sa.get("scaling"))
    pb = {_d(p).get("world_size"): _d(p) for p in _l(cb.get("projections"))}
    pa = {_d(p).get("world_size"): _d(p) for p in _l(ca.get("projections"))}
    common = sorted((n for n in pb if n in pa and num(n) is not None), key=lambda n: num(n) or 0.0)
    base = {"before": cb.get("baseline_world_size"), "after": ca.get("baseline_world_size")}
    return {
        "before_path": sb.get("path"),
        "after_path": sa.get("path"),
        "assumed": {"before": _assumed(sb), "after": _assumed(sa)},
        "baseline_world_size": base,
        "speedups_comparable": base["before"] == base["after"],
        "serial_fraction": {
            "before": num(_d(cb.get("serial_fraction")).get("total")),
            "after": num(_d(ca.get("serial_fraction")).get("total")),
        },
        "amdahl_limit": {
            "before": num(cb.get("amdahl_limit")),
            "after": num(ca.get("amdahl_limit")),
        },
        "projected_speedup": [
            {
                "world_size": n,
                "before": num(pb[n].get("speedup")),
                "after": num(pa[n].get("speedup")),
                "step_time_s": {
                    "before": num(pb[n].get("step_time_s")),
                    "after": num(pa[n].get("step_time_s")),
                },
            }
            for n in common
        ],
        "unmatched": unmatched,
    }


def _overall(verdicts: list[str]) -> str:
    """Regressed if any run regressed (CI is conservative), else not comparable if any run has
    no data, improved if any improved."""
    if "regressed" in verdicts:
        return "regressed"
    if NOT_COMPARABLE in verdicts:
        return NOT_COMPARABLE
    return "improved" if "improved" in verdicts else "unchanged"


def gate(runs: list[dict[str, Any]], fail_on_regression_pct: float | None) -> dict[str, Any]:
    """The CI gate: fails when a matched run is significantly slower by more than the threshold
    (exit 1), or when a run is not comparable (exit 3: no data to gate on, said in the reasons)."""
    reasons, blind = [], []
    if fail_on_regression_pct is not None:
        for r in runs:
            if r.get("verdict") == NOT_COMPARABLE:
                blind.append(
                    f"N={r.get('world_size')}: not comparable ({r.get('not_comparable')}); "
                    "a gate never passes on no data"
                )
            st = _d(r.get("step_time_s"))
            ch = num(st.get("change_pct"))
            if st.get("significant") and ch is not None and ch > fail_on_regression_pct:
                reasons.append(
                    f"N={r.get('world_size')}: step time {ch:+.1f}% "
                    f"(more than {fail_on_regression_pct:g}%, significant)"
                )
    failed = bool(reasons or blind)
    code = EXIT_INVALID_TRACE if blind else EXIT_REGRESSION if reasons else EXIT_OK
    return {
        "fail_on_regression_pct": fail_on_regression_pct,
        "failed": failed,
        "exit_code": code,
        "reasons": blind + reasons,
    }


def gate_exit_code(compare_doc: dict[str, Any], fail_on_regression_pct: float | None) -> int:
    """Exit status for ``--fail-on-regression PCT``: 3 when a run is not comparable, else 1
    on a significant slowdown over PCT."""
    return int(gate(_l(compare_doc.get("runs")), fail_on_regression_pct)["exit_code"])


def _headline(r: dict[str, Any]) -> str:
    st = _d(r["step_time_s"])
    ch = num(st.get("change_pct"))
    nb = r.get("world_size_before", r["world_size"])
    at = f"N={r['world_size']}" if nb == r["world_size"] else f"N={nb} -> N={r['world_size']}"
    text = f"{at}: {r['verdict']}"
    if r["verdict"] == NOT_COMPARABLE:
        return f"{text} ({r.get('not_comparable')})"
    if ch is not None:
        text += f", step time {ch:+.1f}%"
    main = _d(r.get("main_change"))
    if main.get("category") and r["verdict"] != "unchanged":
        text += f"; biggest change: {label(str(main['category'])).lower()} "
        text += f"{(num(main.get('delta_s')) or 0.0) * 1e3:+.1f} ms per step"
    op = biggest_op_change(_d(r.get("op_changes")))
    if op is not None and r["verdict"] != "unchanged":
        text += (
            f"; biggest op change: `{short_name(str(op['name']))}` ({op['change']}, "
            f"{(num(op.get('delta_s')) or 0.0) * 1e3:+.1f} ms per step)"
        )
    return text


def _pair_runs(
    nb: dict[int, dict[str, Any]], na: dict[int, dict[str, Any]], match: str, warnings: list[str]
) -> tuple[list[tuple[int, int]], list[dict[str, Any]]]:
    """(before N, after N) pairs and the unmatched runs, by the ``match`` rule.

    ``size``: equal world sizes; two single runs of different sizes are still compared (they
    are one trace or one run each: the only comparison there is), with a warning. ``any``:
    in world-size order whatever N is, each pair of different sizes warned about.
    """
    common = sorted(set(nb) & set(na))
    if match == "size" and (common or len(nb) != 1 or len(na) != 1):
        pairs = [(n, n) for n in common]
    else:
        pairs = list(zip(sorted(nb), sorted(na), strict=False))
    for b, a in pairs:
        if b != a:
            warnings.append(
                f"N={b} before compared with N={a} after: different world sizes, so step "
                "times and categories compare but scaling does not"
            )
    used_b, used_a = {b for b, _ in pairs}, {a for _, a in pairs}
    unmatched = [{"side": "before", "world_size": n} for n in sorted(set(nb) - used_b)]
    unmatched += [{"side": "after", "world_size": n} for n in sorted(set(na) - used_a)]
    return pairs, unmatched


def _kind_warning(rb: dict[str, Any], ra: dict[str, Any]) -> str | None:
    """A GPU run against one without GPU events (stripped, or a CPU-only run) is said: its
    step times compare, but the GPU categories of one side are empty by construction."""
    kb, ka = rb.get("kind"), ra.get("kind")
    if kb == ka:
        return None
    nb, na = rb.get("world_size"), ra.get("world_size")
    at = f"N={na}" if nb == na else f"N={nb} -> N={na}"
    if "gpu" in (kb, ka):
        side = "after" if kb == "gpu" else "before"
        what = f"the {side} side has no GPU events ({kb} run before, {ka} run after)"
    else:
        what = f"a {kb} run before, a {ka} run after"
    return f"{at}: {what}: step times compare, GPU categories do not"


def compare_docs(
    before: dict[str, Any],
    after: dict[str, Any],
    *,
    fail_on_regression_pct: float | None = None,
    seed: int = 0,
    match: str = "size",
) -> dict[str, Any]:
    """The compare document: matched runs, per-run and overall verdicts, op changes, the gate.

    ``match``: :data:`MATCHES`. Raises :class:`UsageError` when no run can be paired.
    """
    if match not in MATCHES:
        raise UsageError(f"--match must be one of {', '.join(MATCHES)}, not {match!r}")
    warnings: list[str] = []
    pairs = _pair_studies(_studies(before), _studies(after), warnings)
    runs: list[dict[str, Any]] = []
    studies = []
    for i, (sb, sa) in enumerate(pairs):
        nb, na = _runs_by_n(sb), _runs_by_n(sa)
        run_pairs, unmatched = _pair_runs(nb, na, match, warnings)
        for u in unmatched:
            warnings.append(f"N={u['world_size']} only measured {u['side']}: not compared")
        runs += [compare_runs(nb[b], na[a], study=i, seed=seed + a) for b, a in run_pairs]
        warnings += [w for b, a in run_pairs if (w := _kind_warning(nb[b], na[a]))]
        studies.append(_study_summary(sb, sa, unmatched))
    if not runs:
        sizes = [
            ", ".join(str(n) for n in sorted(_runs_by_n(s))) or "none"
            for side in (before, after)
            for s in _studies(side)[:1]
        ]
        raise UsageError(
            "cannot compare: no world size is measured on both sides "
            f"(before: {sizes[0] if sizes else 'none'}; after: {sizes[-1] if sizes else 'none'}); "
            "--match any compares runs of different world sizes in order"
        )
    return {
        "schema_version": 1,
        "before": before,
        "after": after,
        "runs": runs,
        "studies": studies,
        "verdict": _overall([r["verdict"] for r in runs]),
        "summary": [_headline(r) for r in runs],
        "warnings": warnings,
        "gate": gate(runs, fail_on_regression_pct),
        "settings": {
            "confidence": CONFIDENCE,
            "bootstrap_samples": BOOTSTRAP_SAMPLES,
            "seed": seed,
            "min_change_pct": MIN_CHANGE_PCT,
            "match": match,
        },
    }
