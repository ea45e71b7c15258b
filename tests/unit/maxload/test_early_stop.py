"""When a probe's SLO is clearly broken (kvbudget.maxload.early_stop), worked by hand.

Each expected count is hand arithmetic on numpy's linear percentile (index ``h = (n - 1) q``,
interpolating between the sorted samples at ``floor(h)`` and ``floor(h) + 1``); numpy itself is
the oracle of the exhaustive check that the count settles the percentile and one fewer does not.
"""

from __future__ import annotations

import numpy as np
import pytest

from kvbudget.maxload.early_stop import EarlyStop, over_needed
from kvbudget.maxload.slo import parse_slo
from kvbudget.records import RequestRecord


def _rec(ttft_s: float, *, e2e_s: float | None = None, status: str = "ok") -> RequestRecord:
    e2e = ttft_s if e2e_s is None else e2e_s
    return RequestRecord(
        request_id="r",
        source="measured",
        status=status,  # type: ignore[arg-type]
        sent_s=0.0,
        first_token_s=ttft_s,
        done_s=e2e,
        output_tokens=1,
        error_kind={"ok": None, "error": "timeout", "cancelled": "cancelled"}[status],  # type: ignore[arg-type]
    )


def test_hand_worked_counts() -> None:
    # 20 samples, p95: h = 19 * 0.95 = 18.05 -> samples 18 and 19 (0-based): 2 over settle it
    assert over_needed(20, 95) == 2
    # 100 samples, p95: h = 99 * 0.95 = 94.05 -> samples 94..99: 6
    assert over_needed(100, 95) == 6
    # 200 samples, p99: h = 199 * 0.99 = 197.01 -> samples 197..199: 3
    assert over_needed(200, 99) == 3
    # median of 20 (p50): h = 19 * 0.5 = 9.5 -> samples 9..19: 11
    assert over_needed(20, 50) == 11


@pytest.mark.parametrize("q", [50.0, 90.0, 95.0, 99.0, 99.9])
def test_the_count_settles_the_percentile_and_one_fewer_does_not(q: float) -> None:
    limit = 1.0
    for n in range(1, 120):
        k = over_needed(n, q)
        assert 1 <= k <= n
        # k over the limit: whatever the others are (the best case: all 0), the percentile is over
        worst_case_others = np.array([limit * 1.001] * k + [0.0] * (n - k))
        assert np.percentile(worst_case_others, q) > limit, (n, k)
        # k - 1 over, just over: the others at 0 keep it at or under the limit (not settled)
        if k > 1:
            mendable = np.array([limit * 1.001] * (k - 1) + [0.0] * (n - k + 1))
            assert np.percentile(mendable, q) <= limit, (n, k)


def test_p95_stops_at_the_second_request_over_of_twenty() -> None:
    stop = EarlyStop(parse_slo("ttft_p95<100ms"), 20)
    assert stop(_rec(0.05)) is None  # under
    assert stop(_rec(0.30)) is None  # 1 over: 19 good ones can still hold p95
    assert stop(_rec(0.05)) is None
    reason = stop(_rec(0.30))  # 2 over of 20: settled
    assert reason == "ttft_p95: 2 of 20 planned requests over 100 ms"
    assert stop.term == "ttft_p95"


def test_errors_and_warmup_are_no_samples() -> None:
    stop = EarlyStop(parse_slo("ttft_p95<100ms"), 20)
    for _ in range(5):
        assert stop(_rec(0.5, status="error")) is None
    warm = _rec(0.5).model_copy(update={"warmup": True})
    assert stop(warm) is None and stop(warm) is None
    assert stop.term is None


def test_mean_stops_once_the_sum_exceeds_limit_times_planned() -> None:
    # mean e2e < 100 ms over 4 planned: stop once the finished sum exceeds 0.4 s
    stop = EarlyStop(parse_slo("e2e_mean<100ms"), 4)
    assert stop(_rec(0.01, e2e_s=0.15)) is None  # 0.15
    assert stop(_rec(0.01, e2e_s=0.15)) is None  # 0.30
    reason = stop(_rec(0.01, e2e_s=0.15))  # 0.45 > 0.40
    assert reason is not None and reason.startswith("e2e_mean:")


def test_goodput_stops_when_the_fraction_cannot_reach_the_floor() -> None:
    # goodput >= 0.9 of 20: 2 bad leave 18 / 20 = 0.9 (met); the third bad leaves 17 / 20
    stop = EarlyStop(parse_slo("ttft<100ms,goodput>=0.9"), 20)
    assert stop(_rec(0.5)) is None
    assert stop(_rec(0.01, status="cancelled")) is None  # not ok: counts against goodput
    reason = stop(_rec(0.5))
    assert reason is not None and reason.startswith("goodput: 3 of 20")
    assert stop.term == "goodput"


def test_itl_is_never_stopped_early() -> None:
    stop = EarlyStop(parse_slo("itl_p95<1ms"), 2)
    rec = _rec(0.1).model_copy(update={"token_times_s": [0.1, 0.5, 0.9], "output_tokens": 3})
    assert all(stop(rec) is None for _ in range(5))
