"""A/B comparison of latency metrics between a baseline and one variant.

For each metric: Mann–Whitney U (two-sided) with AUC, the Hodges–Lehmann shift
(variant - baseline) with its CI, the bootstrap CI of the difference of each requested
percentile; then Holm's correction across the metrics' Mann–Whitney p-values. A metric's
``direction`` is ``lower`` (variant smaller, i.e. faster), ``higher`` or ``no_difference``
(Holm-adjusted p above alpha). Latency conclusions only: capacity and cost are compared
elsewhere and never folded into these.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from kvbudget.metrics.stats import (
    MannWhitney,
    PercentileDiff,
    ShiftEstimate,
    bootstrap_percentile_diff,
    hodges_lehmann,
    holm,
    mann_whitney,
)


@dataclass(frozen=True, slots=True)
class MetricComparison:
    metric: str
    n_baseline: int
    n_variant: int
    mann_whitney: MannWhitney | None
    shift: ShiftEstimate | None
    percentile_diffs: tuple[PercentileDiff, ...]
    p_adjusted: float | None = None
    direction: str = "untested"
    note: str | None = None


@dataclass(frozen=True, slots=True)
class AbResult:
    alpha: float
    comparisons: tuple[MetricComparison, ...] = field(default_factory=tuple)

    def by_metric(self) -> dict[str, MetricComparison]:
        return {c.metric: c for c in self.comparisons}


def compare(
    baseline: Mapping[str, Sequence[float] | np.ndarray],
    variant: Mapping[str, Sequence[float] | np.ndarray],
    rng: np.random.Generator,
    *,
    alpha: float = 0.05,
    percentiles: Sequence[float] = (50.0, 99.0),
    confidence: float = 0.95,
    num_bootstrap: int = 1000,
    min_samples: int = 2,
) -> AbResult:
    """Compare every metric present in both mappings (order of ``baseline``)."""
    partial: list[MetricComparison] = []
    for metric, base_values in baseline.items():
        if metric not in variant:
            continue
        b = np.asarray(base_values, dtype=np.float64)
        v = np.asarray(variant[metric], dtype=np.float64)
        b, v = b[np.isfinite(b)], v[np.isfinite(v)]
        if b.size < min_samples or v.size < min_samples:
            partial.append(
                MetricComparison(
                    metric,
                    int(b.size),
                    int(v.size),
                    None,
                    None,
                    (),
                    note=f"fewer than {min_samples} samples in an arm; not tested",
                )
            )
            continue
        mw = mann_whitney(v, b)
        hl = hodges_lehmann(v, b, confidence=confidence)
        diffs = tuple(
            bootstrap_percentile_diff(
                v, b, q, rng, confidence=confidence, num_bootstrap=num_bootstrap
            )
            for q in percentiles
        )
        partial.append(MetricComparison(metric, int(b.size), int(v.size), mw, hl, diffs))
    tested = [c for c in partial if c.mann_whitney is not None]
    adj = holm([c.mann_whitney.p_value for c in tested if c.mann_whitney], alpha=alpha)
    adjusted = dict(zip([c.metric for c in tested], adj.adjusted, strict=True))
    out: list[MetricComparison] = []
    for c in partial:
        if c.mann_whitney is None or c.shift is None:
            out.append(c)
            continue
        p = adjusted[c.metric]
        if p > alpha:
            direction = "no_difference"
        else:
            direction = "lower" if c.shift.shift < 0 or c.mann_whitney.auc < 0.5 else "higher"
        out.append(
            MetricComparison(
                c.metric,
                c.n_baseline,
                c.n_variant,
                c.mann_whitney,
                c.shift,
                c.percentile_diffs,
                p,
                direction,
            )
        )
    return AbResult(alpha, tuple(out))
