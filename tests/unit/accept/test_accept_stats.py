"""A/B statistics and percentile summaries against independent references (scipy, by hand)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats as sps

from kvbudget.accept.judge.stats import compare, hodges_lehmann, holm, summarize


def test_percentiles_worked_by_hand() -> None:
    # values 1..100, linear interpolation (type 7): p = 1 + q/100 * 99
    s = summarize([float(v) for v in range(1, 101)], np.random.default_rng(0))
    assert s.n == 100
    assert s.pct("p50") == pytest.approx(50.5)
    assert s.pct("p90") == pytest.approx(90.1)
    assert s.pct("p95") == pytest.approx(95.05)
    assert s.pct("p99") == pytest.approx(99.01)
    assert s.mean == pytest.approx(50.5)
    # 100 samples: enough for p90 (10/(1-0.9) = 100), too few for p95 (200) and p99 (1000)
    assert not any("p90" in w for w in s.warnings)
    assert any("p95" in w for w in s.warnings) and any("p99" in w for w in s.warnings)


def test_bootstrap_ci_matches_scipy_bootstrap() -> None:
    rng = np.random.default_rng(1)
    data = rng.lognormal(mean=0.0, sigma=0.5, size=800)
    ours = summarize(data.tolist(), np.random.default_rng(2), num_resamples=2000).percentiles["p90"]
    ref = sps.bootstrap(
        (data,),
        lambda x, axis: np.percentile(x, 90, axis=axis),
        n_resamples=2000,
        method="percentile",
        random_state=np.random.default_rng(3),
    ).confidence_interval
    assert ours.low == pytest.approx(ref.low, rel=0.03)
    assert ours.high == pytest.approx(ref.high, rel=0.03)
    assert ours.low < ours.value < ours.high


def test_hodges_lehmann_brute_force_and_known_shift() -> None:
    rng = np.random.default_rng(4)
    a = rng.normal(1.0, 0.2, size=60)
    b = rng.normal(1.5, 0.2, size=70)
    pairs = [y - x for x, y in itertools.product(a, b)]
    assert hodges_lehmann(a, b) == pytest.approx(float(np.median(pairs)))
    assert hodges_lehmann(a, b) == pytest.approx(0.5, abs=0.1)


def test_mann_whitney_against_scipy_and_shift_detected() -> None:
    rng = np.random.default_rng(5)
    a = rng.exponential(1.0, size=200)
    b = rng.exponential(1.0, size=200) + 0.3
    r = compare(a.tolist(), b.tolist(), 95.0, np.random.default_rng(6))
    ref = sps.mannwhitneyu(b, a, alternative="two-sided")
    assert r.p_value == pytest.approx(float(ref.pvalue))
    assert r.p_value is not None and r.p_value < 1e-3
    # U statistic worked by hand: count of (b > a) pairs + half ties
    u = sum(1.0 if y > x else 0.5 if y == x else 0.0 for x in a for y in b)
    assert float(ref.statistic) == pytest.approx(u)
    assert r.pct_diff == pytest.approx(np.percentile(b, 95) - np.percentile(a, 95))
    assert r.pct_diff_low is not None and r.pct_diff_high is not None
    assert r.pct_diff_low <= r.pct_diff <= r.pct_diff_high


def test_same_distribution_not_significant() -> None:
    rng = np.random.default_rng(7)
    a = rng.normal(0, 1, size=300)
    b = rng.normal(0, 1, size=300)
    r = compare(a.tolist(), b.tolist(), 50.0, np.random.default_rng(8))
    assert r.p_value is not None and r.p_value > 0.05
    assert r.pct_diff_low is not None and r.pct_diff_high is not None
    assert r.pct_diff_low < 0 < r.pct_diff_high


def test_holm_worked_by_hand() -> None:
    # sorted p: 0.01*3=0.03, 0.03*2=0.06, 0.04*1=0.04 -> monotone max 0.06
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []


def test_empty_arm_is_untested() -> None:
    r = compare([], [1.0, 2.0], 95.0, np.random.default_rng(0))
    assert r.p_value is None and r.pct_diff is None
