"""Single-factor comparisons (seed step 6): baseline vs a variant that differs in one factor.

A comparison is ``not_comparable`` (with every difference listed) when the two locks differ in
anything but the declared factor. Otherwise the same requests (same seeds) run on the variant
and, per cell and metric: Mann-Whitney U (two-sided), Hodges-Lehmann shift, a bootstrap CI of
the difference of the declared percentile; Holm correction across all the comparison's tests.
Capacity, latency and cost conclusions are kept apart.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kvbudget.accept.plan_checks import Comparison
from kvbudget.accept.result import ComparisonResult, Ledger, MetricDelta, Verdict
from kvbudget.accept.stats import compare, holm
from kvbudget.accept.targets import CellRun

#: fewer samples than this per arm make a delta `untested`
MIN_AB_SAMPLES = 8


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
    """Deltas with intervals, Holm-adjusted, and the three separate conclusions."""
    raw = []
    for cell_id in sorted(variant_runs):
        for metric in comparison.metrics:
            a = _values(baseline_runs.get(cell_id, []), metric)
            b = _values(variant_runs[cell_id], metric)
            raw.append((cell_id, metric, compare(a, b, comparison.percentile, rng)))
    tested = [i for i, (_, _, r) in enumerate(raw) if r.p_value is not None]
    adjusted = holm([raw[i][2].p_value or 1.0 for i in tested]) if tested else []
    p_holm: dict[int, float] = dict(zip(tested, adjusted, strict=True))
    deltas: list[MetricDelta] = []
    worse: list[str] = []
    tail_worse: list[str] = []
    better: list[str] = []
    small: list[str] = []
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
                hl_shift=r.hl_shift,
                p_value=r.p_value,
                p_holm=ph,
                significant=significant,
            )
        )
        label = (
            f"{metric} in {cell_id} (HL shift {r.hl_shift:+.4g} s)"
            if r.hl_shift is not None
            else ""
        )
        if min(r.n_baseline, r.n_variant) < MIN_AB_SAMPLES:
            small.append(f"{metric} in {cell_id}: n={r.n_baseline}/{r.n_variant}")
        elif significant and r.hl_shift is not None and r.hl_shift > 0:
            worse.append(label)
        elif significant and r.hl_shift is not None and r.hl_shift < 0:
            better.append(label)
        if (
            min(r.n_baseline, r.n_variant) >= MIN_AB_SAMPLES
            and r.pct_diff_low is not None
            and r.pct_diff_low > 0
        ):
            # the declared percentile (the tail the stop conditions judge) got slower, even
            # where the whole-distribution test did not move
            tail_worse.append(
                f"{metric} p{comparison.percentile:g} in {cell_id} "
                f"({r.pct_diff:+.4g} s, 95% CI [{r.pct_diff_low:.4g}, {r.pct_diff_high:.4g}])"
            )
    verdict: Verdict
    if worse or tail_worse:
        verdict = "fail"
        reasons = []
        if worse:
            reasons.append("significantly slower (Holm-adjusted): " + "; ".join(worse))
        if tail_worse:
            reasons.append(
                f"p{comparison.percentile:g} slower (bootstrap 95% CI of the difference above 0, "
                "not multiplicity-corrected): " + "; ".join(tail_worse)
            )
    elif small or not deltas:
        verdict = "untested"
        reasons = ["too few samples for a comparison: " + ("; ".join(small) or "no cells")]
    else:
        verdict = "pass"
        reasons = [
            f"no metric significantly slower at alpha {comparison.alpha} (Holm over "
            f"{len(tested)} tests)"
        ]
    tokens_a = _pool_tokens(baseline_ledger)
    tokens_b = _pool_tokens(variant_ledger)
    capacity = "KV pool tokens not known"
    if tokens_a and tokens_b:
        capacity = f"KV pool {tokens_a} -> {tokens_b} tokens ({tokens_b / tokens_a:.2f}x, computed)"
    latency = ("faster: " + "; ".join(better) if better else "no significant speed-up") + (
        " | slower: " + "; ".join(worse + tail_worse) if worse or tail_worse else ""
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
