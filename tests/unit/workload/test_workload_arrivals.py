"""Arrival processes against hand-worked values and scipy's distributions."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from kvbudget.errors import ConfigError
from kvbudget.workload.arrivals import (
    burst_arrivals,
    constant_arrivals,
    gamma_arrivals,
    poisson_arrivals,
    ramp_arrivals,
    trace_arrivals,
)


def test_constant_hand_worked() -> None:
    assert constant_arrivals(2.0, num_requests=4).tolist() == [0.0, 0.5, 1.0, 1.5]
    # duration 2 s at 2/s: 0, 0.5, 1.0, 1.5 (2.0 is not < 2.0)
    assert constant_arrivals(2.0, duration_s=2.0).tolist() == [0.0, 0.5, 1.0, 1.5]
    assert constant_arrivals(2.0, num_requests=3, duration_s=10.0).tolist() == [0.0, 0.5, 1.0]


def test_poisson_gaps_are_exponential() -> None:
    t = poisson_arrivals(np.random.default_rng(3), 5.0, num_requests=4000)
    gaps = np.diff(np.concatenate([[0.0], t]))
    assert t.size == 4000
    # independent check: scipy's KS test against Exponential(scale=1/5)
    assert stats.kstest(gaps, "expon", args=(0, 0.2)).pvalue > 0.01
    assert np.mean(gaps) == pytest.approx(0.2, rel=0.05)


def test_poisson_duration_count_is_poisson() -> None:
    rng = np.random.default_rng(4)
    counts = [poisson_arrivals(rng, 10.0, duration_s=5.0).size for _ in range(300)]
    # N(5 s) ~ Poisson(50): mean 50, variance 50
    assert np.mean(counts) == pytest.approx(50, abs=2)
    assert np.var(counts) == pytest.approx(50, rel=0.3)
    assert max(poisson_arrivals(rng, 10.0, duration_s=5.0)) < 5.0


def test_gamma_cv_and_mean() -> None:
    t = gamma_arrivals(np.random.default_rng(5), 4.0, 3.0, num_requests=20000)
    gaps = np.diff(np.concatenate([[0.0], t]))
    assert np.mean(gaps) == pytest.approx(0.25, rel=0.06)
    assert np.std(gaps) / np.mean(gaps) == pytest.approx(3.0, rel=0.1)
    # KS with a milder cv (shape 1/9 puts gaps below float resolution of the cumsum)
    t2 = gamma_arrivals(np.random.default_rng(6), 4.0, 1.5, num_requests=4000)
    gaps2 = np.diff(np.concatenate([[0.0], t2]))
    shape = 1 / 1.5**2
    assert stats.kstest(gaps2, "gamma", args=(shape, 0, 0.25 / shape)).pvalue > 0.01


def test_burst_ramp_trace() -> None:
    assert burst_arrivals(3, at_s=1.5).tolist() == [1.5, 1.5, 1.5]
    ramp = ramp_arrivals(np.random.default_rng(0), [(1.0, 2.0), (2.0, 1.0)], process="constant")
    assert ramp.tolist() == [0.0, 1.0, 2.0, 2.5]
    assert trace_arrivals([5.0, 3.0, 4.0], speedup=2.0).tolist() == [0.0, 0.5, 1.0]
    assert trace_arrivals([5.0, 3.0, 4.0], duration_s=1.5).tolist() == [0.0, 1.0]


def test_ramp_rates_per_stage() -> None:
    t = ramp_arrivals(np.random.default_rng(1), [(10.0, 100.0), (40.0, 100.0)])
    first = np.sum(t < 100.0)
    second = np.sum(t >= 100.0)
    assert first == pytest.approx(1000, rel=0.1)
    assert second == pytest.approx(4000, rel=0.1)


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: poisson_arrivals(np.random.default_rng(0), 1.0), "num_requests"),
        (lambda: poisson_arrivals(np.random.default_rng(0), 0.0, num_requests=1), "rate_per_s"),
        (lambda: gamma_arrivals(np.random.default_rng(0), 1.0, -1.0, num_requests=1), "cv"),
        (lambda: constant_arrivals(1.0, duration_s=-1.0), "duration_s"),
        (lambda: ramp_arrivals(np.random.default_rng(0), []), "stages"),
    ],
)
def test_bad_arrival_inputs(call: object, field: str) -> None:
    with pytest.raises(ConfigError) as err:
        call()  # type: ignore[operator]
    assert err.value.field == field
    assert "\n" not in err.value.one_line()
