"""numpy draws in chunks equal one whole-array draw; skipped-and-replayed columns equal both.

What the streamed generator rests on (kvbudget.workload.draws): for every distribution the
workload draws from, the values drawn in chunks of any size (odd ones too) are those of one
call, and the generator ends in the same state. The reference is numpy's one call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from kvbudget.workload import draws
from kvbudget.workload.arrival_specs import (
    BurstArrivals,
    ClosedLoopArrivals,
    ConstantArrivals,
    GammaArrivals,
    PoissonArrivals,
    RampArrivals,
    TraceArrivals,
)
from kvbudget.workload.arrival_stream import arrival_column
from kvbudget.workload.draws import Column
from kvbudget.workload.lengths import (
    EmpiricalLength,
    FixedLength,
    LognormalLength,
    NormalLength,
    UniformLength,
)

_EDGES = np.array([1, 5, 100, 2**33, 2**33 + 7])
_BINS = np.random.default_rng(1).integers(0, 4, 1001)

DRAWS: dict[str, Callable[[np.random.Generator, int, int], np.ndarray]] = {
    "exponential": lambda g, a, m: g.exponential(0.05, m),
    "gamma shape<1": lambda g, a, m: g.gamma(0.3, 2.0, m),
    "gamma shape>1": lambda g, a, m: g.gamma(4.0, 2.0, m),
    "normal": lambda g, a, m: g.normal(3.0, 2.0, m),
    "lognormal": lambda g, a, m: g.lognormal(3.0, 2.0, m),
    "random": lambda g, a, m: g.random(m),
    "integers < 2**32": lambda g, a, m: g.integers(3, 32000, size=m, dtype=np.int64),
    "integers default dtype": lambda g, a, m: g.integers(0, 1001, size=m),
    "integers wide": lambda g, a, m: g.integers(0, 2**40, size=m),
    "integers array bounds": lambda g, a, m: g.integers(
        _EDGES[_BINS[a : a + m]], _EDGES[_BINS[a : a + m] + 1]
    ),
    "choice with p": lambda g, a, m: g.choice(5, size=m, p=[0.1, 0.2, 0.3, 0.15, 0.25]),
}


@pytest.mark.parametrize("name", sorted(DRAWS))
@pytest.mark.parametrize("chunk", [1, 2, 7, 64, 333, 1000])
def test_chunks_equal_one_call(name: str, chunk: int) -> None:
    draw = DRAWS[name]
    n = 1001
    one = np.random.default_rng(5)
    whole = draw(one, 0, n)
    parts = np.random.default_rng(5)
    got = np.concatenate([draw(parts, a, min(chunk, n - a)) for a in range(0, n, chunk)])
    assert np.array_equal(whole, got)
    assert one.bit_generator.state == parts.bit_generator.state


LENGTHS: list[Any] = [
    FixedLength(value=7),
    UniformLength(low=3, high=900),
    NormalLength(mean=100, std=80, min_tokens=2),
    LognormalLength(median=200, sigma=1.2, max_tokens=5000),
    EmpiricalLength(edges=[1, 50, 400, 2000], weights=[3, 2, 1]),
    EmpiricalLength(values=[8, 64, 512], weights=[1, 1, 2]),
]


@pytest.mark.parametrize("dist", LENGTHS, ids=lambda d: d.kind)
def test_length_column_replays_sample(dist: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(draws, "SKIP_CHUNK", 11)
    n = 500
    one = np.random.default_rng(3)
    want = dist.sample(one, n)
    after = one.random()
    rng = np.random.default_rng(3)
    col = Column(rng, dist.stages(), n)
    assert rng.random() == after  # skipping left the stream where sample() left it
    got = np.concatenate([dist.finish(col.take(m)) for m in (1, 98, 3, 398)])
    assert np.array_equal(got, want)
    with pytest.raises(ValueError, match="past"):
        col.take(1)


def _ramp(process: str) -> RampArrivals:
    stages = [{"rate_per_s": 5, "duration_s": 20}, {"rate_per_s": 2.5, "duration_s": 10.5},
              {"rate_per_s": 9, "duration_s": 4}]  # fmt: skip
    return RampArrivals.model_validate({"stages": stages, "process": process})


ARRIVALS: list[tuple[Any, int | None, float | None]] = [
    (PoissonArrivals(rate_per_s=20), 777, None),
    (PoissonArrivals(rate_per_s=20), None, 30.0),
    (PoissonArrivals(rate_per_s=20), 300, 30.0),
    (PoissonArrivals(rate_per_s=20), 0, 30.0),
    (GammaArrivals(rate_per_s=5, cv=20.0), None, 100.0),  # bursty: the renewal loop extends
    (GammaArrivals(rate_per_s=5, cv=20.0), 700, 100.0),
    (GammaArrivals(rate_per_s=5, cv=0.5), 400, None),
    (ConstantArrivals(rate_per_s=3.3), None, 100.0),
    (ConstantArrivals(rate_per_s=3.3), 50, 100.0),
    (BurstArrivals(at_s=2.0), 90, None),
    (ClosedLoopArrivals(concurrency=3), 90, None),
    (_ramp("poisson"), None, None),
    (_ramp("poisson"), 150, None),
    (_ramp("poisson"), None, 25.0),
    (_ramp("poisson"), 120, 25.0),
    (_ramp("constant"), None, 25.0),
    (_ramp("constant"), 40, None),
    (TraceArrivals(timestamps_s=[3.0, 1.0, 2.0]), None, None),
]


@pytest.mark.parametrize(("spec", "num", "duration"), ARRIVALS)
def test_arrival_column_replays_times(
    spec: Any, num: int | None, duration: float | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(draws, "SKIP_CHUNK", 17)
    one = np.random.default_rng(3)
    want = spec.times(one, num, duration)
    after = one.random()
    rng = np.random.default_rng(3)
    col = arrival_column(spec, rng, num, duration)
    assert rng.random() == after
    assert col.size == want.size
    assert col.nondecreasing == (not bool(np.any(np.diff(want) < 0)))
    sizes = [1, 5, 64, 23]
    parts: list[np.ndarray] = []
    left = col.size
    while left:
        m = min(sizes[len(parts) % len(sizes)], left)
        parts.append(col.take(m))
        left -= m
    got = np.concatenate(parts) if parts else np.empty(0)
    assert np.array_equal(got, want)


def test_bursty_gamma_extends_the_renewal() -> None:
    """The case above does exercise the batches added to the last time (by its batch count)."""
    rng = np.random.default_rng(3)
    col = arrival_column(GammaArrivals(rate_per_s=5, cv=20.0), rng, None, 100.0)
    assert len(col._batches) > 2  # type: ignore[attr-defined]
