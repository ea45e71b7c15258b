"""Length distributions: bounds, clipping and moments against numpy/scipy facts."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from kvbudget.workload.lengths import (
    EmpiricalLength,
    FixedLength,
    LognormalLength,
    NormalLength,
    UniformLength,
)


def rng() -> np.random.Generator:
    return np.random.default_rng(11)


def test_fixed_and_uniform() -> None:
    assert FixedLength(value=7).sample(rng(), 3).tolist() == [7, 7, 7]
    u = UniformLength(low=3, high=5).sample(rng(), 3000)
    assert set(u.tolist()) == {3, 4, 5}
    assert u.mean() == pytest.approx(4.0, abs=0.1)


def test_normal_mean_and_clip() -> None:
    x = NormalLength(mean=1000, std=100).sample(rng(), 20000)
    assert x.mean() == pytest.approx(1000, abs=5)
    clipped = NormalLength(mean=100, std=100, min_tokens=50, max_tokens=120).sample(rng(), 5000)
    assert clipped.min() == 50 and clipped.max() == 120
    # mass below 50 piles on the bound: P(N(100,100) < 49.5) = Phi(-0.505) ~ 0.307
    assert np.mean(clipped == 50) == pytest.approx(0.307, abs=0.03)


def test_lognormal_median() -> None:
    spec = LognormalLength(median=500, sigma=0.8)
    x = spec.sample(rng(), 20000)
    assert np.median(x) == pytest.approx(500, rel=0.04)
    assert spec.mean_tokens() == pytest.approx(500 * np.exp(0.32))


def test_empirical_values_and_edges() -> None:
    d = EmpiricalLength(values=[10, 20], weights=[3, 1]).sample(rng(), 8000)
    assert np.mean(d == 10) == pytest.approx(0.75, abs=0.02)
    h = EmpiricalLength(edges=[0, 10, 100], weights=[0, 1], min_tokens=0).sample(rng(), 2000)
    assert h.min() >= 10 and h.max() <= 99


def test_invalid_length_specs() -> None:
    with pytest.raises(ValidationError, match="high"):
        UniformLength(low=5, high=3)
    with pytest.raises(ValidationError, match="max_tokens"):
        FixedLength(value=3, min_tokens=10, max_tokens=5)
    with pytest.raises(ValidationError, match="edges"):
        EmpiricalLength(edges=[0, 10], weights=[1, 1])
    with pytest.raises(ValidationError, match="exactly one"):
        EmpiricalLength(weights=[1])
    with pytest.raises(ValidationError):
        FixedLength(value=3, extra_field=1)  # type: ignore[call-arg]
