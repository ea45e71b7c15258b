"""Statistics the acceptance run needs: percentile summaries and A/B comparisons.

Thin adapter over :mod:`kvbudget.metrics` (percentiles with bootstrap CIs, Mann-Whitney U,
Hodges-Lehmann, Holm). Until those land with a compatible API this module computes them
itself with numpy/scipy, with the definitions written out here:

* percentiles: numpy's default (linear interpolation, type 7);
* bootstrap CI: percentile method, ``num_resamples`` resamples drawn from the seeded generator;
* Mann-Whitney U: ``scipy.stats.mannwhitneyu`` two-sided (asymptotic with continuity
  correction for n > 8 per arm, exact below);
* Hodges-Lehmann shift: median of all pairwise differences ``variant_j - baseline_i``;
* Holm: step-down adjusted p-values, monotone, capped at 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from kvbudget.accept.result import MetricSummary, PercentileCI
from kvbudget.accept.verdicts import min_samples_for

PERCENTILES: tuple[str, ...] = ("p50", "p90", "p95", "p99")
DEFAULT_RESAMPLES = 1000
CONFIDENCE = 0.95


def _pct(values: np.ndarray, q: float, axis: int | None = None) -> np.ndarray:
    return np.asarray(np.percentile(values, q, axis=axis))


def bootstrap_percentile_ci(
    values: np.ndarray, q: float, rng: np.random.Generator, num_resamples: int = DEFAULT_RESAMPLES
) -> tuple[float, float]:
    """Percentile-method bootstrap CI of the ``q``-th percentile (q in 0..100)."""
    n = values.size
    idx = rng.integers(0, n, size=(num_resamples, n))
    estimates = _pct(values[idx], q, axis=1)
    alpha = (1.0 - CONFIDENCE) / 2.0
    low, high = np.quantile(estimates, [alpha, 1.0 - alpha])
    return float(low), float(high)


def summarize(
    values: Sequence[float], rng: np.random.Generator, num_resamples: int = DEFAULT_RESAMPLES
) -> MetricSummary:
    """p50/p90/p95/p99 with bootstrap CIs, the count, and small-sample warnings."""
    arr = np.asarray([v for v in values if v is not None and np.isfinite(v)], dtype=float)
    if arr.size == 0:
        return MetricSummary(n=0, warnings=["no samples"])
    out: dict[str, PercentileCI] = {}
    warnings: list[str] = []
    for name in PERCENTILES:
        q = float(name[1:])
        value = float(_pct(arr, q))
        low = high = None
        if arr.size >= 2:
            low, high = bootstrap_percentile_ci(arr, q, rng, num_resamples)
        out[name] = PercentileCI(value=value, low=low, high=high)
        needed = min_samples_for(name)
        if arr.size < needed:
            warnings.append(f"{name}: {arr.size} samples < {needed}; too few for this percentile")
    return MetricSummary(
        n=int(arr.size), mean=float(arr.mean()), percentiles=out, warnings=warnings
    )


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
    return float(np.median(np.subtract.outer(variant, baseline)))


def compare(
    baseline: Sequence[float],
    variant: Sequence[float],
    percentile: float,
    rng: np.random.Generator,
    num_resamples: int = DEFAULT_RESAMPLES,
) -> ABResult:
    """Mann-Whitney U (two-sided), Hodges-Lehmann shift, bootstrap CI of a percentile diff."""
    a = np.asarray(baseline, dtype=float)
    b = np.asarray(variant, dtype=float)
    if a.size == 0 or b.size == 0:
        return ABResult(int(a.size), int(b.size), None, None, None, None, None, None, None)
    p_value = float(sps.mannwhitneyu(b, a, alternative="two-sided").pvalue)
    pa = float(_pct(a, percentile))
    pb = float(_pct(b, percentile))
    ia = rng.integers(0, a.size, size=(num_resamples, a.size))
    ib = rng.integers(0, b.size, size=(num_resamples, b.size))
    diffs = _pct(b[ib], percentile, axis=1) - _pct(a[ia], percentile, axis=1)
    alpha = (1.0 - CONFIDENCE) / 2.0
    low, high = np.quantile(diffs, [alpha, 1.0 - alpha])
    return ABResult(
        n_baseline=int(a.size),
        n_variant=int(b.size),
        p_value=p_value,
        hl_shift=hodges_lehmann(a, b),
        baseline_pct=pa,
        variant_pct=pb,
        pct_diff=pb - pa,
        pct_diff_low=float(low),
        pct_diff_high=float(high),
    )


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values (same order as given)."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted
