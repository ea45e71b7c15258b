"""Percentile CIs and two-sample statistics against scipy, hand-worked values and
seeded simulations of known distributions."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from kvbudget.metrics.stats import (
    auc,
    bootstrap_percentile_diff,
    hodges_lehmann,
    holm,
    ks_one_sided,
    mann_whitney,
    min_detectable_auc,
)
from kvbudget.metrics.summary import required_samples, summarize


def test_required_samples_hand_worked() -> None:
    assert [required_samples(p) for p in (50, 90, 95, 99)] == [20, 100, 200, 1000]


def test_small_sample_warnings() -> None:
    s = summarize(np.arange(150.0), np.random.default_rng(0), metric="ttft_s")
    assert s.n == 150
    assert s.percentiles["p90"].warning is None
    assert s.percentiles["p95"].warning is not None
    assert "1000" in (s.percentiles["p99"].warning or "")
    assert len(s.warnings) == 2
    empty = summarize([], np.random.default_rng(0))
    assert empty.n == 0 and empty.percentiles["p50"].value is None


def test_summary_deterministic_with_seed() -> None:
    x = np.random.default_rng(1).exponential(size=200)
    a = summarize(x, np.random.default_rng(7))
    b = summarize(x, np.random.default_rng(7))
    assert a == b


def coverage(method: str, n: int, reps: int, q: float, seed: int) -> float:
    rng = np.random.default_rng(seed)
    true = -math.log(1 - q / 100)  # exponential(1) quantile
    hits = 0
    for _ in range(reps):
        s = summarize(
            rng.exponential(size=n), rng, percentiles=[q], method=method, num_bootstrap=400
        )
        est = s.percentiles[f"p{q:g}"]
        assert est.ci_low is not None and est.ci_high is not None
        hits += est.ci_low <= true <= est.ci_high
    return hits / reps


def test_bootstrap_ci_covers_true_percentile() -> None:
    # nominal 95 %; percentile bootstrap of p90 at n=300 is close to nominal
    assert coverage("bootstrap", 300, 80, 90.0, seed=3) >= 0.85


def test_order_statistic_ci_covers_true_percentile() -> None:
    assert coverage("order", 6000, 80, 99.0, seed=4) >= 0.88
    s = summarize(np.arange(10000.0), np.random.default_rng(0))
    assert s.percentiles["p50"].method == "order"


def test_auc_hand_worked() -> None:
    assert auc([1, 2, 3], [2]) == pytest.approx(0.5)  # 1<2, 2=2 (half), 3>2 -> 1.5/3
    assert auc([3, 4], [1, 2]) == pytest.approx(1.0)
    mw = mann_whitney([3, 4, 5], [1, 2, 0], alternative="greater")
    # exact: U=9 is the most extreme of C(6,3)=20 arrangements -> p = 1/20
    assert mw.p_value == pytest.approx(1 / 20)


def test_hodges_lehmann_recovers_normal_shift() -> None:
    rng = np.random.default_rng(5)
    x, y = rng.normal(1.0, 1.0, 400), rng.normal(0.0, 1.0, 400)
    hl = hodges_lehmann(x, y)
    assert hl.shift == pytest.approx(1.0, abs=0.15)
    assert hl.ci_low < 1.0 < hl.ci_high
    assert hl.shift == pytest.approx(float(np.median(np.subtract.outer(x, y))))
    assert hodges_lehmann([1, 2, 3], [0]).shift == 2.0


def test_hodges_lehmann_large_path_matches_direct_median() -> None:
    rng = np.random.default_rng(6)
    x, y = rng.lognormal(0, 1, 3000), rng.lognormal(0.2, 1, 2001)  # 6.0e6 pairs: bisection
    hl = hodges_lehmann(x, y)
    diffs = np.subtract.outer(x, y).ravel()
    assert hl.shift == pytest.approx(float(np.median(diffs)), abs=1e-9)
    assert hl.ci_low <= hl.shift <= hl.ci_high


def test_hodges_lehmann_ci_coverage() -> None:
    rng = np.random.default_rng(8)
    hits = sum(
        (lambda h: h.ci_low <= 0.5 <= h.ci_high)(
            hodges_lehmann(rng.standard_t(3, 40) + 0.5, rng.standard_t(3, 30))
        )
        for _ in range(200)
    )
    assert hits / 200 >= 0.91


def test_holm_hand_worked() -> None:
    # sorted 0.005*4=0.02, 0.01*3=0.03, 0.03*2=0.06, 0.04*1=0.04 -> cummax 0.02 0.03 0.06 0.06
    res = holm([0.01, 0.04, 0.03, 0.005], alpha=0.05)
    assert res.adjusted == pytest.approx((0.03, 0.06, 0.06, 0.02))
    assert res.reject == (True, False, False, True)
    assert holm([0.9, 0.8]).adjusted == pytest.approx((1.0, 1.0))


def test_ks_one_sided_direction() -> None:
    rng = np.random.default_rng(9)
    fast, slow = rng.normal(0.0, 1.0, 200), rng.normal(0.7, 1.0, 200)
    assert ks_one_sided(fast, slow, x_smaller=True).p_value < 0.001
    assert ks_one_sided(fast, slow, x_smaller=False).p_value > 0.5
    ref = stats.ks_2samp(fast, slow, alternative="greater")
    assert ks_one_sided(fast, slow).statistic == pytest.approx(ref.statistic)


def test_min_detectable_auc_formula_and_power() -> None:
    # hand: z_.95 + z_.80 = 1.6449 + 0.8416; sqrt(101 / (12 * 2500)) = 0.058023
    mde = min_detectable_auc(50, 50, alpha=0.05, power=0.8)
    assert mde == pytest.approx(0.5 + 2.4865 * 0.058023, abs=2e-4)
    assert min_detectable_auc(50, 50, two_sided=True) > mde
    assert min_detectable_auc(2, 2) == 1.0
    # simulated power at that effect: normal shift d with AUC = Phi(d / sqrt 2)
    d = math.sqrt(2) * stats.norm.ppf(mde)
    rng = np.random.default_rng(10)
    rejections = sum(
        stats.mannwhitneyu(rng.normal(d, 1, 50), rng.normal(0, 1, 50), alternative="greater").pvalue
        < 0.05
        for _ in range(400)
    )
    assert 0.72 <= rejections / 400 <= 0.88


def test_bootstrap_percentile_diff_covers_truth() -> None:
    rng = np.random.default_rng(11)
    x, y = rng.exponential(2.0, 400), rng.exponential(1.0, 400)
    res = bootstrap_percentile_diff(x, y, 50, np.random.default_rng(12))
    true = math.log(2) * (2.0 - 1.0)
    assert res.ci_low <= true <= res.ci_high
    assert res.diff == pytest.approx(float(np.median(x) - np.median(y)))
    again = bootstrap_percentile_diff(x, y, 50, np.random.default_rng(12))
    assert again == res
