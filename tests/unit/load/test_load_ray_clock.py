"""The clock-offset estimate of Ray load workers (NTP min-RTT), against clocks with known skew."""

from __future__ import annotations

import itertools

import pytest

from kvbudget.load.ray_workers import estimate_offset


def test_offset_within_half_rtt_of_the_known_skew() -> None:
    now = [100.0]
    # each call to the remote clock takes a different (asymmetric) time: out 3 ms, back 1 ms,
    # or out 20 ms, back 40 ms; the remote clock runs 5.25 s ahead of the local one
    delays = itertools.cycle([(0.020, 0.040), (0.003, 0.001), (0.050, 0.010)])
    skew = 5.25

    def local() -> float:
        return now[0]

    def remote() -> float:
        out, back = next(delays)
        now[0] += out
        reading = now[0] + skew
        now[0] += back
        return reading

    offset, rtt = estimate_offset(local, remote, pings=6)
    assert rtt == pytest.approx(0.004)  # the smallest round trip is chosen
    # (3 ms out, 1 ms back): estimate = skew + (3 - 1) / 2 ms, within rtt / 2 of the truth
    assert offset == pytest.approx(skew + 0.001)
    assert abs(offset - skew) <= rtt / 2


def test_same_clock_is_zero_offset() -> None:
    ticks = itertools.count()

    def clock() -> float:
        return float(next(ticks))

    offset, rtt = estimate_offset(clock, clock, pings=3)
    assert (offset, rtt) == (0.0, 2.0)
