"""Hypothesis properties of the statistics and of trace round trips."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbudget.metrics.stats import auc, hodges_lehmann, holm
from kvbudget.metrics.summary import summarize
from kvbudget.workload.request import PlannedRequest
from kvbudget.workload.traces import export_trace, read_trace

finite = st.floats(min_value=-1e3, max_value=1e3, allow_nan=False, allow_infinity=False)
samples = st.lists(finite, min_size=1, max_size=40)


@settings(max_examples=60, deadline=None)
@given(x=samples, y=samples)
def test_auc_complementary_and_hl_antisymmetric(x: list[float], y: list[float]) -> None:
    a = auc(x, y)
    assert 0.0 <= a <= 1.0
    assert abs(a + auc(y, x) - 1.0) < 1e-9
    h = hodges_lehmann(x, y)
    assert abs(h.shift + hodges_lehmann(y, x).shift) < 1e-9
    assert h.ci_low <= h.shift <= h.ci_high


@given(p=st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=1, max_size=20))
def test_holm_adjusted_bounds_and_order(p: list[float]) -> None:
    res = holm(p)
    adj = np.asarray(res.adjusted)
    assert np.all(adj >= np.asarray(p) - 1e-15) and np.all(adj <= 1.0)
    order = np.argsort(p, kind="stable")
    assert np.all(np.diff(adj[order]) >= -1e-15)  # monotone in the raw p order


@settings(max_examples=40, deadline=None)
@given(x=st.lists(finite, min_size=1, max_size=60), seed=st.integers(0, 2**31))
def test_summary_ci_brackets_and_ordering(x: list[float], seed: int) -> None:
    s = summarize(x, np.random.default_rng(seed), num_bootstrap=200)
    values = [s.percentiles[k].value for k in ("p50", "p90", "p95", "p99")]
    assert all(v is not None for v in values)
    assert values == sorted(values)  # type: ignore[type-var]
    for est in s.percentiles.values():
        assert est.ci_low is not None and est.ci_high is not None
        assert min(x) <= est.ci_low <= est.ci_high <= max(x)


prompts = st.lists(
    st.lists(st.integers(0, 31_999), min_size=1, max_size=40), min_size=1, max_size=8
)


@settings(max_examples=40, deadline=None)
@given(ids=prompts, block=st.integers(1, 8))
def test_trace_roundtrip_and_hash_sharing(ids: list[list[int]], block: int) -> None:
    reqs = [
        PlannedRequest(
            request_id=f"r{i}", arrival_s=float(i), prompt_token_ids=tuple(p), output_tokens=1
        )
        for i, p in enumerate(ids)
    ]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.jsonl"
        export_trace(reqs, path, block_size=block, keep_prompts=True)
        back = read_trace(path)
    assert [r.prompt_token_ids for r in back] == ids
    for a, ra in zip(ids, back, strict=True):
        for b, rb in zip(ids, back, strict=True):
            for i in range(min(len(ra.hash_ids), len(rb.hash_ids))):
                same_blocks = a[: (i + 1) * block] == b[: (i + 1) * block]
                assert (ra.hash_ids[i] == rb.hash_ids[i]) == same_blocks
