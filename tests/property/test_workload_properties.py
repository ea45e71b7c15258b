"""Hypothesis properties of the workload generators and the tokenizer."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbudget.workload.arrivals import (
    constant_arrivals,
    gamma_arrivals,
    poisson_arrivals,
    ramp_arrivals,
)
from kvbudget.workload.prefixes import zipf_probabilities
from kvbudget.workload.spec import generate, workload_from_dict
from kvbudget.workload.tokenizer import SyntheticTokenizer, get_tokenizer

seeds = st.integers(min_value=0, max_value=2**32 - 1)
rates = st.floats(min_value=0.05, max_value=500.0)
counts = st.integers(min_value=0, max_value=300)


@settings(max_examples=60, deadline=None)
@given(seed=seeds, rate=rates, n=counts, cv=st.floats(min_value=0.2, max_value=5.0))
def test_arrivals_sorted_nonnegative_count(seed: int, rate: float, n: int, cv: float) -> None:
    for t in (
        poisson_arrivals(np.random.default_rng(seed), rate, num_requests=n),
        gamma_arrivals(np.random.default_rng(seed), rate, cv, num_requests=n),
        constant_arrivals(rate, num_requests=n),
    ):
        assert t.size == n
        assert np.all(t >= 0)
        assert np.all(np.diff(t) >= 0)


@settings(max_examples=40, deadline=None)
@given(seed=seeds, rate=rates, duration=st.floats(min_value=0.1, max_value=20.0), n=counts)
def test_duration_and_count_limits(seed: int, rate: float, duration: float, n: int) -> None:
    t = poisson_arrivals(np.random.default_rng(seed), rate, num_requests=n, duration_s=duration)
    assert t.size <= n
    assert np.all(t < duration)
    again = poisson_arrivals(np.random.default_rng(seed), rate, num_requests=n, duration_s=duration)
    assert np.array_equal(t, again)
    r = ramp_arrivals(np.random.default_rng(seed), [(rate, duration), (rate * 2, duration)])
    assert np.all(np.diff(r) >= 0) and np.all(r < 2 * duration)


@settings(max_examples=30, deadline=None)
@given(seed=seeds, n=st.integers(min_value=1, max_value=40), groups=st.integers(0, 5))
def test_generate_deterministic_and_counts(seed: int, n: int, groups: int) -> None:
    data = {
        "num_requests": n,
        "arrivals": {"kind": "gamma", "rate_per_s": 3.0, "cv": 2.0},
        "input_tokens": {"kind": "uniform", "low": 1, "high": 64},
        "output_tokens": {"kind": "lognormal", "median": 20, "sigma": 1.0, "max_tokens": 200},
        "prefix": {"num_groups": groups, "group_prefix_tokens": 8 if groups else 0},
    }
    spec = workload_from_dict(data)
    a = generate(spec, np.random.default_rng(seed))
    b = generate(spec, np.random.default_rng(seed))
    assert a == b
    assert len(a) == n
    times = [r.arrival_s for r in a]
    assert times == sorted(times) and times[0] >= 0
    assert all(r.output_tokens >= 1 and r.prompt_tokens >= 1 for r in a)


@given(n=st.integers(1, 200), s=st.floats(min_value=0.0, max_value=4.0))
def test_zipf_popularity_non_increasing(n: int, s: float) -> None:
    p = zipf_probabilities(n, s)
    assert abs(p.sum() - 1.0) < 1e-9
    assert np.all(np.diff(p) <= 1e-15)


@settings(max_examples=80)
@given(ids=st.lists(st.integers(0, 31_999), max_size=200))
def test_tokenizer_roundtrip_ids(ids: list[int]) -> None:
    tok = get_tokenizer()
    text = tok.decode(ids)
    assert tok.encode(text) == ids
    assert tok.decode(tok.encode(text)) == text


@settings(max_examples=80)
@given(text=st.text(max_size=200))
def test_tokenizer_any_text_stable(text: str) -> None:
    tok = SyntheticTokenizer(1000)
    ids = tok.encode(text)
    assert len(ids) == len(text.split())
    assert all(0 <= i < 1000 for i in ids)
    assert tok.encode(tok.decode(ids)) == ids
