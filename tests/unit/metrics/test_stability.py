"""Queue growth: TTFT against arrival time, with hand-worked queues."""

from __future__ import annotations

import pytest

from kvbudget.metrics.stability import queue_growth


def _dd1(rate_per_s: float, service_s: float, n: int) -> tuple[list[float], list[float]]:
    """D/D/1 by hand: request i arrives at i/rate, starts at max(arrival, end of i-1)."""
    arrivals, ttfts, free_at = [], [], 0.0
    for i in range(n):
        t = i / rate_per_s
        start = max(t, free_at)
        free_at = start + service_s
        arrivals.append(t)
        ttfts.append(free_at - t)  # first token at the end of the service
    return arrivals, ttfts


def test_overloaded_queue_is_flagged_with_the_service_rate() -> None:
    # 10/s offered, 5/s served: the wait grows by (10/5 - 1) = 1 s per second of arrivals
    growth = queue_growth(*_dd1(10.0, 0.2, 100))
    assert growth is not None
    assert growth.ttft_growth_s_per_s == pytest.approx(1.0, rel=1e-6)
    assert growth.offered_per_s == pytest.approx(10.0)
    assert growth.served_per_s == pytest.approx(5.0, rel=1e-6)
    assert "unstable queue" in growth.line()


@pytest.mark.parametrize(("rate", "service_s"), [(5.0, 0.1), (9.9, 0.1), (1.0, 0.5)])
def test_stable_queue_is_not_flagged(rate: float, service_s: float) -> None:
    assert queue_growth(*_dd1(rate, service_s, 200)) is None


def test_too_few_requests_say_nothing() -> None:
    assert queue_growth(*_dd1(10.0, 0.2, 10)) is None
