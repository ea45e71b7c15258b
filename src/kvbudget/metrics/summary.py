"""Percentiles with confidence intervals, sample counts and small-sample warnings.

- Percentile: numpy's default (linear interpolation between order statistics, Hyndman–Fan
  type 7).
- Confidence interval (two-sided, ``confidence`` default 0.95), method ``auto``:

  * ``bootstrap`` (used when ``n <= bootstrap_max_n``, default 5,000): resample the data
    with replacement ``num_bootstrap`` times (default 1,000) with the seeded generator passed
    in, take the percentile of each resample, report the ``(1-c)/2`` and ``(1+c)/2``
    quantiles of those (percentile bootstrap).
  * ``order`` (larger samples, where the bootstrap would cost ``n * B`` work for no gain):
    the distribution-free order-statistic interval ``[x_(l), x_(u)]`` with
    ``l = Binom(n, q).ppf((1-c)/2)`` and ``u = Binom(n, q).ppf((1+c)/2) + 1`` (1-based,
    clamped to ``1..n``); coverage >= c for continuous data.

- Small-sample warning: a ``p`` percentile needs about ``10 / (1 - p/100)`` samples (20 for
  p50, 100 for p90, 200 for p95, 1,000 for p99) so that about ten samples lie beyond it;
  with fewer the estimate sits on the last few order statistics and the summary says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
from scipy import stats as sps

DEFAULT_PERCENTILES: tuple[float, ...] = (50.0, 90.0, 95.0, 99.0)
SAMPLES_BEYOND = 10.0


def required_samples(percentile: float) -> int:
    """Samples needed before a ``percentile`` claim is not flagged: ``ceil(10/(1-p/100))``."""
    tail = 1.0 - percentile / 100.0
    if tail <= 0:
        return 10**9
    return math.ceil(SAMPLES_BEYOND / tail - 1e-9)


def percentile_key(percentile: float) -> str:
    """``50.0 -> "p50"``, ``99.9 -> "p99.9"``."""
    return f"p{percentile:g}"


@dataclass(frozen=True, slots=True)
class PercentileEstimate:
    percentile: float
    value: float | None
    ci_low: float | None
    ci_high: float | None
    n: int
    method: str
    warning: str | None = None


@dataclass(frozen=True, slots=True)
class DistributionSummary:
    """Summary of one metric's samples."""

    metric: str
    unit: str
    n: int
    mean: float | None
    minimum: float | None
    maximum: float | None
    confidence: float
    percentiles: dict[str, PercentileEstimate] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()

    def value(self, percentile: float) -> float | None:
        est = self.percentiles.get(percentile_key(percentile))
        return None if est is None else est.value

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-able dict."""
        out = asdict(self)
        out["warnings"] = list(self.warnings)
        return out


def _bootstrap_ci(
    values: np.ndarray,
    qs: Sequence[float],
    rng: np.random.Generator,
    num_bootstrap: int,
    confidence: float,
) -> list[tuple[float, float]]:
    n = values.size
    batch = max(1, min(num_bootstrap, 4_000_000 // max(n, 1)))
    rows: list[np.ndarray] = []
    done = 0
    while done < num_bootstrap:
        b = min(batch, num_bootstrap - done)
        idx = rng.integers(0, n, size=(b, n))
        rows.append(np.percentile(values[idx], list(qs), axis=1).T.reshape(b, len(qs)))
        done += b
    boot = np.concatenate(rows, axis=0)
    lo_q = (1.0 - confidence) / 2.0 * 100.0
    hi_q = (1.0 + confidence) / 2.0 * 100.0
    out: list[tuple[float, float]] = []
    for j in range(len(qs)):
        lo, hi = np.percentile(boot[:, j], [lo_q, hi_q])
        out.append((float(lo), float(hi)))
    return out


def order_statistic_ci(
    sorted_values: np.ndarray, percentile: float, confidence: float
) -> tuple[float, float]:
    """Distribution-free CI of a percentile from order statistics (see module doc)."""
    n = sorted_values.size
    q = percentile / 100.0
    alpha = 1.0 - confidence
    lo = int(sps.binom.ppf(alpha / 2.0, n, q))
    hi = int(sps.binom.ppf(1.0 - alpha / 2.0, n, q)) + 1
    lo = min(max(lo, 1), n)
    hi = min(max(hi, 1), n)
    return float(sorted_values[lo - 1]), float(sorted_values[hi - 1])


def summarize(
    values: Sequence[float] | np.ndarray,
    rng: np.random.Generator,
    *,
    metric: str = "value",
    unit: str = "s",
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
    confidence: float = 0.95,
    num_bootstrap: int = 1000,
    method: str = "auto",
    bootstrap_max_n: int = 5000,
) -> DistributionSummary:
    """Percentiles with CIs, mean, min, max, sample count and small-sample warnings."""
    if method not in ("auto", "bootstrap", "order"):
        raise ValueError(f"method={method!r}; use 'auto', 'bootstrap' or 'order'")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence={confidence} must lie strictly between 0 and 1")
    x = np.asarray(values, dtype=np.float64)
    x = x[np.isfinite(x)]
    n = int(x.size)
    if n == 0:
        empty = {
            percentile_key(p): PercentileEstimate(
                p, None, None, None, 0, "none", f"{metric}: no samples"
            )
            for p in percentiles
        }
        return DistributionSummary(
            metric, unit, 0, None, None, None, confidence, empty, (f"{metric}: no samples",)
        )
    chosen = method
    if method == "auto":
        chosen = "bootstrap" if n <= bootstrap_max_n else "order"
    point = np.percentile(x, list(percentiles))
    if chosen == "bootstrap":
        cis = _bootstrap_ci(x, percentiles, rng, num_bootstrap, confidence)
    else:
        xs = np.sort(x)
        cis = [order_statistic_ci(xs, p, confidence) for p in percentiles]
    ests: dict[str, PercentileEstimate] = {}
    warnings: list[str] = []
    for p, v, (lo, hi) in zip(percentiles, point, cis, strict=True):
        need = required_samples(p)
        warn = None
        if n < need:
            warn = (
                f"{metric} {percentile_key(p)} from {n} samples: fewer than {need} "
                f"(= 10/(1-{p / 100:g})) needed; the estimate rests on the top few samples"
            )
            warnings.append(warn)
        ests[percentile_key(p)] = PercentileEstimate(p, float(v), lo, hi, n, chosen, warn)
    return DistributionSummary(
        metric=metric,
        unit=unit,
        n=n,
        mean=float(np.mean(x)),
        minimum=float(np.min(x)),
        maximum=float(np.max(x)),
        confidence=confidence,
        percentiles=ests,
        warnings=tuple(warnings),
    )
