"""Arrival processes: when each planned request is offered to the target.

Every function returns a sorted ``numpy`` float64 array of arrival offsets in seconds from
the start of the run (>= 0) and draws randomness only from the ``numpy.random.Generator``
passed in. Count and duration limits: ``num_requests`` caps the count, ``duration_s`` keeps
arrivals strictly before ``duration_s``; when both are given the first limit reached wins;
at least one is required for open-ended processes.

Processes (the first arrival of a random process comes after one gap, as in a renewal
process started at t = 0; deterministic processes start at t = 0):

- ``poisson``: exponential gaps with mean ``1/rate_per_s``.
- ``gamma``: gamma gaps with mean ``1/rate_per_s`` and coefficient of variation ``cv``
  (shape ``k = 1/cv**2``, scale ``1/(rate_per_s*k)``); ``cv = 1`` is Poisson, ``cv > 1`` is
  burstier, ``cv < 1`` more regular.
- ``constant``: ``i / rate_per_s``.
- ``burst``: every request at ``at_s`` (all at once).
- ``ramp``: a step ramp, a list of ``(rate_per_s, duration_s)`` stages each run as a Poisson
  (or constant) process, back to back.
- ``trace``: replay recorded timestamps, shifted so the first is 0 and divided by ``speedup``.
- closed loop: no arrival times; ``ClosedLoopArrivals`` (``arrival_specs``) describes it and the runner keeps
  ``concurrency`` requests in flight (all planned arrivals are 0).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from kvbudget.errors import ConfigError

GapSampler = Callable[[int], np.ndarray]


def _check_positive(name: str, value: float) -> None:
    if not (value > 0 and math.isfinite(value)):
        raise ConfigError(f"{name}={value} must be a positive finite number", field=name)


def _check_limits(num_requests: int | None, duration_s: float | None) -> None:
    if num_requests is None and duration_s is None:
        raise ConfigError(
            "arrivals need num_requests or duration_s (or both); set one, e.g. num_requests: 1000",
            field="num_requests",
        )
    if num_requests is not None and num_requests < 0:
        raise ConfigError(f"num_requests={num_requests} must be >= 0", field="num_requests")
    if duration_s is not None and not (duration_s > 0 and math.isfinite(duration_s)):
        raise ConfigError(
            f"duration_s={duration_s} must be a positive finite number of seconds",
            field="duration_s",
        )


def _renewal(
    gaps: GapSampler,
    rate_per_s: float,
    num_requests: int | None,
    duration_s: float | None,
) -> np.ndarray:
    """Cumulative sums of gaps, cut at the count and/or duration (vectorised in chunks)."""
    if num_requests is not None and (duration_s is None or num_requests == 0):
        return np.cumsum(gaps(num_requests))
    assert duration_s is not None
    expected = rate_per_s * duration_s
    chunk = int(expected + 6.0 * math.sqrt(expected) + 16)
    if num_requests is not None:
        chunk = min(chunk, num_requests)
    times = np.cumsum(gaps(chunk))
    while times[-1] < duration_s and (num_requests is None or times.size < num_requests):
        more = gaps(max(16, chunk // 4))
        times = np.concatenate([times, times[-1] + np.cumsum(more)])
    times = times[times < duration_s]
    if num_requests is not None:
        times = times[:num_requests]
    return times


def poisson_arrivals(
    rng: np.random.Generator,
    rate_per_s: float,
    *,
    num_requests: int | None = None,
    duration_s: float | None = None,
) -> np.ndarray:
    """Poisson process at ``rate_per_s`` (exponential gaps)."""
    _check_positive("rate_per_s", rate_per_s)
    _check_limits(num_requests, duration_s)
    scale = 1.0 / rate_per_s
    return _renewal(lambda n: rng.exponential(scale, n), rate_per_s, num_requests, duration_s)


def gamma_arrivals(
    rng: np.random.Generator,
    rate_per_s: float,
    cv: float,
    *,
    num_requests: int | None = None,
    duration_s: float | None = None,
) -> np.ndarray:
    """Gamma renewal process: mean gap ``1/rate_per_s``, gap CV ``cv`` (burstiness)."""
    _check_positive("rate_per_s", rate_per_s)
    _check_positive("cv", cv)
    _check_limits(num_requests, duration_s)
    shape = 1.0 / (cv * cv)
    scale = 1.0 / (rate_per_s * shape)
    return _renewal(lambda n: rng.gamma(shape, scale, n), rate_per_s, num_requests, duration_s)


def constant_arrivals(
    rate_per_s: float,
    *,
    num_requests: int | None = None,
    duration_s: float | None = None,
) -> np.ndarray:
    """Constant rate: request ``i`` at ``i / rate_per_s`` (starts at 0)."""
    _check_positive("rate_per_s", rate_per_s)
    _check_limits(num_requests, duration_s)
    count = num_requests
    if duration_s is not None:
        in_window = math.ceil(duration_s * rate_per_s - 1e-9)
        count = in_window if count is None else min(count, in_window)
    assert count is not None
    times = np.arange(count, dtype=np.float64) / rate_per_s
    if duration_s is not None:
        times = times[times < duration_s]
    return times


def burst_arrivals(num_requests: int, *, at_s: float = 0.0) -> np.ndarray:
    """All ``num_requests`` at once, at ``at_s``."""
    _check_limits(num_requests, None)
    if at_s < 0 or not math.isfinite(at_s):
        raise ConfigError(f"at_s={at_s} must be >= 0 seconds", field="at_s")
    return np.full(num_requests, float(at_s), dtype=np.float64)


def ramp_arrivals(
    rng: np.random.Generator,
    stages: Sequence[tuple[float, float]],
    *,
    process: str = "poisson",
    num_requests: int | None = None,
) -> np.ndarray:
    """Step ramp: ``stages`` of ``(rate_per_s, duration_s)`` back to back."""
    if not stages:
        raise ConfigError("ramp needs at least one stage (rate_per_s, duration_s)", field="stages")
    if process not in ("poisson", "constant"):
        raise ConfigError(
            f"ramp process={process!r} is not supported; use 'poisson' or 'constant'",
            field="process",
        )
    parts: list[np.ndarray] = []
    start_s = 0.0
    for rate_per_s, stage_s in stages:
        if process == "poisson":
            part = poisson_arrivals(rng, rate_per_s, duration_s=stage_s)
        else:
            part = constant_arrivals(rate_per_s, duration_s=stage_s)
        parts.append(part + start_s)
        start_s += stage_s
    times = np.concatenate(parts)
    if num_requests is not None:
        _check_limits(num_requests, None)
        times = times[:num_requests]
    return times


def trace_arrivals(
    timestamps_s: Sequence[float] | np.ndarray,
    *,
    speedup: float = 1.0,
    num_requests: int | None = None,
    duration_s: float | None = None,
) -> np.ndarray:
    """Replay recorded timestamps: sorted, shifted to start at 0, divided by ``speedup``."""
    _check_positive("speedup", speedup)
    times = np.sort(np.asarray(timestamps_s, dtype=np.float64))
    if times.size and not np.all(np.isfinite(times)):
        raise ConfigError("trace timestamps must be finite numbers", field="timestamp")
    if times.size:
        times = (times - times[0]) / speedup
    if duration_s is not None:
        times = times[times < duration_s]
    if num_requests is not None:
        times = times[:num_requests]
    return times
