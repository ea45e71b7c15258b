"""Exact percentiles past the in-memory buffer: bit for bit numpy's, on random data with ties."""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest

from kvbudget.metrics import spilled
from kvbudget.metrics.spilled import (
    ExactSum,
    SpilledColumns,
    median_of,
    percentile,
    percentiles,
    select,
)
from kvbudget.metrics.stability import _by_arrival_rank, queue_growth, queue_growth_spilled


def _store(values: np.ndarray, buffer_rows: int) -> SpilledColumns:
    store = SpilledColumns(buffer_rows=buffer_rows)
    for v in values.tolist():
        store.append(v)
    return store


def _datasets(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    return [
        rng.lognormal(-2.0, 0.7, n),  # latency-like, spread over exponents
        rng.integers(0, 7, n).astype(np.float64) * 0.125,  # heavy ties
        np.round(rng.normal(0.0, 3.0, n), 1),  # negatives, ties, zeros
        np.full(n, 0.05),  # all equal
    ]


@pytest.mark.parametrize("n", [1, 2, 3, 17, 100, 1001])
def test_percentile_matches_numpy_bitwise_below_and_above_the_buffer(n: int) -> None:
    rng = np.random.default_rng(n)
    for values in _datasets(rng, n):
        for buffer_rows in (n + 5, max(1, n // 3), 7):
            store = _store(values, buffer_rows)
            assert store.spilled == (buffer_rows <= n)
            for q in (0, 1, 25, 50, 73, 90, 99, 100):
                want = float(np.percentile(values, q))
                got = percentile(store, q)
                assert got is not None
                assert got.hex() == want.hex(), (n, buffer_rows, q, got, want)
            store.close()


def test_percentile_many_random_sizes_and_quantiles() -> None:
    rng = np.random.default_rng(7)
    for _ in range(200):
        n = int(rng.integers(1, 400))
        values = rng.choice(rng.lognormal(-2.0, 1.0, 40), size=n)  # ties
        store = _store(values, int(rng.integers(1, 64)))
        q = int(rng.integers(0, 101))
        got = percentile(store, q)
        assert got is not None
        assert got.hex() == float(np.percentile(values, q)).hex()


def test_select_deep_refinement_and_collect(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tiny collect limit forces all four 16-bit passes, down to a single key."""
    monkeypatch.setattr(spilled, "COLLECT_LIMIT", 0)
    rng = np.random.default_rng(3)
    values = np.concatenate([rng.normal(1.0, 1e-12, 300), [1.0] * 50, rng.normal(0, 1, 100)])
    store = _store(values, 32)
    ordered = np.sort(values)
    ranks = [0, 1, 149, 150, 151, 449]
    got = select(store.column(0), ranks)
    assert {r: got[r] for r in ranks} == {r: float(ordered[r]) for r in ranks}


def test_median_matches_numpy() -> None:
    rng = np.random.default_rng(5)
    for n in (1, 2, 9, 10, 333):
        values = rng.integers(0, 30, n) / 7.0
        store = _store(values, 4)
        assert median_of(store.column(0), n).hex() == float(np.median(values)).hex()


@pytest.mark.parametrize("n", [1, 2, 17, 1001])
def test_percentiles_at_once_match_numpy_bitwise(n: int) -> None:
    """All of them from one selection: each still numpy.percentile's bits (numpy computes)."""
    rng = np.random.default_rng(100 + n)
    qs = (0.0, 1.0, 50.0, 90.0, 95.0, 99.0, 99.9, 100.0)
    for values in _datasets(rng, n):
        for buffer_rows in (n + 5, max(1, n // 3), 7):
            store = _store(values, buffer_rows)
            got = percentiles(store, qs)
            for q in qs:
                value = got[q]
                assert value is not None
                assert value.hex() == float(np.percentile(values, q)).hex(), (n, q)
            store.close()
    assert percentiles(SpilledColumns(), (50.0,)) == {50.0: None}
    nan_store = _store(np.array([1.0, math.nan, 2.0, 3.0]), 2)
    assert all(math.isnan(v or 0.0) for v in percentiles(nan_store, (50.0, 99.0)).values())


def test_empty_and_nan() -> None:
    assert percentile(SpilledColumns(), 50) is None
    store = _store(np.array([1.0, math.nan, 2.0, 3.0]), 2)
    got = percentile(store, 50)
    assert got is not None and math.isnan(got)


def test_temporary_file_is_anonymous_and_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    store = _store(np.arange(10.0), 3)
    assert store.spilled
    f = store._file
    assert f is not None
    # nothing named in TMPDIR: the file is unlinked from the start, so gone on any exit
    assert os.listdir(tmp_path) == []
    store.close()
    assert f.closed and not store.spilled


def test_rows_come_back_in_order() -> None:
    store = SpilledColumns(2, buffer_rows=3)
    for i in range(10):
        store.append2(float(i), float(-i))
    assert len(store) == 10
    block = store.read_all()
    assert block[:, 0].tolist() == [float(i) for i in range(10)]
    assert block[:, 1].tolist() == [float(-i) for i in range(10)]


def _rows(arrival: np.ndarray, ttft: np.ndarray, buffer_rows: int) -> SpilledColumns:
    store = SpilledColumns(2, buffer_rows=buffer_rows)
    for a, t in zip(arrival.tolist(), ttft.tolist(), strict=True):
        store.append2(a, t)
    return store


@pytest.mark.parametrize("buffer_rows", [10_000, 16, 5])
def test_queue_check_same_answer_spilled_or_not(buffer_rows: int) -> None:
    rng = np.random.default_rng(11)
    n = 400
    # tied arrivals (bursts of 7) in finish order, not arrival order
    arrival = np.repeat(np.arange(n // 7 + 1, dtype=np.float64), 7)[:n]
    order = rng.permutation(n)
    stable_ttft = rng.lognormal(-2.0, 0.3, n)
    growing_ttft = 0.05 + 0.8 * arrival + rng.exponential(0.01, n)
    for ttft in (stable_ttft, growing_ttft, np.where(arrival < 30, 1.0, 3.0)):
        a, t = arrival[order], ttft[order]
        want = queue_growth(a, t)
        got = queue_growth_spilled(_rows(a, t, buffer_rows))
        assert got == want
    assert queue_growth(arrival[order], growing_ttft[order]) is not None


def test_quarter_medians_break_arrival_ties_by_order_appended() -> None:
    """A tie run across the first quarter's edge: the stable sort keeps the first appended."""
    arrival = np.array([0.0] * 4 + [1.0] * 8 + [float(i) for i in range(2, 30)])
    ttft = np.array([0.1] * 4 + [9.0] * 6 + [0.1] * 2 + [0.2] * 28)
    order = np.argsort(arrival, kind="stable")
    want = float(np.median(ttft[order][:10]))
    assert want == 9.0  # by hand: four 0.1, then the first six 9.0 (the last two 0.1 are out)
    store = _rows(arrival, ttft, 4)
    assert median_of(_by_arrival_rank(store, 0, 10), 10) == want
    last = float(np.median(ttft[order][-10:]))
    assert median_of(_by_arrival_rank(store, 30, 40), 10) == last
    assert queue_growth_spilled(store) == queue_growth(arrival, ttft)


def test_exact_sum_is_fsum() -> None:
    rng = np.random.default_rng(2)
    values = (rng.random(20_000) * 10.0 ** rng.integers(-8, 8, 20_000)).tolist()
    acc = ExactSum(buffer_values=97)
    for v in values:
        acc.add(v)
    assert acc.count == len(values)
    assert acc.value().hex() == math.fsum(values).hex()
    assert ExactSum().value() == 0.0


@pytest.mark.parametrize("buffer_rows", [5, 1000, 100_000])
def test_store_exact_sum_is_fsum(buffer_rows: int) -> None:
    """A store's exact sum, spilled or not: math.fsum of the values (the standard library)."""
    rng = np.random.default_rng(4)
    values = rng.lognormal(-3.0, 2.0, 5000) * 10.0 ** rng.integers(-6, 6, 5000)
    store = _store(values, buffer_rows)
    assert store.exact_sum().hex() == math.fsum(values.tolist()).hex()
    store.close()
    assert SpilledColumns().exact_sum() == 0.0


def test_exact_sum_keeps_every_bit_across_folds() -> None:
    """Magnitudes 2**-1000 to 2**1000 with cancellations: math.fsum of the whole list (the
    standard library, not the code under test) is what value() must give."""
    rng = np.random.default_rng(3)
    signs = rng.choice([-1.0, 1.0], 30_000)
    values = (signs * rng.random(30_000) * 2.0 ** rng.integers(-1000, 1000, 30_000)).tolist()
    values += [-v for v in values[:5000]] + [5e-324, -5e-324, 5e-324]
    acc = ExactSum(buffer_values=61)
    for v in values:
        acc.add(v)
    assert acc.value().hex() == math.fsum(values).hex()
