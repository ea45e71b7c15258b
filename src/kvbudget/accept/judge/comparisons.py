"""Single-factor comparisons (seed step 6): baseline vs a variant that differs in one factor.

A comparison is ``not_comparable`` (with every difference listed) when the two locks differ in
anything but the declared factor. Otherwise the same requests (same seeds) run on the variant
and, per cell and metric: Mann-Whitney U (two-sided, Holm-adjusted), Hodges-Lehmann shift, and a
bootstrap CI of the difference of the declared percentile at ``1 - alpha / m`` (Bonferroni over
the comparison's m tests). The verdict and its headline read only these corrected statistics.
Capacity, latency and cost conclusions are kept apart.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from kvbudget.accept.judge.stats import compare, holm
from kvbudget.accept.plan.checks import Comparison
from kvbudget.accept.result import ComparisonResult, Ledger, MetricDelta, Verdict
from kvbudget.accept.targets.base import CellRun

#: fewer samples than this per arm make a delta `untested`
MIN_AB_SAMPLES = 8
#: upper bound on bootstrap resamples per test (the corrected tails need more than 1,000)
MAX_RESAMPLES = 10_000


def _values(runs: Sequence[CellRun], metric: str) -> list[float]:
    out = []
    for run in runs:
        for rec in run.records:
            value = getattr(rec, metric)
            if rec.status == "ok" and not rec.warmup and value is not None:
                out.append(float(value))
    return out


def not_comparable(
    comparison: Comparison, lines: list[str], why: str, *, verdict: Verdict = "not_comparable"
) -> ComparisonResult:
    """A comparison that produced no deltas (``not_comparable``, or ``untested`` when a run
    could not start), with its one reason and the lock differences."""
    return ComparisonResult(
        name=comparison.name,
        factor=comparison.factor,
        verdict=verdict,
        reasons=[why],
        differences=lines,
        percentile=comparison.percentile,
        alpha=comparison.alpha,
    )


def _pool_tokens(ledger: Ledger) -> int | None:
    value = ledger.pool.get("kv_cache_tokens")
    return int(value) if isinstance(value, int | float) else None


def judge_comparison(
    comparison: Comparison,
    *,
    baseline_runs: dict[str, list[CellRun]],
    variant_runs: dict[str, list[CellRun]],
    baseline_ledger: Ledger,
    variant_ledger: Ledger,
    differences: list[str],
    baseline_value: object,
    variant_value: object,
    rng: np.random.Generator,
) -> ComparisonResult:
    """Deltas with corrected intervals and Holm-adjusted tests; the verdict and its headline
    follow the corrected statistics only.

    Two families of m tests each (m = the (cell, metric) pairs with samples in both arms): the
    Mann-Whitney location shift, Holm-adjusted, and the bootstrap interval of the declared
    percentile's difference at ``1 - alpha / m`` (Bonferroni). Slower in either family fails
    the comparison; an uncorrected interval never decides it.
    """
    pairs = []
    for cell_id in sorted(variant_runs):
        for metric in comparison.metrics:
            a = _values(baseline_runs.get(cell_id, []), metric)
            b = _values(variant_runs[cell_id], metric)
            pairs.append((cell_id, metric, a, b))
    num_tests = max(1, sum(1 for _, _, a, b in pairs if a and b))
    confidence = 1.0 - comparison.alpha / num_tests
    resamples = min(MAX_RESAMPLES, max(1000, math.ceil(40 * num_tests / comparison.alpha)))
    raw = [
        (
            cell_id,
            metric,
            compare(a, b, comparison.percentile, rng, resamples, confidence=confidence),
        )
        for cell_id, metric, a, b in pairs
    ]
    tested = [i for i, (_, _, r) in enumerate(raw) if r.p_value is not None]
    adjusted = holm([raw[i][2].p_value or 1.0 for i in tested]) if tested else []
    p_holm: dict[int, float] = dict(zip(tested, adjusted, strict=True))
    deltas: list[MetricDelta] = []
    worse: list[str] = []
    better: list[str] = []
    small: list[str] = []
    pct = f"p{comparison.percentile:g}"
    ci_text = f"{100 * confidence:.3g}% CI"
    for i, (cell_id, metric, r) in enumerate(raw):
        ph = p_holm.get(i)
        significant = ph is not None and ph < comparison.alpha
        deltas.append(
            MetricDelta(
                cell_id=cell_id,
                metric=metric,
                n_baseline=r.n_baseline,
                n_variant=r.n_variant,
                baseline_pct=r.baseline_pct,
                variant_pct=r.variant_pct,
                pct_diff=r.pct_diff,
                pct_diff_low=r.pct_diff_low,
                pct_diff_high=r.pct_diff_high,
                ci_confidence=confidence,
                hl_shift=r.hl_shift,
                p_value=r.p_value,
                p_holm=ph,
                significant=significant,
            )
        )
        if min(r.n_baseline, r.n_variant) < MIN_AB_SAMPLES:
            small.append(f"{metric} in {cell_id}: n={r.n_baseline}/{r.n_variant}")
            continue
        facts = []
        direction = 0
        if r.pct_diff_low is not None and r.pct_diff_low > 0:
            direction = 1
        elif r.pct_diff_high is not None and r.pct_diff_high < 0:
            direction = -1
        if direction and r.pct_diff is not None and r.baseline_pct:
            facts.append(
                f"{pct} {r.pct_diff:+.4g} s ({100 * r.pct_diff / r.baseline_pct:+.0f}%, "
                f"{ci_text} [{r.pct_diff_low:.4g}, {r.pct_diff_high:.4g}])"
            )
        shift = r.hl_shift or 0.0
        if significant and shift != 0.0:
            facts.append(f"HL shift {shift:+.4g} s, p(Holm) {ph:.3g}")
            direction = direction or (1 if shift > 0 else -1)
        if not facts:
            continue
        label = f"{metric} in {cell_id}: " + "; ".join(facts)
        (worse if direction > 0 else better).append(label)
    verdict: Verdict
    if worse:
        verdict = "fail"
        reasons = ["slower (corrected over " + f"{num_tests} tests): " + " | ".join(worse)]
        if better:
            reasons.append("faster (corrected): " + " | ".join(better))
    elif small or not deltas:
        verdict = "untested"
        reasons = ["too few samples for a comparison: " + ("; ".join(small) or "no cells")]
    else:
        verdict = "pass"
        reasons = [
            f"nothing slower at alpha {comparison.alpha} after correction over {num_tests} tests "
            f"(Holm for the location shift, {ci_text} for the {pct} difference)"
            + ("; faster: " + " | ".join(better) if better else "")
        ]
    tokens_a = _pool_tokens(baseline_ledger)
    tokens_b = _pool_tokens(variant_ledger)
    capacity = "KV pool tokens not known"
    if tokens_a and tokens_b:
        capacity = f"KV pool {tokens_a} -> {tokens_b} tokens ({tokens_b / tokens_a:.2f}x, computed)"
    latency = ("faster: " + " | ".join(better) if better else "nothing faster after correction") + (
        " || slower: " + " | ".join(worse) if worse else ""
    )
    conclusions = {
        "capacity": capacity,
        "latency": latency,
        "cost": "not concluded: the plan gives no prices; capacity and latency above are "
        "the inputs a cost estimate needs",
    }
    uneven = _uneven_counts(deltas)
    if uneven:
        conclusions["sample_counts"] = (
            "unequal completed requests in " + "; ".join(uneven) + ": each percentile is over "
            "the requests that finished in the cell's window, so the arm that finished fewer is "
            "judged on the requests it managed to serve"
        )
    return ComparisonResult(
        name=comparison.name,
        factor=comparison.factor,
        verdict=verdict,
        reasons=reasons,
        baseline_value=baseline_value,
        variant_value=variant_value,
        differences=differences,
        percentile=comparison.percentile,
        alpha=comparison.alpha,
        deltas=deltas,
        capacity_ratio=(tokens_b / tokens_a) if tokens_a and tokens_b else None,
        conclusions=conclusions,
    )


#: completed-request counts of the two arms differing by more than this share are flagged
UNEVEN_COUNT_SHARE = 0.1


def _uneven_counts(deltas: Sequence[MetricDelta]) -> list[str]:
    """Cells whose two arms completed clearly different numbers of requests (one per cell)."""
    seen: dict[str, str] = {}
    for d in deltas:
        most = max(d.n_baseline, d.n_variant)
        if most and abs(d.n_baseline - d.n_variant) > UNEVEN_COUNT_SHARE * most:
            seen.setdefault(d.cell_id, f"{d.cell_id} ({d.n_baseline} vs {d.n_variant})")
    return list(seen.values())
