"""Statistics for the acceptance run: a thin adapter over :mod:`kvbudget.metrics`.

* percentile summaries: :func:`kvbudget.metrics.summary.summarize` (type-7 percentiles,
  percentile-bootstrap CIs up to 5,000 samples, order-statistic CIs above, small-sample
  warnings below ``10 / (1 - q)`` samples);
* A/B per cell and metric: Mann-Whitney U (two-sided, ``scipy.stats.mannwhitneyu``),
  Hodges-Lehmann shift ``median(variant_j - baseline_i)``, percentile-bootstrap CI of
  ``percentile(variant) - percentile(baseline)``; Holm step-down across the tests.

This module only converts to the result document's shapes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kvbudget.accept.result import MetricSummary, PercentileCI
from kvbudget.metrics import stats as mstats
from kvbudget.metrics.summary import summarize as metrics_summarize

#: always summarized: every percentile a stop condition can gate (``stop.ttft_s.p95`` ...)
PERCENTILES: tuple[float, ...] = (50.0, 90.0, 95.0, 99.0)
DEFAULT_RESAMPLES = 1000


def summary_percentiles(chosen: Sequence[float] = PERCENTILES) -> tuple[float, ...]:
    """``chosen`` (``--metric-percentiles``) with p50/p90/p95/p99 added, in order: the stop
    conditions and the charts' p95 are always there, whatever the report shows."""
    return tuple(sorted({*PERCENTILES, *chosen}))


def summarize(
    values: Sequence[float],
    rng: np.random.Generator,
    num_resamples: int = DEFAULT_RESAMPLES,
    *,
    metric: str = "value",
    percentiles: Sequence[float] = PERCENTILES,
) -> MetricSummary:
    """p50/p90/p95/p99 and ``percentiles`` with CIs, the mean, the count and small-sample
    warnings (each resample gives every percentile, so adding one leaves the others' CIs as
    they were)."""
    arr = np.asarray([v for v in values if v is not None], dtype=float)
    arr = arr[np.isfinite(arr)]
    if arr.size == 0:
        return MetricSummary(n=0, warnings=["no samples"])
    s = metrics_summarize(
        arr,
        rng,
        metric=metric,
        percentiles=summary_percentiles(percentiles),
        num_bootstrap=num_resamples,
    )
    out: dict[str, PercentileCI] = {}
    for key, est in s.percentiles.items():
        if est.value is not None:
            out[key] = PercentileCI(value=est.value, low=est.ci_low, high=est.ci_high)
    return MetricSummary(n=s.n, mean=s.mean, percentiles=out, warnings=list(s.warnings))


@dataclass(frozen=True, slots=True)
class ABResult:
    n_baseline: int
    n_variant: int
    p_value: float | None
    hl_shift: float | None
    baseline_pct: float | None
    variant_pct: float | None
    pct_diff: float | None
    pct_diff_low: float | None
    pct_diff_high: float | None


def hodges_lehmann(baseline: np.ndarray, variant: np.ndarray) -> float:
    """Median of all pairwise differences ``variant_j - baseline_i``."""
    return mstats.hodges_lehmann(variant, baseline).shift


def compare(
    baseline: Sequence[float],
    variant: Sequence[float],
    percentile: float,
    rng: np.random.Generator,
    num_resamples: int = DEFAULT_RESAMPLES,
    *,
    confidence: float = 0.95,
) -> ABResult:
    """Mann-Whitney U (two-sided), Hodges-Lehmann shift, bootstrap CI of a percentile diff
    at ``confidence`` (a caller correcting for m tests passes ``1 - alpha / m``)."""
    a = np.asarray(baseline, dtype=float)
    b = np.asarray(variant, dtype=float)
    if a.size == 0 or b.size == 0:
        return ABResult(int(a.size), int(b.size), None, None, None, None, None, None, None)
    mw = mstats.mann_whitney(b, a, alternative="two-sided")
    diff = mstats.bootstrap_percentile_diff(
        b, a, percentile, rng, confidence=confidence, num_bootstrap=num_resamples
    )
    return ABResult(
        n_baseline=int(a.size),
        n_variant=int(b.size),
        p_value=mw.p_value,
        hl_shift=hodges_lehmann(a, b),
        baseline_pct=float(np.percentile(a, percentile)),
        variant_pct=float(np.percentile(b, percentile)),
        pct_diff=diff.diff,
        pct_diff_low=diff.ci_low,
        pct_diff_high=diff.ci_high,
    )


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values (same order as given)."""
    if not p_values:
        return []
    return list(mstats.holm(p_values).adjusted)
