"""Two-sample statistics for A/B comparisons and the isolation audit.

Conventions: ``x`` is the first sample (variant, or the attacker's "hit" arm), ``y`` the
second (baseline, or the control arm). All tests assume independent observations within
and between samples; none assumes normality. Formulas are in docs/statistics.md.

- :func:`mann_whitney` — scipy's Mann–Whitney U (asymptotic with tie and continuity
  correction for large samples, exact for small ones without ties), with
  ``U_x`` = number of pairs with ``x > y`` plus half the ties, and ``auc = U_x / (n_x n_y)``
  = ``P(X > Y) + P(X = Y)/2``.
- :func:`hodges_lehmann` — shift estimate ``median(x_i - y_j)`` over all pairs and its
  distribution-free CI from the order statistics of the pairwise differences (Moses/Lehmann),
  the rank index taken from the normal approximation of U.
- :func:`bootstrap_percentile_diff` — percentile(x) - percentile(y) with a percentile
  bootstrap CI (independent resampling of each sample, seeded).
- :func:`holm` — Holm's step-down adjustment of a family of p-values.
- :func:`ks_one_sided` — scipy's two-sample Kolmogorov–Smirnov, one-sided.
- :func:`min_detectable_auc` — the smallest AUC a Mann–Whitney test detects with the given
  power (normal approximation, Noether 1987).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np
from scipy import stats as sps

Alternative = Literal["two-sided", "less", "greater"]
_DIRECT_PAIRS_MAX = 4_000_000


def _arr(values: Sequence[float] | np.ndarray, name: str) -> np.ndarray:
    a = np.asarray(values, dtype=np.float64)
    a = a[np.isfinite(a)]
    if a.size == 0:
        raise ValueError(f"sample {name} is empty; a two-sample test needs values in both")
    return a


@dataclass(frozen=True, slots=True)
class MannWhitney:
    u_x: float
    p_value: float
    auc: float
    n_x: int
    n_y: int
    alternative: str

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def mann_whitney(
    x: Sequence[float] | np.ndarray,
    y: Sequence[float] | np.ndarray,
    *,
    alternative: Alternative = "two-sided",
) -> MannWhitney:
    """Mann–Whitney U test of x vs y. ``alternative="less"``: x tends to be smaller."""
    a, b = _arr(x, "x"), _arr(y, "y")
    res = sps.mannwhitneyu(a, b, alternative=alternative)
    u = float(res.statistic)
    return MannWhitney(u, float(res.pvalue), u / (a.size * b.size), a.size, b.size, alternative)


def auc(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    """``P(X > Y) + P(X = Y)/2`` estimated as ``U_x / (n_x n_y)``."""
    return mann_whitney(x, y).auc


def _kth_pairwise_diff(xs: np.ndarray, ys: np.ndarray, k: int) -> float:
    """k-th smallest (1-based) of ``x_i - y_j`` over all pairs; xs, ys sorted."""
    total = xs.size * ys.size
    k = min(max(k, 1), total)
    if total <= _DIRECT_PAIRS_MAX:
        d = np.subtract.outer(xs, ys).ravel()
        return float(np.partition(d, k - 1)[k - 1])
    lo = float(xs[0] - ys[-1])
    hi = float(xs[-1] - ys[0])

    def count_le(v: float) -> int:  # pairs with x - y <= v  <=>  y >= x - v
        return int(np.sum(ys.size - np.searchsorted(ys, xs - v, side="left")))

    for _ in range(200):
        mid = (lo + hi) / 2.0
        if count_le(mid) >= k:
            hi = mid
        else:
            lo = mid
        if hi - lo <= 1e-12 * max(1.0, abs(hi)):
            break
    # snap to an actual difference: the smallest x_i - y_j that is >= lo
    idx = np.searchsorted(ys, xs - hi, side="left")  # first y with x - y <= hi
    cand = xs[idx < ys.size] - ys[idx[idx < ys.size]]
    return float(cand.max()) if cand.size else hi


@dataclass(frozen=True, slots=True)
class ShiftEstimate:
    shift: float
    ci_low: float
    ci_high: float
    confidence: float
    n_x: int
    n_y: int

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def hodges_lehmann(
    x: Sequence[float] | np.ndarray,
    y: Sequence[float] | np.ndarray,
    *,
    confidence: float = 0.95,
) -> ShiftEstimate:
    """Hodges–Lehmann shift ``median(x_i - y_j)`` with its distribution-free CI."""
    xs, ys = np.sort(_arr(x, "x")), np.sort(_arr(y, "y"))
    m, n = xs.size, ys.size
    total = m * n
    if total % 2:
        shift = _kth_pairwise_diff(xs, ys, (total + 1) // 2)
    else:
        shift = 0.5 * (
            _kth_pairwise_diff(xs, ys, total // 2) + _kth_pairwise_diff(xs, ys, total // 2 + 1)
        )
    z = float(sps.norm.ppf(0.5 + confidence / 2.0))
    c_alpha = math.floor(total / 2.0 - z * math.sqrt(total * (m + n + 1) / 12.0))
    c_alpha = max(c_alpha, 1)
    low = _kth_pairwise_diff(xs, ys, c_alpha)
    high = _kth_pairwise_diff(xs, ys, total + 1 - c_alpha)
    return ShiftEstimate(float(shift), low, high, confidence, m, n)


@dataclass(frozen=True, slots=True)
class PercentileDiff:
    percentile: float
    diff: float
    ci_low: float
    ci_high: float
    confidence: float
    num_bootstrap: int

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def bootstrap_percentile_diff(
    x: Sequence[float] | np.ndarray,
    y: Sequence[float] | np.ndarray,
    percentile: float,
    rng: np.random.Generator,
    *,
    confidence: float = 0.95,
    num_bootstrap: int = 1000,
) -> PercentileDiff:
    """``percentile(x) - percentile(y)`` with a percentile-bootstrap CI (seeded)."""
    a, b = _arr(x, "x"), _arr(y, "y")
    diff = float(np.percentile(a, percentile) - np.percentile(b, percentile))
    boots = np.empty(num_bootstrap, dtype=np.float64)
    per = max(1, 2_000_000 // max(a.size + b.size, 1))
    done = 0
    while done < num_bootstrap:
        k = min(per, num_bootstrap - done)
        ra = a[rng.integers(0, a.size, size=(k, a.size))]
        rb = b[rng.integers(0, b.size, size=(k, b.size))]
        boots[done : done + k] = np.percentile(ra, percentile, axis=1) - np.percentile(
            rb, percentile, axis=1
        )
        done += k
    lo, hi = np.percentile(boots, [50.0 * (1 - confidence), 50.0 * (1 + confidence)])
    return PercentileDiff(percentile, diff, float(lo), float(hi), confidence, num_bootstrap)


@dataclass(frozen=True, slots=True)
class HolmResult:
    p_values: tuple[float, ...]
    adjusted: tuple[float, ...]
    reject: tuple[bool, ...]
    alpha: float


def holm(p_values: Sequence[float], *, alpha: float = 0.05) -> HolmResult:
    """Holm step-down: ``adj_(i) = max_{j<=i} min(1, (m - j + 1) p_(j))`` (sorted order)."""
    p = np.asarray(p_values, dtype=np.float64)
    m = p.size
    order = np.argsort(p, kind="stable")
    scaled = np.minimum(1.0, p[order] * (m - np.arange(m)))
    adj_sorted = np.maximum.accumulate(scaled) if m else scaled
    adjusted = np.empty(m, dtype=np.float64)
    adjusted[order] = adj_sorted
    return HolmResult(
        tuple(float(v) for v in p),
        tuple(float(v) for v in adjusted),
        tuple(bool(v <= alpha) for v in adjusted),
        alpha,
    )


@dataclass(frozen=True, slots=True)
class KsResult:
    statistic: float
    p_value: float
    alternative: str
    n_x: int
    n_y: int


def ks_one_sided(
    x: Sequence[float] | np.ndarray,
    y: Sequence[float] | np.ndarray,
    *,
    x_smaller: bool = True,
) -> KsResult:
    """One-sided two-sample KS: is ``x`` stochastically smaller (or larger) than ``y``?

    ``x_smaller=True`` runs scipy's ``ks_2samp(x, y, alternative="greater")``, whose
    alternative is ``F_x(t) > F_y(t)`` for some t — x's CDF above y's, i.e. x smaller.
    """
    a, b = _arr(x, "x"), _arr(y, "y")
    alt = "greater" if x_smaller else "less"
    res = sps.ks_2samp(a, b, alternative=alt)
    return KsResult(float(res.statistic), float(res.pvalue), alt, a.size, b.size)


def min_detectable_auc(
    n_x: int,
    n_y: int,
    *,
    alpha: float = 0.05,
    power: float = 0.8,
    two_sided: bool = False,
) -> float:
    """Smallest AUC a Mann–Whitney test at ``alpha`` detects with ``power`` (Noether).

    ``AUC_min = 1/2 + (z_{1-a} + z_{power}) * sqrt((n_x + n_y + 1) / (12 n_x n_y))`` with
    ``a = alpha`` one-sided or ``alpha/2`` two-sided; capped at 1. Symmetric: an effect in the
    other direction needs ``1 - AUC_min``.
    """
    if n_x < 1 or n_y < 1:
        raise ValueError(f"n_x={n_x}, n_y={n_y}: both samples need at least one value")
    if not (0 < alpha < 1 and 0 < power < 1):
        raise ValueError(f"alpha={alpha} and power={power} must lie in (0, 1)")
    a = alpha / 2.0 if two_sided else alpha
    z = float(sps.norm.ppf(1.0 - a) + sps.norm.ppf(power))
    se = math.sqrt((n_x + n_y + 1) / (12.0 * n_x * n_y))
    return min(1.0, 0.5 + z * se)
