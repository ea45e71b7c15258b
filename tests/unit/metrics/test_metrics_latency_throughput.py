"""Latencies, throughput, goodput and the run summary from hand-built RequestRecords."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from kvbudget.metrics.latency import collect_latencies, record_latencies
from kvbudget.metrics.run import summarize_run
from kvbudget.metrics.slo import SloSpec, check_percentile_ceiling, goodput, meets_slo
from kvbudget.metrics.summary import summarize
from kvbudget.metrics.throughput import throughput, throughput_of_runs, window_s
from kvbudget.records import RequestRecord


def rec(rid: str, **kw: Any) -> RequestRecord:
    base: dict[str, Any] = {"request_id": rid, "source": "simulated", "status": "ok"}
    base.update(kw)
    return RequestRecord(**base)


def test_hand_worked_latencies() -> None:
    r = rec(
        "a",
        sent_s=1.0,
        first_token_s=1.5,
        done_s=3.5,
        output_tokens=5,
        token_times_s=[1.5, 2.0, 2.0, 3.0, 3.5],
        chunk_times_s=[1.5, 2.0, 3.0, 3.5],
    )
    ttft, tpot, e2e = record_latencies(r)
    assert ttft == pytest.approx(0.5)
    assert e2e == pytest.approx(2.5)
    assert tpot == pytest.approx((2.5 - 0.5) / 4)
    s = collect_latencies([r])
    assert s.itl_s.tolist() == pytest.approx([0.5, 0.0, 1.0, 0.5])
    assert s.itl_chunk_s.tolist() == pytest.approx([0.5, 1.0, 0.5])


def test_record_fields_win_and_statuses() -> None:
    own = rec("a", sent_s=0.0, first_token_s=1.0, done_s=2.0, output_tokens=3, ttft_s=0.25)
    one_token = rec("b", sent_s=0.0, first_token_s=1.0, done_s=1.0, output_tokens=1)
    err = rec("c", status="error", error_kind="timeout", sent_s=0.0)
    cancelled = rec("d", status="cancelled", sent_s=0.0)
    warm = rec("w", warmup=True, sent_s=0.0, first_token_s=9.0, done_s=9.0, output_tokens=1)
    s = collect_latencies([own, one_token, err, cancelled, warm])
    assert s.ttft_s.tolist() == [0.25, 1.0]
    assert s.tpot_s.tolist() == pytest.approx([(2.0 - 0.25) / 2])  # one-token request: no TPOT
    assert (s.num_ok, s.num_error, s.num_cancelled) == (2, 1, 1)
    assert collect_latencies([warm], include_warmup=True).ttft_s.tolist() == [9.0]


def records_for_window() -> list[RequestRecord]:
    return [
        rec("a", sent_s=0.0, first_token_s=0.5, done_s=4.0, output_tokens=10, prompt_tokens=100),
        rec("b", sent_s=1.0, first_token_s=3.0, done_s=6.0, output_tokens=20, prompt_tokens=100),
        rec("c", sent_s=2.0, first_token_s=2.2, done_s=10.0, output_tokens=30, prompt_tokens=100),
        rec("d", status="error", error_kind="http_status", http_status=500, sent_s=3.0, done_s=3.1),
    ]


def test_throughput_hand_worked() -> None:
    tp = throughput(records_for_window())
    assert tp.window_s == pytest.approx(10.0)
    assert tp.requests_per_s == pytest.approx(0.3)
    assert tp.output_tokens_per_s == pytest.approx(6.0)
    assert tp.prompt_tokens_per_s == pytest.approx(30.0)
    assert (tp.num_requests, tp.num_ok, tp.num_error) == (4, 3, 1)
    assert throughput([]).requests_per_s is None


def test_runs_with_their_own_clocks_add_their_windows() -> None:
    """Two repetitions, each on its own clock: windows 10 s (0 -> 10) and 4 s (1 -> 5) add to
    14 s; 5 ok requests (3 + 2) and 100 output tokens (10+20+30 + 15+25) over 14 s (hand arithmetic). The idle 1 s before
    the second run's first send is not serving time."""
    first = records_for_window()
    second = [
        rec("e", sent_s=1.0, first_token_s=1.5, done_s=3.0, output_tokens=15),
        rec("f", sent_s=2.0, first_token_s=2.5, done_s=5.0, output_tokens=25),
    ]
    assert window_s(first) == 10.0 and window_s(second) == 4.0
    tp = throughput_of_runs([first, second])
    assert tp.window_s == 14.0
    assert tp.num_ok == 5 and tp.num_error == 1
    assert tp.requests_per_s == pytest.approx(5 / 14)
    assert tp.output_tokens_per_s == pytest.approx(100 / 14)


def test_window_is_zero_without_a_send_or_a_finish() -> None:
    assert window_s([]) == 0.0
    assert window_s([rec("a", status="cancelled", sent_s=1.0)]) == 0.0
    assert throughput_of_runs([[]]).requests_per_s is None


def test_goodput_hand_worked() -> None:
    recs = records_for_window()
    slo = SloSpec(ttft_s_max=1.0)
    assert [meets_slo(r, slo) for r in recs] == [True, False, True, False]
    g = goodput(recs, slo)
    assert g.goodput_fraction == pytest.approx(0.5)
    assert g.goodput_requests_per_s == pytest.approx(0.2)
    tight = SloSpec(tpot_s_max=0.2)  # tpot a: 3.5/9=0.39, b: 3/19=0.16, c: 7.8/29=0.27
    assert [meets_slo(r, tight) for r in recs] == [False, True, False, False]


def test_order_statistic_ci_of_the_median_n100_hand_worked() -> None:
    # Distribution-free 95 % CI of the median for n = 100 (classic binomial table): ranks 40 and
    # 61, i.e. [x_(40), x_(61)], coverage P(40 <= Binom(100, 1/2) <= 60) = 0.9648 >= 0.95; the
    # one-step-narrower [x_(41), x_(60)] covers only 0.9431.
    def coverage(lo: int, hi: int) -> float:
        return sum(math.comb(100, k) for k in range(lo, hi)) / 2**100

    assert coverage(40, 61) == pytest.approx(0.9648, abs=1e-4)
    assert coverage(41, 60) < 0.95
    summ = summarize(np.arange(1.0, 101.0), np.random.default_rng(0), method="order")
    est = summ.percentiles["p50"]
    assert (est.ci_low, est.ci_high) == (40.0, 61.0)


def test_percentile_ceiling_check() -> None:
    summ = summarize(
        np.arange(1.0, 101.0), np.random.default_rng(0), metric="ttft_s", method="order"
    )
    # type-7 p50 of 1..100 = 50.5 (worked by hand); its 95 % CI is [40, 61] (test above)
    check = check_percentile_ceiling(summ, 50, 51.0)
    assert check.value == pytest.approx(50.5)
    assert check.ci_high == 61.0
    assert check.point_within is True
    assert check.interval_within is False  # 61 > 51: the point passes, the interval does not
    assert check_percentile_ceiling(summ, 50, 61.0).interval_within is True
    assert check_percentile_ceiling(summ, 50, 50.0).point_within is False


def test_summarize_run_flat_keys() -> None:
    out = summarize_run(records_for_window(), np.random.default_rng(0), slo=SloSpec(ttft_s_max=1))
    flat = out.flat()
    for key in ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "itl_p99_s", "e2e_p90_s"):
        assert key in flat
    assert flat["requests_total"] == 4
    assert flat["ttft_p50_s"] == pytest.approx(0.5)  # median of 0.5, 2.0, 0.2
    assert flat["goodput_fraction"] == pytest.approx(0.5)
    assert any("p99" in w for w in out.warnings)
