"""Arrival times handed out in order, without holding them: ``ArrivalSpec.times`` streamed.

:func:`arrival_column` returns an object with ``size`` (how many arrivals ``times`` gives),
``nondecreasing`` and ``take(m)``: the next ``m`` of exactly the values
``spec.times(rng, num_requests, duration_s)`` returns, leaving ``rng`` where ``times`` leaves
it. Poisson and gamma renewals are skipped and replayed (:mod:`kvbudget.workload.draws`):
the first pass draws every gap ``times`` draws, in the same batches (``arrivals._renewal``: one
batch, or a first batch then batches of ``max(16, chunk // 4)`` added to the last time so far)
and counts the times kept; the replay rebuilds the running sums with the same additions in
the same order. Constant, burst and closed-loop arrivals are computed a chunk at a time; a ramp
is its stages' columns back to back, each plus its start. Trace timestamps are computed whole,
as before (8 bytes a session; they are listed in the spec already).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import numpy as np

from kvbudget.workload import arrivals as arr
from kvbudget.workload import draws
from kvbudget.workload.arrival_specs import (
    BurstArrivals,
    ClosedLoopArrivals,
    ConstantArrivals,
    GammaArrivals,
    PoissonArrivals,
    RampArrivals,
)
from kvbudget.workload.draws import generator_at


class ArrivalColumn(Protocol):
    size: int
    nondecreasing: bool

    def take(self, m: int) -> np.ndarray: ...


def arrival_column(
    spec: Any, rng: np.random.Generator, num_requests: int | None, duration_s: float | None
) -> ArrivalColumn:
    """``spec.times(rng, num_requests, duration_s)``, streamed where the process allows."""
    if isinstance(spec, PoissonArrivals | GammaArrivals):
        # validation exactly as times() does it (same errors)
        arr._check_positive("rate_per_s", spec.rate_per_s)
        if isinstance(spec, GammaArrivals):
            arr._check_positive("cv", spec.cv)
        arr._check_limits(num_requests, duration_s)
        return _Renewal(spec, rng, num_requests, duration_s)
    if isinstance(spec, ConstantArrivals):
        arr._check_positive("rate_per_s", spec.rate_per_s)
        arr._check_limits(num_requests, duration_s)
        return _Constant(spec.rate_per_s, num_requests, duration_s)
    if isinstance(spec, RampArrivals):
        return _Ramp(spec, rng, num_requests, duration_s)
    if isinstance(spec, ClosedLoopArrivals | BurstArrivals):
        # no draw; times() for no request checks the limits and raises the same errors
        spec.times(rng, 0 if num_requests is not None else None, duration_s)
        value = spec.at_s if isinstance(spec, BurstArrivals) else 0.0
        assert num_requests is not None
        return _Full(float(value), num_requests)
    return _Whole(spec.times(rng, num_requests, duration_s))


class _Streamed:
    """``size`` values from :meth:`chunks` (a fresh replay each call), handed out by ``take``."""

    size = 0
    nondecreasing = True
    _pending: Iterator[np.ndarray] | None = None
    _buf: np.ndarray = np.empty(0)

    def chunks(self) -> Iterator[np.ndarray]:
        raise NotImplementedError

    def take(self, m: int) -> np.ndarray:
        if self._pending is None:
            self._pending = self.chunks()
        parts = []
        need = m
        while need:
            if not self._buf.size:
                self._buf = next(self._pending)
            part = self._buf[:need]
            self._buf = self._buf[need:]
            parts.append(part)
            need -= part.size
        return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _first(values: Iterator[np.ndarray], size: int) -> Iterator[np.ndarray]:
    """The first ``size`` values of a chunk stream."""
    left = size
    for part in values:
        if left <= 0:
            return
        yield part[:left]
        left -= part.size


class _Whole(_Streamed):
    def __init__(self, times: np.ndarray) -> None:
        self._times = times
        self.size = int(times.size)
        self.nondecreasing = not bool(np.any(np.diff(times) < 0))

    def chunks(self) -> Iterator[np.ndarray]:
        if self.size:
            yield self._times


class _Full(_Streamed):
    def __init__(self, value: float, size: int) -> None:
        self.size = size
        self._value = value

    def chunks(self) -> Iterator[np.ndarray]:
        for a in range(0, self.size, draws.SKIP_CHUNK):
            yield np.full(min(draws.SKIP_CHUNK, self.size - a), self._value, dtype=np.float64)


class _Constant(_Streamed):
    """``i / rate_per_s`` for ``i = 0 ..`` (``arrivals.constant_arrivals``), a chunk at a time."""

    def __init__(
        self, rate_per_s: float, num_requests: int | None, duration_s: float | None
    ) -> None:
        count = num_requests
        if duration_s is not None:
            in_window = math.ceil(duration_s * rate_per_s - 1e-9)
            count = in_window if count is None else min(count, in_window)
        assert count is not None
        self._rate = rate_per_s
        self.size = count
        if duration_s is not None:
            # the times are increasing: those below duration_s are a prefix
            self.size = sum(int(np.count_nonzero(p < duration_s)) for p in self.chunks())

    def chunks(self) -> Iterator[np.ndarray]:
        for a in range(0, self.size, draws.SKIP_CHUNK):
            b = min(a + draws.SKIP_CHUNK, self.size)
            yield np.arange(a, b, dtype=np.float64) / self._rate


class _Ramp(_Streamed):
    """``arrivals.ramp_arrivals``: each stage's process plus the stage's start, back to back,
    cut at ``num_requests`` and then (``RampArrivals.times``) at ``duration_s``."""

    def __init__(
        self,
        spec: RampArrivals,
        rng: np.random.Generator,
        num_requests: int | None,
        duration_s: float | None,
    ) -> None:
        #: (stage's column, its start), every stage drawn as ramp_arrivals draws it
        self._stages: list[tuple[_Streamed, float]] = []
        start_s = 0.0
        for stage in spec.stages:
            part: _Streamed
            if spec.process == "poisson":
                poisson = PoissonArrivals(rate_per_s=stage.rate_per_s)
                part = _Renewal(poisson, rng, None, stage.duration_s)
            else:
                part = _Constant(stage.rate_per_s, None, stage.duration_s)
            self._stages.append((part, start_s))
            start_s += stage.duration_s
        self.size = sum(part.size for part, _ in self._stages)
        if num_requests is not None:
            arr._check_limits(num_requests, None)
            self.size = min(self.size, num_requests)
        if duration_s is not None:
            # sorted: the times below duration_s are a prefix (counted in a replay)
            self.size = sum(int(np.count_nonzero(p < duration_s)) for p in self.chunks())

    def chunks(self) -> Iterator[np.ndarray]:
        def every() -> Iterator[np.ndarray]:
            for part, start_s in self._stages:
                for values in part.chunks():
                    yield values + start_s

        return _first(every(), self.size)


class _Renewal(_Streamed):
    """Running sums of gamma / exponential gaps, as ``arrivals._renewal`` forms them."""

    def __init__(
        self,
        spec: PoissonArrivals | GammaArrivals,
        rng: np.random.Generator,
        num_requests: int | None,
        duration_s: float | None,
    ) -> None:
        rate = spec.rate_per_s
        self._gaps: Callable[[np.random.Generator, int], np.ndarray]
        if isinstance(spec, GammaArrivals):
            shape = 1.0 / (spec.cv * spec.cv)
            scale = 1.0 / (rate * shape)
            self._gaps = lambda g, n: g.gamma(shape, scale, n)
        else:
            scale = 1.0 / rate
            self._gaps = lambda g, n: g.exponential(scale, n)
        self._start = rng.bit_generator.state
        self._like = rng
        #: (gaps in the batch, time it is added to or None for the first batch)
        self._batches: list[tuple[int, float | None]] = []
        if num_requests is not None and (duration_s is None or num_requests == 0):
            self._skip(rng, num_requests, None, None)
            self.size = num_requests
        else:
            assert duration_s is not None
            expected = rate * duration_s
            chunk = int(expected + 6.0 * math.sqrt(expected) + 16)
            if num_requests is not None:
                chunk = min(chunk, num_requests)
            kept = 0
            base: float | None = None
            size = chunk
            total = 0
            while True:
                last, below = self._skip(rng, size, base, duration_s)
                kept += below
                total += size
                if not (last < duration_s and (num_requests is None or total < num_requests)):
                    break
                base = last
                size = max(16, chunk // 4)
            self.size = kept if num_requests is None else min(kept, num_requests)

    def _skip(
        self,
        rng: np.random.Generator,
        size: int,
        base: float | None,
        duration_s: float | None,
    ) -> tuple[float, int]:
        """Draw one batch (values thrown away): its last time, how many are below the limit."""
        self._batches.append((size, base))
        below = 0
        last = 0.0
        for part in self._batch(rng, size, base):
            if duration_s is not None:
                below += int(np.count_nonzero(part < duration_s))
            last = float(part[-1])
        return last, below

    def _batch(
        self, gen: np.random.Generator, size: int, base: float | None
    ) -> Iterator[np.ndarray]:
        """One batch's times (``cumsum`` of its gaps, plus ``base`` after the first batch)."""
        carry: float | None = None
        for a in range(0, size, draws.SKIP_CHUNK):
            gaps = self._gaps(gen, min(draws.SKIP_CHUNK, size - a))
            if carry is not None:
                gaps[0] += carry  # np.cumsum adds in order: carry + first gap, then onwards
            sums = np.cumsum(gaps)
            carry = float(sums[-1])
            yield sums if base is None else base + sums

    def chunks(self) -> Iterator[np.ndarray]:
        gen = generator_at(self._like, self._start)

        def every() -> Iterator[np.ndarray]:
            for size, base in self._batches:
                yield from self._batch(gen, size, base)

        return _first(every(), self.size)
